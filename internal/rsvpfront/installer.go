package rsvpfront

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"net/netip"
	"strings"
	"time"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/engine"
	"github.com/hostqos/hostqos/internal/events"
	"github.com/hostqos/hostqos/internal/policy"
	"github.com/hostqos/hostqos/internal/rsvp"
)

// Installer installs the reservations RSVP signalling asks for as the
// engine's own reservation objects (temporary: signalling refreshes them,
// so a restarted daemon does not keep them), so admission, policing,
// binding and events are the host's; see docs/rsvp.md.
type Installer struct {
	E       *engine.Engine
	Timeout time.Duration // of one engine change (5 s if 0)
	// Route finds the interface toward a session's destination: the
	// reservation is admitted on (and gets its HTB leaf on) that link
	// only, when it is managed (RSVPOptions.Route).
	Route func(dst netip.Addr) (int, error)
	// Local is the node's address toward a destination (Options.Local);
	// nil: every flow is taken for one of this host's senders.
	Local func(dst netip.Addr) (netip.Addr, bool, error)
}

// forwarded reports whether the flow's sender is another host: this node
// only routes it.
func (i *Installer) forwarded(k rsvp.FlowKey) bool {
	if i.Local == nil {
		return false
	}
	src, _, err := i.Local(k.Session.Dest)
	return err == nil && src != k.Sender.Src
}

// outLink is the managed link toward dst, "" when unknown or unmanaged
// (then the reservation counts on every shaped link, as a local one).
func (i *Installer) outLink(dst netip.Addr) string {
	if i.Route == nil {
		return ""
	}
	ifindex, err := i.Route(dst)
	if err != nil {
		return ""
	}
	name, _ := i.E.LinkOfIfindex(ifindex)
	return name
}

// rsvpCaller is signalling acting on the host's policy.
var rsvpCaller = engine.Caller{Privileged: true}

// ReservationName is the reservation object of a signalled flow:
// "rsvp-" and 16 hex digits of a hash of the session and sender.
func ReservationName(k rsvp.FlowKey) string {
	h := fnv.New64a()
	fmt.Fprint(h, k.String())
	return fmt.Sprintf("rsvp-%016x", h.Sum64())
}

// Reservation maps a signalled flowspec onto a reservation: the
// sender's socket (protocol, local address and port) toward the session
// (remote address and port); r, p, R from bytes/s to bit/s; an infinite
// peak is no peak term.
func Reservation(k rsvp.FlowKey, fs rsvp.Flowspec) (policy.Reservation, error) {
	r := policy.NewReservation(ReservationName(k))
	switch k.Session.Proto {
	case 17:
		r.Proto = "udp"
	case 6:
		r.Proto = "tcp"
	default:
		return r, fmt.Errorf("session protocol %d: only UDP (17) and TCP (6) sessions are reserved", k.Session.Proto)
	}
	bits := func(bytesPerSec float32) policy.Rate {
		x := math.Round(float64(bytesPerSec) * 8)
		switch {
		case math.IsInf(x, 1):
			return 0 // no peak term
		case !(x >= 0): // NaN or negative: no rate, refused as missing
			return 0
		case x > float64(policy.MaxRate):
			return policy.MaxRate + 1 // refused by validation with the bound, not wrapped
		}
		return policy.Rate(x)
	}
	src, dst := k.Sender.Src, k.Session.Dest
	r.Local = netip.PrefixFrom(src, src.BitLen())
	r.Remote = netip.PrefixFrom(dst, dst.BitLen())
	if k.Sender.Port != 0 {
		r.LPort = policy.PortRange{From: k.Sender.Port, To: k.Sender.Port}
	}
	if k.Session.Port != 0 {
		r.RPort = policy.PortRange{From: k.Session.Port, To: k.Session.Port}
	}
	t := fs.Tspec
	r.Rate, r.Burst, r.Peak = bits(t.Rate), policy.Size(t.Bucket), bits(t.Peak)
	r.MinUnit, r.MaxUnit = policy.Size(t.MinUnit), policy.Size(t.MaxPacket)
	switch fs.Service {
	case rsvp.ServiceGuaranteed:
		r.Service, r.ServiceRate, r.Slack = policy.ServiceGuaranteed, bits(fs.RspecRate), int(min(fs.RspecSlack, math.MaxInt32))
	default:
		r.Service = policy.ServiceControlledLoad
	}
	return r, nil
}

func (i *Installer) ctx() (context.Context, context.CancelFunc) {
	d := i.Timeout
	if d <= 0 {
		d = 5 * time.Second
	}
	return context.WithTimeout(context.Background(), d)
}

// Install adds the flow's reservation, or replaces it when the flowspec
// changed (one change: PutReservation); a refusal leaves the previous
// state. Admission refusals become RSVP admission errors (value 2,
// bandwidth unavailable; 3 when M is refused) carrying the engine's reason
// with its numbers.
func (i *Installer) Install(k rsvp.FlowKey, fs rsvp.Flowspec) error {
	r, err := Reservation(k, fs)
	if err != nil {
		return &rsvp.AdmissionError{Value: 2, Reason: err.Error()}
	}
	r.Link = i.outLink(k.Session.Dest)
	if i.forwarded(k) {
		// A router has no sender to hold back (no socket, no flow
		// control): it serves the flow at what was reserved (R) and sends
		// what exceeds the Tspec as best effort (RFC 2212, policing).
		r.Enforce = policy.EnforcePolice
	}
	ctx, cancel := i.ctx()
	defer cancel()
	if _, _, err := i.E.PutReservation(ctx, rsvpCaller, r, true); err != nil {
		if v, refused := admissionValue(err); refused {
			return &rsvp.AdmissionError{Value: v, Reason: err.Error()}
		}
		return fmt.Errorf("install reservation %s: %w", r.Name, err)
	}
	return nil
}

// admissionValue is the RSVP admission error value (RFC 2210) of the
// engine's refusal of a reservation: 3 (MTU too big) when its field
// max_unit (M) is refused — above a managed link's MTU or above the
// largest IP packet —, 2 (bandwidth unavailable) for any other refusal;
// refused is false for failures that are not the request's (the kernel,
// the state file).
func admissionValue(err error) (v uint16, refused bool) {
	fes := policy.AsErrors(err)
	for _, fe := range fes {
		if fe.Field == "max_unit" {
			return 3, true
		}
	}
	var bad *engine.BadRequestError
	if len(fes) > 0 || errors.As(err, &bad) {
		return 2, true
	}
	return 0, false
}

// Remove removes the flow's reservation (if any).
func (i *Installer) Remove(k rsvp.FlowKey) {
	ctx, cancel := i.ctx()
	defer cancel()
	_ = i.E.RemoveReservation(ctx, rsvpCaller, ReservationName(k))
}

// publish publishes a signalling upcall on the event stream as
// "rsvp.<kind>" (rsvp.path, rsvp.resv, rsvp.resv-error, rsvp.confirm, …)
// with subject "rsvp/<session>", so an application learns what the network
// granted or refused.
func (i *Installer) publish(ev rsvp.Event) {
	fields := map[string]any{"dest": ev.Key.Session.Dest.String(), "port": ev.Key.Session.Port,
		"proto": ev.Key.Session.Proto, "sender": ev.Key.Sender.Src.String(), "sender_port": ev.Key.Sender.Port}
	msg := fmt.Sprintf("RSVP %s for %s", ev.Kind, ev.Key)
	if ev.Tspec != nil {
		fields["r"], fields["b"], fields["p"] = ev.Tspec.Rate, ev.Tspec.Bucket, rsvpFloat(ev.Tspec.Peak)
		fields["m"], fields["M"] = ev.Tspec.MinUnit, ev.Tspec.MaxPacket
	}
	if fs := ev.Flowspec; fs != nil {
		fields["service"], fields["r"], fields["b"] = fs.Service, fs.Tspec.Rate, fs.Tspec.Bucket
		if fs.Service == rsvp.ServiceGuaranteed {
			fields["R"], fields["S"] = fs.RspecRate, fs.RspecSlack
		}
		msg += " [" + flowspecText(*fs) + "]"
	}
	if ev.Node.IsValid() {
		fields["node"] = ev.Node.String()
		msg += " from " + ev.Node.String()
	}
	if ev.Code != 0 || ev.Kind == "resv-error" || ev.Kind == "path-error" {
		fields["error_code"], fields["error_value"] = ev.Code, ev.Value
		msg += fmt.Sprintf(" (error code %d, value %d)", ev.Code, ev.Value)
	}
	if ev.Reason != "" {
		fields["reason"] = ev.Reason
		msg += ": " + ev.Reason
	}
	i.E.PublishBy(events.Host(rsvpParty(ev)), api.Event{Kind: "rsvp." + ev.Kind,
		Subject: fmt.Sprintf("rsvp/%s:%d", ev.Key.Session.Dest, ev.Key.Session.Port), Message: msg, Fields: fields})
}

// rsvpParty is the remote party an upcall is charged to (events.Host): the
// node that reported an error or confirmed; for path state, the sender
// that announced it; for reservation state, the receiver (the session's
// destination) that asked for it.
func rsvpParty(ev rsvp.Event) netip.Addr {
	switch {
	case ev.Node.IsValid():
		return ev.Node
	case strings.HasPrefix(ev.Kind, "path"):
		return ev.Key.Sender.Src
	}
	return ev.Key.Session.Dest
}

// rsvpFloat is a float for JSON: +Inf (an unknown peak) as -1.
func rsvpFloat(f float32) float32 {
	if math.IsInf(float64(f), 0) {
		return -1
	}
	return f
}
