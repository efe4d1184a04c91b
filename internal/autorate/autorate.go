// Package autorate estimates a link's bottleneck capacity and keeps a
// shaped rate just below it (`egress_rate = "auto"`): cut fast when a
// queue grows beyond the host (the path delivers less than the link
// sends), probe up slowly while the link is loaded,
// hold while it is idle, always within [Min, Max]. It is pure: the daemon
// feeds it one Sample per tick and applies the rate it returns through
// the engine's one reconcile. docs/autorate.md describes the algorithm
// and compares it with cake-autorate.
package autorate

import (
	"fmt"
	"time"
)

// Params are the estimator's parameters; Defaults fills the unset ones.
type Params struct {
	Min, Max uint64 // bits/s, the bounds of the rate in force
	// Start is the rate in force before the first estimate (0: Max).
	Start uint64
	// DeficitShare: a sample counts as delayed when the link was
	// saturated (hostqos's own queue not empty) and the path delivered
	// less than this share of what the link sent — the rest is queueing
	// up beyond the host, at the real bottleneck.
	DeficitShare float64
	// DelayThreshold: a sample counts as delayed when the link was not
	// saturated (then the flows' round trips hold no queue of the host's)
	// and their round trip over its minimum exceeded this: a queue at the
	// bottleneck beyond the host.
	DelayThreshold time.Duration
	// Window and Need: a cut needs Need delayed samples among the last
	// Window (cake-autorate's "3 of 6").
	Window, Need int
	// CutDelivered is the share of the delivered rate a cut sets, less
	// what drains the queue the deficit built beyond the host within
	// DrainTime (but never below DrainFloor of the delivered rate).
	CutDelivered float64
	DrainTime    time.Duration
	DrainFloor   float64
	// Refractory is the time after a cut before the next one may come
	// (the effect of a cut shows only after the queue drains a little).
	Refractory time.Duration
	// Raise is the factor of a probe up; LoadShare the share of the rate
	// in force the link must carry for a probe (under it the link is
	// idle enough and the rate holds); CalmSamples the undelayed samples
	// in a row a probe needs.
	Raise       float64
	LoadShare   float64
	CalmSamples int
}

// Defaults are the parameters used where Params leaves them 0.
var Defaults = Params{
	DeficitShare: 0.95, DelayThreshold: 8 * time.Millisecond,
	Window: 6, Need: 3,
	CutDelivered: 0.95, DrainTime: 2 * time.Second, DrainFloor: 0.86,
	Refractory: 600 * time.Millisecond,
	Raise:      1.04, LoadShare: 0.75, CalmSamples: 2,
}

func (p Params) withDefaults() Params {
	d := Defaults
	if p.DelayThreshold <= 0 {
		p.DelayThreshold = d.DelayThreshold
	}
	if p.DeficitShare <= 0 || p.DeficitShare >= 1 {
		p.DeficitShare = d.DeficitShare
	}
	if p.Window <= 0 || p.Window > 64 {
		p.Window = d.Window
	}
	if p.Need <= 0 || p.Need > p.Window {
		p.Need = min(d.Need, p.Window)
	}
	if p.CutDelivered <= 0 || p.CutDelivered >= 1 {
		p.CutDelivered = d.CutDelivered
	}
	if p.DrainTime <= 0 {
		p.DrainTime = d.DrainTime
	}
	if p.DrainFloor <= 0 || p.DrainFloor > 1 {
		p.DrainFloor = d.DrainFloor
	}
	if p.Refractory == 0 {
		p.Refractory = d.Refractory
	}
	if p.Raise <= 1 || p.Raise > 2 {
		p.Raise = d.Raise
	}
	if p.LoadShare <= 0 || p.LoadShare > 1 {
		p.LoadShare = d.LoadShare
	}
	if p.CalmSamples <= 0 {
		p.CalmSamples = d.CalmSamples
	}
	return p
}

// Sample is what one tick saw on the link.
type Sample struct {
	// Flows are the flows measured (0: no measurement; the sample is
	// neither delayed nor calm); Delay their (median) round trip over its
	// minimum.
	Flows int
	Delay time.Duration
	// Delivered is the rate the path delivered, bits/s of frames, summed
	// over the flows that were not limited by their application (0:
	// unknown).
	Delivered uint64
	// Sent is the rate the link sent over the tick, bits/s of frames.
	Sent uint64
	// Saturated: hostqos's own queue on the link held packets, so the
	// flows would have sent more had the rate in force let them.
	Saturated bool
	// Dt is the tick's length (0: the estimator's default of 200 ms).
	Dt time.Duration
}

// Decision is the estimator's answer to a sample.
type Decision struct {
	Rate     uint64 // the rate to have in force
	Estimate uint64 // the capacity estimate (0: none yet)
	Changed  bool
	Reason   string // "cut", "drain", "probe"; "" when unchanged
}

// Estimator is one link direction's state. Not safe for concurrent use.
type Estimator struct {
	p        Params
	rate     uint64
	estimate uint64
	delayed  []bool // ring of the last Window samples
	next     int
	calm     int
	lastCut  time.Time
	cutDelay time.Duration // the delay that triggered the last cut (0: a deficit)
	excess   float64       // bits sent beyond what the path delivered since the last cut
}

// drainHold is how long after a cut on delay no further cut comes while
// the delay keeps falling: the queue beyond the host is draining, and
// cutting again for the queue the first cut already drains would spiral
// the rate down.
const drainHold = 5 * time.Second

// New starts an estimator at p.Start (or p.Max).
func New(p Params) (*Estimator, error) {
	if p.Min == 0 || p.Max < p.Min {
		return nil, fmt.Errorf("check autorate bounds: min %d, max %d bit/s: want 0 < min <= max", p.Min, p.Max)
	}
	p = p.withDefaults()
	e := &Estimator{p: p, delayed: make([]bool, p.Window)}
	e.rate = p.Max
	if p.Start != 0 {
		e.rate = e.clamp(p.Start)
	}
	return e, nil
}

// Rate is the rate in force; Estimate the capacity estimate (0: none).
func (e *Estimator) Rate() uint64     { return e.rate }
func (e *Estimator) Estimate() uint64 { return e.estimate }

// SetBounds changes Min and Max, clamping the rate in force.
func (e *Estimator) SetBounds(lo, hi uint64) {
	if lo == 0 || hi < lo {
		return
	}
	e.p.Min, e.p.Max = lo, hi
	e.rate = e.clamp(e.rate)
}

func (e *Estimator) clamp(r uint64) uint64 { return max(e.p.Min, min(e.p.Max, r)) }

// Step feeds the sample of the tick ending at now.
func (e *Estimator) Step(now time.Time, s Sample) Decision {
	dt := s.Dt
	if dt <= 0 {
		dt = 200 * time.Millisecond
	}
	var delayed bool
	switch {
	case s.Flows == 0:
	case s.Saturated:
		// The host's queue is in every round trip: judge by the rates.
		delayed = s.Delivered > 0 && float64(s.Delivered) < e.p.DeficitShare*float64(s.Sent)
		if delayed {
			e.excess += float64(s.Sent-s.Delivered) * dt.Seconds()
		}
	default:
		delayed = s.Delay > e.p.DelayThreshold
		if delayed {
			// The queue beyond the host holds about Delay at the rate
			// it drains at.
			e.excess = max(e.excess, s.Delay.Seconds()*float64(max(s.Delivered, s.Sent)))
		}
	}
	e.delayed[e.next] = delayed
	e.next = (e.next + 1) % len(e.delayed)
	if s.Flows > 0 && !delayed {
		e.calm++
	} else {
		e.calm = 0
	}
	loaded := s.Saturated || float64(s.Sent) >= e.p.LoadShare*float64(e.rate)
	if s.Delivered > 0 && (loaded || delayed) {
		// The path's rate while it was the bottleneck (or close to it).
		e.estimate = s.Delivered
	}
	n := 0
	for _, d := range e.delayed {
		if d {
			n++
		}
	}
	out := Decision{Rate: e.rate, Estimate: e.estimate}
	switch {
	case n >= e.p.Need && delayed && now.Sub(e.lastCut) >= e.p.Refractory && !e.draining(now, s):
		// The path's rate, less what empties the queue the deficit
		// built beyond the host within DrainTime.
		d := float64(s.Delivered)
		target := max(d*e.p.CutDelivered-e.excess/e.p.DrainTime.Seconds(), d*e.p.DrainFloor)
		target = min(target, float64(e.rate)*0.99)
		out.Reason = "cut"
		e.excess = 0
		e.lastCut = now
		e.cutDelay = 0
		if !s.Saturated {
			e.cutDelay = s.Delay
		}
		for i := range e.delayed {
			e.delayed[i] = false
		}
		e.set(&out, uint64(target))
	case loaded && e.calm >= e.p.CalmSamples && n == 0:
		e.set(&out, uint64(float64(e.rate)*e.p.Raise)+1)
		if out.Changed {
			out.Reason = "probe"
		}
	}
	return out
}

// draining reports whether the last cut came on delay, not long ago, the
// delay has fallen since (by a tenth at least) and the rate in force is
// below what the path delivers (so the queue does drain).
func (e *Estimator) draining(now time.Time, s Sample) bool {
	return e.cutDelay > 0 && !s.Saturated && now.Sub(e.lastCut) < drainHold && s.Delay < e.cutDelay*9/10 &&
		e.rate < s.Delivered
}

func (e *Estimator) set(out *Decision, r uint64) {
	r = e.clamp(r) / 1000 * 1000 // whole kbit/s (and bytes/s)
	if r < e.p.Min {
		r = e.p.Min
	}
	if r != e.rate {
		e.rate = r
		out.Changed = true
	}
	out.Rate = e.rate
	if !out.Changed {
		out.Reason = ""
	}
}
