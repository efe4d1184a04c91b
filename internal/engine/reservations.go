package engine

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"

	"github.com/hostqos/hostqos/internal/store"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/datapath"
	"github.com/hostqos/hostqos/internal/derive"
	"github.com/hostqos/hostqos/internal/policy"
	"github.com/hostqos/hostqos/internal/units"
)

// Reservations are a front door of the engine: a reservation is
// a policy object (policy.Reservation) kept in the overlays like rules and
// persisted with them; admission control is policy.Admit (reserved rates
// and buffers per link) plus the MTU check here, which needs the kernel.
// Every change is published on the event stream.

// Event kinds of reservations.
const (
	EventResvAdmitted = "reservation.admitted"
	EventResvRefused  = "reservation.refused"
	EventResvModified = "reservation.modified"
	EventResvRemoved  = "reservation.removed"
	// EventResvBroken: a change of a link (its rate, reservable share or
	// buffer pool) left an admitted reservation over the link's capacity.
	EventResvBroken = "reservation.broken"
)

var reservationKind = objKind[policy.Reservation]{
	name:   "reservation",
	find:   (*policy.Policy).Reservation,
	layer:  func(o *store.Overlay) map[string]*policy.Reservation { return o.Reservations },
	blank:  func() policy.Reservation { return policy.NewReservation("") },
	nameOf: func(r *policy.Reservation) *string { return &r.Name },
	admit:  (*Engine).admitMTULocked,
}

// admitMTULocked is checkMTULocked when there is a kernel to ask.
func (e *Engine) admitMTULocked(r policy.Reservation) error {
	if e.k == nil {
		return nil
	}
	return e.checkMTULocked(r)
}

// checkMTULocked refuses a reservation whose maximum packet size M is
// above the MTU of a managed link: such a packet would be fragmented (or
// never sent), so the Tspec could not be honoured. Caller holds e.mu.
func (e *Engine) checkMTULocked(r policy.Reservation) error {
	M := r.EffMaxUnit()
	for _, name := range store.SortedKeys(e.links) {
		mtu, err := e.k.LinkMTU(e.links[name])
		if err != nil {
			return err
		}
		if uint64(M) > uint64(mtu) {
			return &policy.FieldError{Source: "api", Object: fmt.Sprintf("reservation %q", r.Name), Field: "max_unit",
				Value: fmt.Sprint(uint64(M)), Literal: true,
				Reason: fmt.Sprintf("above the MTU %d of link %s: a packet of M bytes would be fragmented", mtu, name),
				Fix:    fmt.Sprintf("use max_unit ≤ %d (the path MTU)", mtu)}
		}
	}
	return nil
}

// AddReservation admits a reservation (temporary: until the daemon stops);
// an existing name is a *ConflictError. A refusal (invalid, over a link's
// reservable capacity or buffer pool, M above an MTU) changes nothing and
// is published as reservation.refused with its numbers.
func (e *Engine) AddReservation(ctx context.Context, who Caller, r policy.Reservation, temporary bool) (policy.Reservation, error) {
	if err := who.MayChange(); err != nil {
		return r, err
	}
	err := e.change(ctx, "api", func(persist, temp *store.Overlay, eff *policy.Policy) error {
		if _, ok := eff.Reservation(r.Name); ok && r.Name != "" {
			return &ConflictError{What: "reservation", Name: r.Name}
		}
		if err := e.admitMTULocked(r); err != nil {
			return err
		}
		ov := persist
		if temporary {
			ov = temp
		}
		ov.Reservations[r.Name] = &r
		return nil
	})
	if err != nil {
		e.publishRefused(r.Name, err)
		return r, err
	}
	e.publishAdmitted(r)
	return r, nil
}

// SetReservation changes the fields of reservation name given in patch (a
// JSON object); admission runs again on the result.
func (e *Engine) SetReservation(ctx context.Context, who Caller, name string, patch []byte, temporary bool) (policy.Reservation, error) {
	if err := who.MayChange(); err != nil {
		return policy.Reservation{}, err
	}
	var out policy.Reservation
	err := e.change(ctx, "api", func(persist, temp *store.Overlay, eff *policy.Policy) error {
		cur, ok := eff.Reservation(name)
		if !ok {
			return &NotFoundError{What: "reservation", Name: name}
		}
		n := policy.NewReservation("")
		if err := PatchJSON(cur, patch, &n); err != nil {
			return err
		}
		n.Name = name
		if err := e.admitMTULocked(n); err != nil {
			return err
		}
		ov := persist
		if _, inTemp := temp.Reservations[name]; temporary || inTemp {
			ov = temp
		}
		ov.Reservations[name] = &n
		out = n
		return nil
	})
	if err != nil {
		var nf *NotFoundError
		if !errors.As(err, &nf) {
			e.publishRefused(name, err)
		}
		return out, err
	}
	e.publishModified(out)
	return out, nil
}

// PutReservation adds r, or replaces the reservation of its name whole
// (every field as r has it, zero ones too): the upsert of in-process front
// doors that own their reservations, such as RSVP signalling. created says
// which. It is one change with AddReservation's and SetReservation's
// validation, admission (rates, buffers, M against the MTUs) and events; a
// refusal changes nothing and is published as reservation.refused. A
// replaced reservation keeps its layer (a temporary one stays temporary).
func (e *Engine) PutReservation(ctx context.Context, who Caller, r policy.Reservation, temporary bool) (policy.Reservation, bool, error) {
	out, created, err := put(ctx, e, who, reservationKind, r, temporary)
	switch {
	case err != nil:
		e.publishRefused(r.Name, err)
	case created:
		e.publishAdmitted(out)
	default:
		e.publishModified(out)
	}
	return out, created, err
}

// publishAdmitted publishes a reservation added.
func (e *Engine) publishAdmitted(r policy.Reservation) {
	e.Publish(api.Event{Kind: EventResvAdmitted, Subject: "reservation/" + r.Name,
		Message: fmt.Sprintf("reservation %q admitted: %s %s", r.Name, r.Service, tspecText(r)), Fields: resvFields(r)})
}

// publishModified publishes a reservation changed.
func (e *Engine) publishModified(r policy.Reservation) {
	e.Publish(api.Event{Kind: EventResvModified, Subject: "reservation/" + r.Name,
		Message: fmt.Sprintf("reservation %q modified: %s %s", r.Name, r.Service, tspecText(r)), Fields: resvFields(r)})
}

// RemoveReservation removes a reservation; its sockets stay open and go on
// as best effort.
func (e *Engine) RemoveReservation(ctx context.Context, who Caller, name string) error {
	if err := remove(ctx, e, who, reservationKind, name); err != nil {
		return err
	}
	return nil
}

// publishRefused publishes a refusal of a reservation change, unless it
// was refused for who asked (forbidden) or a name conflict.
func (e *Engine) publishRefused(name string, err error) {
	var fb *ForbiddenError
	var cf *ConflictError
	if errors.As(err, &fb) || errors.As(err, &cf) {
		return
	}
	msg := err.Error()
	if fes := policy.AsErrors(err); len(fes) > 0 {
		msg = fes.Error()
	}
	e.Publish(api.Event{Kind: EventResvRefused, Subject: "reservation/" + name,
		Message: fmt.Sprintf("reservation %q refused; nothing was changed: %s", name, msg)})
}

// tspecText is a reservation's Tspec in RFC 2210 units.
func tspecText(r policy.Reservation) string {
	s := fmt.Sprintf("r=%d B/s b=%d B", uint64(r.Rate)/8, uint64(r.Burst))
	if r.Peak != 0 {
		s += fmt.Sprintf(" p=%d B/s", uint64(r.Peak)/8)
	}
	s += fmt.Sprintf(" m=%d B M=%d B", uint64(r.EffMinUnit()), uint64(r.EffMaxUnit()))
	if r.Service == policy.ServiceGuaranteed {
		s += fmt.Sprintf(" R=%d B/s S=%d us", uint64(r.EffServiceRate())/8, r.Slack)
	}
	return s
}

// resvFields are a reservation's figures for its events.
func resvFields(r policy.Reservation) map[string]any {
	return map[string]any{
		"service": string(r.Service), "rate_Bps": uint64(r.Rate) / 8, "burst_B": uint64(r.Burst),
		"peak_Bps": uint64(r.Peak) / 8, "min_unit_B": uint64(r.EffMinUnit()), "max_unit_B": uint64(r.EffMaxUnit()),
		"reserved_bps": uint64(r.Reserved()), "buffer_B": uint64(r.Buffer()),
	}
}

// Reservations lists the reservations (name, if not "", picks one; a
// *NotFoundError if there is none) with their Tspec, admission figures and
// what the kernel reports of them. Reservations are host policy: everyone
// sees them; an ordinary user sees only their own bound sockets.
func (e *Engine) Reservations(who Caller, name string) ([]api.ReservationInfo, error) {
	out, k := e.reservationsLocked(name)
	if name != "" && len(out) == 0 {
		return nil, &NotFoundError{What: "reservation", Name: name}
	}
	if k != nil {
		e.fillReservationStatus(k, who, out) // outside the lock: kernel reads
	}
	return out, nil
}

// ReservationAdmitted is reservation name as Reservations lists it but
// from the engine's state alone (its admission figures, no kernel
// counters or sockets): the answer to a change, which must not wait on
// reads of every link's classes.
func (e *Engine) ReservationAdmitted(name string) ([]api.ReservationInfo, error) {
	out, _ := e.reservationsLocked(name)
	if len(out) == 0 {
		return nil, &NotFoundError{What: "reservation", Name: name}
	}
	return out, nil
}

func (e *Engine) reservationsLocked(name string) ([]api.ReservationInfo, Kernel) {
	e.mu.Lock()
	defer e.mu.Unlock()
	p := e.eff.Policy
	var links []api.ResvLinkAdmission
	extra := e.publicExtraLocked()
	for _, l := range p.Links {
		if l.EgressRate == 0 {
			continue
		}
		held, _ := p.HeldOn(l.Name, extra)
		la := api.ResvLinkAdmission{Link: l.Name, Capacity: l.Capacity(), Guaranteed: held, BufferPool: uint64(l.EffResvBuffer())}
		for _, r := range p.Reservations {
			if r.Link == "" || r.Link == l.Name {
				la.BufferUsed = units.Add(la.BufferUsed, uint64(r.Buffer()))
			}
		}
		if ifx, ok := e.links[l.Name]; ok && e.k != nil {
			la.MTU, _ = e.k.LinkMTU(ifx)
		}
		links = append(links, la)
	}
	out := []api.ReservationInfo{}
	for _, r := range p.Reservations {
		if name != "" && r.Name != name {
			continue
		}
		ri := api.ReservationInfo{Reservation: r, Source: e.eff.Sources["reservation/"+r.Name], Slot: -1,
			Tspec: tspecOf(r), Links: links, Sockets: []api.BoundSocket{},
			Admission: api.ResvAdmission{Reserved: r.Reserved(), BufferPackets: r.BufferPackets(), BufferSize: r.BufferSize(), Buffer: uint64(r.Buffer())}}
		if s, ok := e.slots.Rules[resvRuleName(r.Name)]; ok {
			ri.Slot = s
		}
		if why := p.Unenforced(r); why != "" {
			ri.Broken = append(ri.Broken, "not enforced: "+why)
		}
		for _, l := range links {
			if l.MTU > 0 && uint64(r.EffMaxUnit()) > uint64(l.MTU) {
				ri.Broken = append(ri.Broken, fmt.Sprintf("M = %d above the MTU %d of link %s", uint64(r.EffMaxUnit()), l.MTU, l.Link))
			}
		}
		out = append(out, ri)
	}
	return out, e.k
}

// resvRuleName is the name of the rule that carries a reservation's
// session selector in the compiled policy (":" keeps it apart from every
// rule name a user can give).
func resvRuleName(name string) string { return derive.ResvKey(name) }

// tspecOf is a reservation's Tspec and Rspec in RFC 2210 units.
func tspecOf(r policy.Reservation) api.Tspec {
	t := api.Tspec{Rate: uint64(r.Rate) / 8, Bucket: uint64(r.Burst), Peak: uint64(r.Peak) / 8,
		MinUnit: uint64(r.EffMinUnit()), MaxUnit: uint64(r.EffMaxUnit())}
	if r.Service == policy.ServiceGuaranteed {
		t.ServiceRate, t.Slack = uint64(r.EffServiceRate())/8, r.Slack
	}
	return t
}

// watchReservations publishes reservation.broken when a reservation can no
// longer be honoured as admitted — a managed link's MTU fell below its M,
// or a managed link's interface vanished — and reservation.restored when
// that ends. Each problem is published once.
func (e *Engine) watchReservations() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.k == nil {
		return
	}
	now := map[string]bool{}
	links := store.SortedKeys(e.links)
	mtus := make(map[string]int, len(links)) // read once, not once per reservation
	if len(e.eff.Policy.Reservations) > 0 {
		for _, name := range links {
			if mtu, err := e.k.LinkMTU(e.links[name]); err == nil {
				mtus[name] = mtu
			}
		}
	}
	for _, r := range e.eff.Policy.Reservations {
		if r.Service == policy.ServiceBestEffort {
			continue
		}
		if why := e.eff.Policy.Unenforced(r); why != "" {
			now[r.Name+"\x00not enforced: "+why] = true
		}
		for _, name := range links {
			if mtu, ok := mtus[name]; ok && uint64(r.EffMaxUnit()) > uint64(mtu) {
				now[r.Name+"\x00"+fmt.Sprintf("M = %d is above the MTU %d of link %s", uint64(r.EffMaxUnit()), mtu, name)] = true
			}
		}
		for _, name := range e.missingLocked() {
			now[r.Name+"\x00"+fmt.Sprintf("link %s has no interface now", name)] = true
		}
	}
	for _, k := range store.SortedKeys(now) {
		if !e.resvBroken[k] {
			name, why, _ := cutNUL(k)
			e.Publish(api.Event{Kind: EventResvBroken, Subject: "reservation/" + name,
				Message: fmt.Sprintf("reservation %q cannot be honoured: %s", name, why), Fields: map[string]any{"why": why}})
		}
	}
	for _, k := range store.SortedKeys(e.resvBroken) {
		if !now[k] {
			name, why, _ := cutNUL(k)
			e.Publish(api.Event{Kind: EventResvRestored, Subject: "reservation/" + name,
				Message: fmt.Sprintf("reservation %q is honoured again (%s no longer)", name, why)})
		}
	}
	e.resvBroken = now
}

// EventResvRestored: a reservation.broken problem ended.
const EventResvRestored = "reservation.restored"

func cutNUL(s string) (string, string, bool) {
	for i := 0; i < len(s); i++ {
		if s[i] == 0 {
			return s[:i], s[i+1:], true
		}
	}
	return s, "", false
}

// Sockets opened before their reservation are bound by the classifier at
// their next packet; binding them at once walks every TCP and UDP socket
// of the namespace, so it is done only after a reservation was added or
// changed, and off the change's path: the engine asks for it (BindWanted)
// and the daemon calls BindOpenSockets once the answer is on its way.

// wantBindLocked asks for a BindOpenSockets (capacity 1: asks coalesce)
// of the protocols of the rules that name the reservations ids.
func (e *Engine) wantBindLocked(rules []datapath.Rule, ids map[uint16]bool) {
	if e.binds == nil {
		e.binds = map[uint8]bool{}
	}
	for _, r := range rules {
		if r.Reservation != 0 && ids[r.Reservation] {
			e.binds[r.Proto] = true // 0: any, both walks
		}
	}
	select {
	case e.bindC <- struct{}{}:
	default:
	}
}

// BindWanted is signalled when a reservation was added or changed.
func (e *Engine) BindWanted() <-chan struct{} { return e.bindC }

// BindOpenSockets binds the open sockets the applied reservations cover
// and that are not bound yet (Kernel.BindOpenSockets), without the
// engine's lock.
func (e *Engine) BindOpenSockets() {
	e.mu.Lock()
	k := e.k
	protos := slices.Sorted(maps.Keys(e.binds))
	e.binds = nil
	e.mu.Unlock()
	if k == nil || len(protos) == 0 {
		return
	}
	if err := k.BindOpenSockets(protos...); err != nil {
		e.log.Warn("bind open sockets to reservations", "err", err)
	}
}

// newReservations are the ids of the reservations of now that were not in
// was as they are.
func newReservations(was, now []datapath.Reservation) map[uint16]bool {
	if len(now) == 0 {
		return nil
	}
	old := make(map[uint16]int, len(was))
	for i, r := range was {
		old[r.ID] = i
	}
	var ids map[uint16]bool
	for _, r := range now {
		i, ok := old[r.ID]
		if !ok || !reflect.DeepEqual(was[i], r) {
			if ids == nil {
				ids = map[uint16]bool{}
			}
			ids[r.ID] = true
		}
	}
	return ids
}
