package autorate

import (
	"testing"
	"time"
)

const mbit = 1_000_000

// link simulates what the estimator sees on a link whose bottleneck has
// capacity c: when the rate in force is above it, the bottleneck's queue
// grows (delay), and it delivers c; below it, no delay and the link
// carries the rate in force (loaded) or nothing (idle).
func feed(e *Estimator, now time.Time, c uint64, busy bool) Decision {
	s := Sample{Flows: 4, Saturated: busy, Dt: tick}
	switch {
	case !busy:
		s.Flows = 0
	case e.Rate() > c:
		s.Delivered, s.Sent = c, e.Rate()
	default:
		s.Delivered, s.Sent = e.Rate(), e.Rate()
	}
	return e.Step(now, s)
}

const tick = 200 * time.Millisecond

func run(e *Estimator, t0 time.Time, d time.Duration, c uint64, busy bool, fn func(at time.Duration, dec Decision)) time.Time {
	now := t0
	for at := time.Duration(0); at < d; at += tick {
		now = now.Add(tick)
		dec := feed(e, now, c, busy)
		if fn != nil {
			fn(at+tick, dec)
		}
	}
	return now
}

// A 4× step down is followed within 2 s to within 15 % of the new
// capacity, and a step up within 10 s.
func TestStepsFollowed(t *testing.T) {
	e, err := New(Params{Min: mbit, Max: 100 * mbit, Start: 30 * mbit})
	if err != nil {
		t.Fatal(err)
	}
	now := run(e, time.Unix(0, 0), 5*time.Second, 32*mbit, true, nil)
	if r := e.Rate(); r > 34*mbit || r < 26*mbit {
		t.Fatalf("at 32 Mbit/s capacity the rate is %d", r)
	}
	var downAt time.Duration = -1
	now = run(e, now, 5*time.Second, 8*mbit, true, func(at time.Duration, d Decision) {
		if downAt < 0 && d.Rate <= 8*mbit && d.Rate >= 8*mbit*85/100 {
			downAt = at
		}
	})
	if downAt < 0 || downAt > 2*time.Second {
		t.Errorf("4× step down followed after %v (rate now %d), want within 2 s", downAt, e.Rate())
	}
	var upAt time.Duration = -1
	run(e, now, 12*time.Second, 20*mbit, true, func(at time.Duration, d Decision) {
		if upAt < 0 && d.Rate >= 20*mbit*85/100 {
			upAt = at
		}
	})
	if upAt < 0 || upAt > 10*time.Second {
		t.Errorf("step up to 20 Mbit/s followed after %v (rate now %d), want within 10 s", upAt, e.Rate())
	}
	if e.Estimate() == 0 {
		t.Error("no capacity estimate")
	}
}

// An idle link keeps its rate; a capacity above Max never takes the rate
// above Max; nothing goes below Min.
func TestIdleHoldsAndBoundsHold(t *testing.T) {
	e, _ := New(Params{Min: 2 * mbit, Max: 10 * mbit, Start: 7 * mbit})
	run(e, time.Unix(0, 0), 60*time.Second, 50*mbit, false, func(_ time.Duration, d Decision) {
		if d.Changed {
			t.Fatalf("idle link: rate changed to %d (%s)", d.Rate, d.Reason)
		}
	})
	run(e, time.Unix(100, 0), 60*time.Second, 50*mbit, true, func(_ time.Duration, d Decision) {
		if d.Rate > 10*mbit {
			t.Fatalf("rate %d above max", d.Rate)
		}
	})
	if e.Rate() != 10*mbit {
		t.Errorf("under load with capacity above max the rate is %d, want max", e.Rate())
	}
	run(e, time.Unix(200, 0), 30*time.Second, 100_000, true, func(_ time.Duration, d Decision) {
		if d.Rate < 2*mbit {
			t.Fatalf("rate %d below min", d.Rate)
		}
	})
}

func TestBoundsChecked(t *testing.T) {
	if _, err := New(Params{Min: 5, Max: 4}); err == nil {
		t.Error("min above max accepted")
	}
	if _, err := New(Params{}); err == nil {
		t.Error("zero bounds accepted")
	}
}

// After a cut on delay, a queue beyond the host that is still draining
// (its delay falling) brings no further cut: the rate does not spiral
// down while the bottleneck's FIFO empties.
func TestNoSpiralWhileDraining(t *testing.T) {
	e, _ := New(Params{Min: mbit, Max: 40 * mbit, Start: 30 * mbit})
	now := time.Unix(0, 0)
	delay := 800 * time.Millisecond // a full modem FIFO after a step down
	cuts := 0
	for i := 0; i < 25; i++ { // 5 s
		now = now.Add(tick)
		d := e.Step(now, Sample{Flows: 4, Delay: delay, Delivered: 7_500_000, Sent: min(e.Rate(), 7_500_000), Dt: tick})
		if d.Changed && d.Reason == "cut" {
			cuts++
		}
		if cuts > 0 {
			delay -= 30 * time.Millisecond // draining
		}
	}
	if cuts != 1 || e.Rate() < 6*mbit {
		t.Errorf("%d cuts, rate %d while the queue drains; want one cut to about 0.86 of 7.5 Mbit/s", cuts, e.Rate())
	}
}
