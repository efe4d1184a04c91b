package datapath

import (
	"errors"
	"fmt"
	"sync"

	"github.com/cilium/ebpf"
)

// Reading only the rule slots in use.
//
// The rule counter arrays (egress and ingress, per CPU) have MaxRules
// slots, but a policy uses the lowest ones (the engine hands out the
// lowest free slot). The daemon reads the counters several times a second;
// reading every slot of both arrays costs milliseconds of CPU and about a
// megabyte of buffers each time, reading the slots in use microseconds.
// Slots that no Apply ever wrote count nothing, except that counters
// adopted from an earlier daemon may sit in any slot: the first read is
// a full one and remembers the highest slot that had counted.

// ruleSpan is how many leading rule slots can have counts.
type ruleSpan struct {
	mu      sync.Mutex
	applied int  // highest slot an Apply wrote, + 1
	counted int  // highest slot with counts at the first full read, + 1
	known   bool // counted has been read
}

// noteApplied records the slots of an applied policy.
func (s *ruleSpan) noteApplied(p Policy) {
	n := 0
	for _, r := range p.Rules {
		n = max(n, int(r.Slot)+1)
	}
	s.mu.Lock()
	s.applied = max(s.applied, n)
	s.mu.Unlock()
}

// UsedRuleCounters returns the counters of the rule slots that can have
// counted, indexed by slot like RuleCounters; the slots beyond the end of
// the answer have counted nothing.
func (d *Datapath) UsedRuleCounters() ([]Counters, error) {
	s := &d.span
	s.mu.Lock()
	known, n := s.known, max(s.applied, s.counted)
	s.mu.Unlock()
	if !known || n > MaxRules/4 {
		out, err := d.RuleCounters()
		if err != nil {
			return nil, err
		}
		if !known {
			top := 0
			for i, c := range out {
				if c != (Counters{}) {
					top = i + 1
				}
			}
			s.mu.Lock()
			s.counted, s.known = top, true
			n = max(s.applied, s.counted)
			s.mu.Unlock()
		}
		return out[:n], nil
	}
	out := make([]Counters, n)
	if n == 0 {
		return out, nil
	}
	if err := d.addSpanCounters(d.objs.HqRuleCtr, out, false); err != nil {
		return nil, fmt.Errorf("read rule counters: %w", err)
	}
	if err := d.addSpanCounters(d.objs.HqRuleCtrIn, out, true); err != nil {
		return nil, fmt.Errorf("read receive rule counters: %w", err)
	}
	return out, nil
}

// addSpanCounters adds the first len(out) slots of per-CPU counter array
// m to out (as receive counters when rx), with one batch lookup.
func (d *Datapath) addSpanCounters(m *ebpf.Map, out []Counters, rx bool) error {
	keys := make([]uint32, len(out))
	vals := make([]hostqosHqCounters, len(out)*d.ncpu)
	var cur ebpf.MapBatchCursor
	got, err := m.BatchLookup(&cur, keys, vals, nil)
	if err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return err
	}
	for i := 0; i < got; i++ {
		k := keys[i]
		if k >= uint32(len(out)) {
			continue
		}
		c := &out[k]
		for cpu := 0; cpu < d.ncpu; cpu++ {
			v := &vals[i*d.ncpu+cpu]
			if rx {
				c.RxPackets += v.Packets
				c.RxBytes += v.Bytes
				c.RxDrops += v.Drops
			} else {
				c.Packets += v.Packets
				c.Bytes += v.Bytes
				c.Drops += v.Drops
			}
		}
	}
	return nil
}
