package derive

import (
	"errors"
	"fmt"
	"time"

	"github.com/hostqos/hostqos/internal/datapath"
	"github.com/hostqos/hostqos/internal/datapath/xdp"
	"github.com/hostqos/hostqos/internal/policy"
	"github.com/hostqos/hostqos/internal/shaper"
)

// ErrNoShield: the kernel has no XDP shield, so what needs it cannot be
// set up.
var ErrNoShield = errors.New("the XDP shield is not loaded (see the daemon's log); the drop list, SYN limits and protected clients are unavailable")

// planLinks plans every managed link that exists now (in.Ifindexes): its
// HTB tree (a shaped link's, or a pass-through tree that carries the ACK
// leaves of download limits), its ingress budget, its XDP shield and its
// qsocket scheduler; and the shield's lists. A link without an ifindex is
// missing: it is managed once it appears.
func planLinks(in *Input, p *policy.Policy, d *Desired) error {
	if in.Shield != nil {
		d.Blocks = in.Shield.Blocks
		d.Protected = make([]xdp.Protected, 0, len(in.Shield.Protected))
		for _, pc := range in.Shield.Protected {
			d.Protected = append(d.Protected, xdp.Protected{Addr: pc.Client.Addr(), Port: pc.Client.Port()})
		}
	}
	for _, l := range p.Links {
		ifindex := in.Ifindexes[l.Name]
		if ifindex == 0 {
			d.Missing = append(d.Missing, l.Name)
			continue
		}
		ld := Link{Name: l.Name, Ifindex: ifindex, Syn: SynLimits(l)}
		if l.IngressRate > 0 {
			d.Datapath.LinksIn = append(d.Datapath.LinksIn, datapath.LinkIn{Ifindex: ifindex, Rate: in.IngressRate(l)})
		}
		if l.EgressRate > 0 {
			// shaper.Build names the link in its errors.
			plan, err := shaper.Build(shaper.LinkSpec{Ifindex: ifindex, Name: l.Name, Rate: in.EgressRate(l), QSched: in.QSchedRate, RT: in.RTRates[l.Name],
				RTOwners: in.RTOwners[l.Name], FlowQueues: in.FlowQueues}, d.Classes, d.rulesOn(l.Name))
			if err != nil {
				return err
			}
			ld.Plan = &plan
			if in.FlowQueues {
				d.Datapath.FlowQueueDefault = plan.DefaultClassMinor()
			}
		} else if len(d.Acks) > 0 {
			plan := shaper.PassThrough(shaper.LinkSpec{Ifindex: ifindex, Name: l.Name})
			ld.Plan = &plan
		}
		if ld.Plan != nil {
			if err := ld.Plan.AddAckLeaves(d.Acks); err != nil {
				return err
			}
			ld.QSched = qschedOf(*ld.Plan)
		}
		switch {
		case in.Shield != nil:
			// An XDP program changes how a veth receives: only links with
			// SYN limits, or any when the drop list is not empty.
			ld.XDP = ld.Syn.Enabled() || len(d.Blocks) > 0
		case ld.Syn.Enabled():
			return fmt.Errorf("link %s: SYN limits: %w", l.Name, ErrNoShield)
		}
		d.Links = append(d.Links, ld)
	}
	return nil
}

// SynLimits are a link's SYN limits for the XDP shield.
func SynLimits(l policy.Link) xdp.SynLimits {
	return xdp.SynLimits{Rate: uint32(l.SynRate), PerSource: uint32(l.SynRatePerSource)}
}

// qschedOf is the qsocket scheduler of a plan's qsched class (nil: the
// plan has none).
func qschedOf(plan shaper.Plan) *datapath.QSched {
	if plan.Link.QSched == 0 {
		return nil
	}
	for _, c := range plan.Classes {
		if c.Minor == shaper.QSchedMinor {
			return &datapath.QSched{Rate: c.Rate, ClassID0: shaper.QSchedBandClassID(0),
				Margin: time.Duration(shaper.QSchedMargin(plan))}
		}
	}
	return nil
}

// rulesOn are the shaper rules of the link named link: all but those
// of reservations admitted on another link.
func (d *Desired) rulesOn(link string) []shaper.RuleSpec {
	if len(d.RuleLink) == 0 {
		return d.Rules
	}
	out := make([]shaper.RuleSpec, 0, len(d.Rules))
	for _, r := range d.Rules {
		if l, ok := d.RuleLink[r.Slot]; !ok || l == link {
			out = append(out, r)
		}
	}
	return out
}

// Link returns the desired state of the managed link name, if it is set
// up.
func (d *Desired) Link(name string) (Link, bool) {
	for _, l := range d.Links {
		if l.Name == name {
			return l, true
		}
	}
	return Link{}, false
}
