package engine

import (
	"strings"
	"time"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/apps"
	"github.com/hostqos/hostqos/internal/datapath"
	"github.com/hostqos/hostqos/internal/observe"
	"github.com/hostqos/hostqos/internal/shaper"
)

// resvIDNames maps datapath reservation ids to "resv:NAME" / "rule:NAME".
func (e *Engine) resvIDNamesLocked() map[uint16]string {
	out := map[uint16]string{}
	for k, v := range e.slots.Resv {
		out[uint16(v+1)] = k
	}
	return out
}

// fillReservationStatus adds what the kernel reports of each reservation
// (counters, bound sockets, its leaf's queue); a failed read is reported in
// Error. An ordinary user sees only their own sockets.
func (e *Engine) fillReservationStatus(k Kernel, who Caller, out []api.ReservationInfo) {
	e.mu.Lock()
	ids := map[string]uint16{}
	for key, v := range e.slots.Resv {
		ids[key] = uint16(v + 1)
	}
	links := make(map[string]int, len(e.links))
	for n, ifx := range e.links {
		links[n] = ifx
	}
	specs := map[uint16]shaper.RuleSpec{}
	if e.desired != nil {
		for _, rs := range e.desired.Rules {
			specs[rs.Slot] = rs
		}
	}
	e.mu.Unlock()
	counters, cerr := k.ReservationCounters()
	binds, berr := k.Bindings()
	stats := map[int][]shaper.ClassStats{}
	for _, ifx := range links {
		if cs, err := k.ClassStats(ifx); err == nil {
			stats[ifx] = cs
		}
	}
	seeOwn := who.MayOnlySeeOwn()
	for i := range out {
		ri := &out[i]
		id, ok := ids[resvRuleName(ri.Reservation.Name)]
		if !ok {
			continue
		}
		var errs []string
		if cerr != nil {
			errs = append(errs, cerr.Error())
		} else if c, ok := counters[id]; ok {
			rc := &api.ResvCounters{
				ConformantPackets: c.ConformantPackets, ConformantBytes: c.ConformantBytes,
				NonConformantPackets: c.NonConformantPackets, NonConformantBytes: c.NonConformantBytes,
				DemotedBytes: c.DemotedBytes, ShapedPackets: c.ShapedPackets, ShapedTime: float64(c.ShapedNS) / 1e9,
				OversizePackets: c.OversizePackets, Sessions: c.Sessions, SessionsTotal: c.SessionsTotal,
				RefusedConnects: c.RefusedConnects, RefusedSends: c.RefusedSends,
			}
			if ri.Slot >= 0 {
				rs := specs[uint16(ri.Slot)]
				rc.QueueLimit = rs.QueueLimit
				// Its leaf, or with per-session leaves those leaves.
				minors := map[uint16]bool{shaper.RuleLeafMinor(uint16(ri.Slot)): true}
				for i := 0; i < rs.Sessions; i++ {
					minors[shaper.SessionMinor(rs.SessionGroup, i)] = true
				}
				for _, cs := range stats {
					for _, s := range cs {
						if minors[s.Minor] {
							rc.BacklogBytes = max(rc.BacklogBytes, s.Backlog)
							rc.QueueDrops += s.Drops
						}
					}
				}
			}
			ri.Counters = rc
		}
		if berr != nil {
			errs = append(errs, berr.Error())
		}
		for _, b := range binds {
			if b.Reservation != id || (seeOwn >= 0 && int64(b.UID) != seeOwn) {
				continue
			}
			ri.Sockets = append(ri.Sockets, boundSocket(b))
		}
		ri.Error = strings.Join(errs, "; ")
	}
}

// boundSocket is a binding as the API shows it.
func boundSocket(b datapath.Binding) api.BoundSocket {
	bs := api.BoundSocket{PID: b.PID, UID: b.UID, Comm: b.Comm, Proto: observe.ProtoName(b.Key.Proto), Session: b.Session}
	if b.Key.Local.Port() != 0 || b.Key.Local.Addr().IsValid() && !b.Key.Local.Addr().IsUnspecified() {
		bs.Local = b.Key.Local.String()
	}
	if b.Key.Remote.Addr().IsValid() && !b.Key.Remote.Addr().IsUnspecified() {
		bs.Remote = b.Key.Remote.String()
	}
	bs.Exe = apps.Exe(int(b.PID))
	if b.BoundNS > 0 {
		bs.Since = time.Now().Add(-time.Duration(monotonicNS() - b.BoundNS))
	}
	return bs
}
