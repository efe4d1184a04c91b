package observe

import (
	"fmt"
	"sort"
	"time"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/datapath"
	"github.com/hostqos/hostqos/internal/history"
	"github.com/hostqos/hostqos/internal/policy"
)

// The received side per class and per link. The ingress program counts per
// rule slot, plus what no rule matched (datapath.Stats.RxUnmatched*): a
// class's IN is its rules' IN, and class default's also the unmatched
// traffic. A link's IN and OUT are its interface counters.

// inRates keeps the previous readings behind the rates of the unmatched
// received traffic and of the links' interface counters.
type inRates struct {
	noneAt   time.Time
	nonePrev [2]uint64 // bytes, packets
	noneRate [2]float64

	// The managed links' interface counters at the last sample, and
	// their rates over the sample before it (bits/s and packets/s out,
	// then in), by interface name.
	devAt   time.Time
	devPrev map[string]history.Counters
	devRate map[string][4]float64
}

// sampleIn updates the rates of the unmatched received traffic. Called
// with s.mu held.
func (s *sampler) sampleIn(now time.Time, st datapath.Stats) {
	cur := [2]uint64{st.RxUnmatchedBytes, st.RxUnmatchedPackets}
	if !s.in.noneAt.IsZero() {
		dt := now.Sub(s.in.noneAt).Seconds()
		s.in.noneRate = [2]float64{8 * rate(cur[0], s.in.nonePrev[0], dt), rate(cur[1], s.in.nonePrev[1], dt)}
	}
	s.in.noneAt, s.in.nonePrev = now, cur
}

// sampleDev updates the rates of the managed links' interface counters
// from dev (read now), so that a link's rate is the rate of its last
// sample, as for rules and classes, whenever it is asked for. Called with
// s.mu held.
func (s *sampler) sampleDev(now time.Time, dev map[string]history.Counters, links map[string]int) {
	if dev == nil {
		return
	}
	dt := now.Sub(s.in.devAt).Seconds()
	rates := make(map[string][4]float64, len(links))
	cur := make(map[string]history.Counters, len(links))
	for name := range links {
		c, ok := dev[name]
		if !ok {
			continue
		}
		cur[name] = c
		if p, ok := s.in.devPrev[name]; ok && dt > 0 {
			rates[name] = [4]float64{8 * rate(c.BytesOut, p.BytesOut, dt), rate(c.PacketsOut, p.PacketsOut, dt),
				8 * rate(c.BytesIn, p.BytesIn, dt), rate(c.PacketsIn, p.PacketsIn, dt)}
		}
	}
	s.in.devAt, s.in.devPrev, s.in.devRate = now, cur, rates
}

// classIn sums the received side of each class: its rules' IN (rules as
// rs reports them, with their classes) and, for class default, what no
// rule matched.
func (s *sampler) classIn(rs []api.RuleStat, k Kernel) map[string]api.Counter {
	out := map[string]api.Counter{}
	add := func(class string, c api.Counter) {
		t := out[class]
		t.Add(c)
		out[class] = t
	}
	for _, r := range rs {
		add(r.Class, r.In)
	}
	if st, err := k.Stats(); err == nil {
		s.mu.Lock()
		nr := s.in.noneRate
		s.mu.Unlock()
		add(policy.DefaultClassName, api.Counter{Packets: st.RxUnmatchedPackets, Bytes: st.RxUnmatchedBytes,
			Drops: st.RxUnmatchedDrops, RateBps: nr[0], PktRate: nr[1]})
	}
	return out
}

// linkStats are the managed links' interface counters, both directions,
// now, with the rates of the last sample (sampleDev, every tick): a
// one-shot reading shows what the link carries, not the average since
// whoever asked before.
func (s *sampler) linkStats(v LinkView) ([]api.LinkStat, error) {
	links := v.Up
	dev := s.netDev()
	if dev == nil {
		return nil, fmt.Errorf("read interface counters: /proc/thread-self/net/dev unreadable")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	names := make([]string, 0, len(links))
	for name := range links {
		names = append(names, name)
	}
	sort.Strings(names)
	var out []api.LinkStat
	for _, name := range names {
		c, ok := dev[name]
		if !ok {
			continue
		}
		r := s.in.devRate[name]
		out = append(out, api.LinkStat{Link: name,
			Counter: api.Counter{Packets: c.PacketsOut, Bytes: c.BytesOut, Drops: c.DropsOut, RateBps: r[0], PktRate: r[1]},
			In:      api.Counter{Packets: c.PacketsIn, Bytes: c.BytesIn, Drops: c.DropsIn, RateBps: r[2], PktRate: r[3]}})
	}
	return out, nil
}
