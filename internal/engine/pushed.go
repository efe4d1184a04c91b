package engine

import (
	"reflect"

	"github.com/hostqos/hostqos/internal/datapath"
	"github.com/hostqos/hostqos/internal/datapath/xdp"
	"github.com/hostqos/hostqos/internal/shaper"
)

// pushed is what the engine knows the kernel holds from its own pushes:
// the HTB plan on each link (nil: not shaped by hostqos), the links with
// the classifier attached, and the datapath's rules. A push writes only
// what differs from it, so a change re-applies only the links and rules it
// touches. An entry is dropped before the kernel operation that would
// change it and set again only when that operation succeeded, so after a
// failure the entry is unknown and the restore writes it; Forget drops all
// (repairs, where someone else may have changed the kernel).
type pushed struct {
	plans    map[int]*shaper.Plan // by ifindex; absent = unknown
	attached map[int]bool         // by ifindex; absent = unknown
	rules    *datapath.Policy     // nil = unknown
	// The XDP shield's drop list and protected clients (nil = unknown),
	// the SYN limits of the links with the XDP program (by ifindex;
	// absent = unknown), and the qsocket schedulers (nil = unknown).
	blocks    *[]xdp.BlockEntry
	protected *[]xdp.Protected
	xdp       map[int]xdp.SynLimits
	qscheds   *map[int]datapath.QSched
	// The containers' namespaces (nil = unknown) and veths with their
	// identity (nil = unknown: the kernel's own list says which to
	// remove; absent = not set up).
	cnetns *map[uint64]uint32
	veths  map[int]datapath.Identity
}

func (p *pushed) forget() { *p = pushed{} }

// forgetLink drops what is known of one link (detached, released).
func (p *pushed) forgetLink(ifindex int) {
	delete(p.plans, ifindex)
	delete(p.attached, ifindex)
	delete(p.xdp, ifindex)
}

// planIs reports whether the link is known to hold plan (nil: unshaped).
func (p *pushed) planIs(ifindex int, plan *shaper.Plan) bool {
	have, ok := p.plans[ifindex]
	if !ok || (have == nil) != (plan == nil) {
		return false
	}
	return have == nil || reflect.DeepEqual(*have, *plan)
}

func (p *pushed) setPlan(ifindex int, plan *shaper.Plan) {
	if p.plans == nil {
		p.plans = map[int]*shaper.Plan{}
	}
	p.plans[ifindex] = plan
}

func (p *pushed) setXDP(ifindex int, syn xdp.SynLimits) {
	if p.xdp == nil {
		p.xdp = map[int]xdp.SynLimits{}
	}
	p.xdp[ifindex] = syn
}

func (p *pushed) setAttached(ifindex int) {
	if p.attached == nil {
		p.attached = map[int]bool{}
	}
	p.attached[ifindex] = true
}

func (p *pushed) rulesAre(r datapath.Policy) bool {
	return p.rules != nil && sameDatapath(*p.rules, r)
}
