package watch

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// waitWake waits for a wake on c, up to a generous bound.
func waitWake(t *testing.T, c <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(5 * time.Second):
		t.Fatalf("no wake after %s", what)
	}
}

func drain(c <-chan struct{}) {
	for {
		select {
		case <-c:
		default:
			return
		}
	}
}

// TestDirs: a directory newly watched wakes once; a file created in it
// wakes; a missing directory is reported unwatched; a directory that is
// removed and made again is watched again by the next Watch.
func TestDirs(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	woke := make(chan struct{}, 16)
	d, err := NewDirs(ctx, slog.Default(), func() { woke <- struct{}{} })
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	missing := filepath.Join(dir, "nosuch")
	if un := d.Watch([]string{dir, missing}); !un[missing] || un[dir] {
		t.Fatalf("unwatched %v, want only %s", un, missing)
	}
	waitWake(t, woke, "a new watch")
	drain(woke)
	if un := d.Watch([]string{dir, missing}); len(un) != 1 {
		t.Fatalf("unwatched %v", un)
	}
	select {
	case <-woke:
		t.Fatal("watching the same directories again woke")
	case <-time.After(50 * time.Millisecond):
	}
	if err := os.WriteFile(filepath.Join(dir, "app"), nil, 0o755); err != nil {
		t.Fatal(err)
	}
	waitWake(t, woke, "a file created")

	sub := filepath.Join(dir, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	d.Watch([]string{sub})
	if err := os.Remove(sub); err != nil {
		t.Fatal(err)
	}
	waitWake(t, woke, "the directory removed")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		d.mu.Lock()
		_, held := d.wds[sub]
		d.mu.Unlock()
		if !held {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the removed directory's watch is still held")
		}
		time.Sleep(10 * time.Millisecond)
	}
	drain(woke)
	d.Watch([]string{sub})
	waitWake(t, woke, "the directory watched again")
}

// TestRelevant: link messages and the removal of a root or clsact qdisc
// or of a filter concern hostqos; a leaf qdisc removed or a qdisc added
// does not.
func TestRelevant(t *testing.T) {
	msg := func(typ uint16, parent uint32) []byte {
		b := make([]byte, syscall.NLMSG_HDRLEN+sizeofTcMsg)
		h := (*syscall.NlMsghdr)(unsafe.Pointer(&b[0]))
		h.Len, h.Type = uint32(len(b)), typ
		*(*uint32)(unsafe.Pointer(&b[syscall.NLMSG_HDRLEN+12])) = parent
		return b
	}
	for _, c := range []struct {
		typ    uint16
		parent uint32
		want   bool
	}{
		{unix.RTM_NEWLINK, 0, true},
		{unix.RTM_DELLINK, 0, true},
		{unix.RTM_DELTFILTER, 0xFFFFFFF2, true},
		{unix.RTM_DELQDISC, tcHRoot, true},
		{unix.RTM_DELQDISC, tcHIngress, true},
		{unix.RTM_DELQDISC, 0x48510010, false},
		{unix.RTM_NEWQDISC, tcHRoot, false},
	} {
		if got := relevant(msg(c.typ, c.parent)); got != c.want {
			t.Errorf("message %d parent %#x: relevant %v, want %v", c.typ, c.parent, got, c.want)
		}
	}
}
