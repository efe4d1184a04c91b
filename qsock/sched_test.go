package qsock

import (
	"testing"
	"time"
)

// TestEDFLossy: a late message is dropped, an early one sent; a frame
// shares the fate decided at its first message; a non-droppable message is
// never dropped; the expected queueing delay counts.
func TestEDFLossy(t *testing.T) {
	s, err := newScheduler(Params{Scheduler: EDFLossy})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	past, future := now.Add(-time.Millisecond), now.Add(10*time.Millisecond)
	steps := []struct {
		f      Flags
		qdelay time.Duration
		want   decision
	}{
		{Flags{Deadline: future}, 0, send},
		{Flags{Deadline: past}, 0, drop},
		{Flags{}, 0, send}, // no deadline
		{Flags{Deadline: past, NonDroppable: true}, 0, send},
		{Flags{Deadline: future}, 20 * time.Millisecond, drop}, // cannot make it
		// A late frame: all of it dropped, even parts with a later deadline.
		{Flags{Deadline: past, FrameStart: true}, 0, drop},
		{Flags{Deadline: future}, 0, drop},
		{Flags{Deadline: future, NonDroppable: true}, 0, send},
		{Flags{Deadline: future, FrameEnd: true}, 0, drop},
		// An early frame: all of it sent, even a part that became late.
		{Flags{Deadline: future, FrameStart: true}, 0, send},
		{Flags{Deadline: past}, 0, send},
		{Flags{Deadline: past, FrameEnd: true}, 0, send},
		// After the frame, messages are judged alone again.
		{Flags{Deadline: past}, 0, drop},
		// A one-message frame.
		{Flags{Deadline: past, FrameStart: true, FrameEnd: true}, 0, drop},
		{Flags{Deadline: future}, 0, send},
	}
	for i, st := range steps {
		f := st.f
		if got := s.decide(now, &f, st.qdelay); got != st.want {
			t.Errorf("step %d (%+v, qdelay %v): %v, want %v", i, st.f, st.qdelay, got, st.want)
		}
	}
}

func TestFIFOPacing(t *testing.T) {
	s, _ := newScheduler(Params{Rate: 8000}) // 1000 bytes/s
	now := time.Now()
	if w := s.pace(now, 100); w != 0 {
		t.Errorf("first message waits %v", w)
	}
	if w := s.pace(now, 100); w != 100*time.Millisecond {
		t.Errorf("second message waits %v, want 100ms", w)
	}
	if d := s.decide(now, &Flags{Deadline: now.Add(-time.Second)}, 0); d != send {
		t.Error("fifo dropped a message")
	}
	if _, err := newScheduler(Params{Scheduler: "rr"}); err == nil {
		t.Error("unknown scheduler accepted")
	}
}

func TestQDelaySummary(t *testing.T) {
	var ts tstamps
	for i := 1; i <= 100; i++ {
		ts.add(time.Duration(i) * time.Microsecond)
	}
	mean, p99, n := ts.summary()
	if n != 100 || mean != 50500*time.Nanosecond || p99 != 99*time.Microsecond {
		t.Errorf("summary %v %v %d", mean, p99, n)
	}
}
