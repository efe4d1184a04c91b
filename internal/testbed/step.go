package testbed

import (
	"context"
	"fmt"
	"time"

	"github.com/vishvananda/netlink"
)

// SetRate changes the rate of from's egress toward its neighbour to (a
// direction given a plain rate at Build, without DiffServ) to rate
// bits/s, in place: the FIFO and its packets stay. A bottleneck whose
// capacity changes while traffic runs (a radio link, a cable modem) is a
// series of SetRate calls; see RunSteps.
func (tb *Testbed) SetRate(from, to string, rate uint64) error {
	n, l, err := tb.direction(from, to)
	if err != nil {
		return err
	}
	if rate < 8000 || rate > 100e9 {
		return fmt.Errorf("set rate %s→%s to %d: must be 8 kbit/s .. 100 gbit/s", from, to, rate)
	}
	iface := l.aIf
	if l.bNode == n {
		iface = l.bIf
	}
	lk, err := n.h.LinkByName(iface)
	if err != nil {
		return fmt.Errorf("find %s in %s: %w", iface, n.Name, err)
	}
	c := netlink.NewHtbClass(
		netlink.ClassAttrs{LinkIndex: lk.Attrs().Index, Parent: netlink.MakeHandle(1, 0), Handle: netlink.MakeHandle(1, RateOnlyClass)},
		netlink.HtbClassAttrs{Rate: rate, Ceil: rate, Quantum: 2 * fullFrame})
	if err := n.h.ClassChange(c); err != nil {
		return fmt.Errorf("change rate of %s/%s to %d: %w", n.Name, iface, rate, err)
	}
	return nil
}

// direction is the node from and the link from from to to whose egress
// at from has a plain rate.
func (tb *Testbed) direction(from, to string) (*Node, *link, error) {
	n := tb.byNm[from]
	if n == nil || tb.byNm[to] == nil {
		return nil, nil, fmt.Errorf("rate %s→%s: no such node", from, to)
	}
	for _, ifc := range n.ifaces {
		if ifc.peer != to {
			continue
		}
		s := ifc.link.spec
		rate, ds := s.RateAtoB, s.DiffServAtoB
		if ifc.link.bNode == n {
			rate, ds = s.RateBtoA, s.DiffServBtoA
		}
		if rate == 0 || ds {
			return nil, nil, fmt.Errorf("rate %s→%s: the direction has no plain rate limit (give it one at Build, without DiffServ)", from, to)
		}
		return n, ifc.link, nil
	}
	return nil, nil, fmt.Errorf("rate %s→%s: not neighbours", from, to)
}

// RateStep is one phase of a stepping bottleneck: Rate bits/s for For.
type RateStep struct {
	Rate uint64
	For  time.Duration
}

// RunSteps sets from's egress toward to to each step's rate in turn and
// holds it for the step's time; onStep (may be nil) is called as each
// step starts. It returns when the steps are done or ctx ends (ctx's
// error), leaving the last rate set.
func (tb *Testbed) RunSteps(ctx context.Context, from, to string, steps []RateStep, onStep func(i int, s RateStep)) error {
	for i, s := range steps {
		if err := tb.SetRate(from, to, s.Rate); err != nil {
			return err
		}
		if onStep != nil {
			onStep(i, s)
		}
		t := time.NewTimer(s.For)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}
