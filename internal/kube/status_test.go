package kube

import (
	"context"
	"fmt"
	"testing"
)

// TestWriteQueue: one pending write per object, the newest; a write of
// what was last written is dropped; the queue holds at most
// maxPendingWrites objects; a failed write is not remembered as written.
func TestWriteQueue(t *testing.T) {
	q := newWriteQueue()
	var did []string
	w := func(name string) func(context.Context) error {
		return func(context.Context) error { did = append(did, name); return nil }
	}
	q.put("a", "1", w("a1"))
	q.put("b", "1", w("b1"))
	q.put("a", "2", w("a2"))
	if q.Pending() != 2 {
		t.Fatalf("%d pending, want 2 (a's newer write replaces its older)", q.Pending())
	}
	for key, pw, ok := q.take(); ok; key, pw, ok = q.take() {
		q.done(key, pw.digest, pw.do(context.Background()))
	}
	if fmt.Sprint(did) != "[a2 b1]" {
		t.Errorf("wrote %v, want [a2 b1] (oldest object first, its newest write)", did)
	}
	q.put("a", "2", w("again"))
	if q.Pending() != 0 {
		t.Error("a write of what was last written is queued")
	}
	q.done("a", "2", fmt.Errorf("conflict"))
	q.put("a", "2", w("retry"))
	if q.Pending() != 1 {
		t.Error("after a failed write the same write is not queued again")
	}
	for i := 0; i < maxPendingWrites+10; i++ {
		q.put(fmt.Sprint("o", i), "1", w("x"))
	}
	if q.Pending() != maxPendingWrites {
		t.Errorf("%d pending, want at most %d", q.Pending(), maxPendingWrites)
	}
}
