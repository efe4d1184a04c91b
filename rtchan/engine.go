package rtchan

import "container/heap"

// clock is what the scheduling core needs from time: the current instant
// (ns) and timed callbacks. The virtual-time engine and the real-time loop
// both provide it; the core never blocks and never starts goroutines, so it
// is deterministic under the virtual engine.
type clock interface {
	now() int64
	at(t int64, fn func()) *event
	cancel(e *event)
}

// event is a timed callback. Events at the same instant run in the order
// they were scheduled.
type event struct {
	t   int64
	seq uint64
	fn  func()
	idx int // heap index, -1 when not queued
}

type evHeap []*event

func (h evHeap) Len() int { return len(h) }
func (h evHeap) Less(i, j int) bool {
	if h[i].t != h[j].t {
		return h[i].t < h[j].t
	}
	return h[i].seq < h[j].seq
}
func (h evHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].idx = i
	h[j].idx = j
}
func (h *evHeap) Push(x any) {
	e := x.(*event)
	e.idx = len(*h)
	*h = append(*h, e)
}
func (h *evHeap) Pop() any {
	old := *h
	n := len(old)
	e := old[n-1]
	old[n-1] = nil
	e.idx = -1
	*h = old[:n-1]
	return e
}

// timers is an ordered set of events, shared by both clocks.
type timers struct {
	h   evHeap
	seq uint64
}

func (q *timers) push(t int64, fn func()) *event {
	q.seq++
	e := &event{t: t, seq: q.seq, fn: fn}
	heap.Push(&q.h, e)
	return e
}

func (q *timers) remove(e *event) {
	if e != nil && e.idx >= 0 && e.idx < len(q.h) && q.h[e.idx] == e {
		heap.Remove(&q.h, e.idx)
	}
}

func (q *timers) peek() *event {
	if len(q.h) == 0 {
		return nil
	}
	return q.h[0]
}

func (q *timers) pop() *event { return heap.Pop(&q.h).(*event) }

// vclock is the deterministic discrete-event engine: time jumps from one
// event to the next.
type vclock struct {
	t int64
	q timers
}

func (v *vclock) now() int64 { return v.t }

func (v *vclock) at(t int64, fn func()) *event {
	if t < v.t {
		t = v.t
	}
	return v.q.push(t, fn)
}

func (v *vclock) cancel(e *event) { v.q.remove(e) }

// step runs the next event; false when none is left.
func (v *vclock) step() bool {
	e := v.q.peek()
	if e == nil {
		return false
	}
	v.q.pop()
	v.t = e.t
	e.fn()
	return true
}

// runUntil runs every event up to and including instant t, then sets the
// clock to t.
func (v *vclock) runUntil(t int64) {
	for {
		e := v.q.peek()
		if e == nil || e.t > t {
			break
		}
		v.step()
	}
	if t > v.t {
		v.t = t
	}
}
