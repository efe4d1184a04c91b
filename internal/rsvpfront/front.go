// Package rsvpfront is the RSVP front door of the engine (docs/rsvp.md):
// the sessions applications register through the API, kept across
// restarts, and the installer that turns what RSVP signalling (the node of
// internal/rsvp) asks for into the engine's reservation objects. It
// reaches the engine only through its exported API: PutReservation and
// RemoveReservation, LinkOfIfindex, and PublishBy for the upcalls.
package rsvpfront

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"net/netip"
	"os"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/atomicfile"
	"github.com/hostqos/hostqos/internal/engine"
	"github.com/hostqos/hostqos/internal/policy"
	"github.com/hostqos/hostqos/internal/rsvp"
)

// Front is the engine's RSVP front door (RAPI-like): the sessions
// applications registered through the API and the node that keeps every
// session's soft state (docs/rsvp.md). The node reaches the host's policy
// only through Installer (reservation objects) and the event stream;
// the daemon runs the node on raw sockets (rsvp.Agent) and hands this
// front door the agent's Send.
type Front struct {
	Node *rsvp.Node
	inst *Installer
	opts Options

	mu       sync.Mutex // guards the fields below; never held while calling Node
	send     func([]rsvp.Out)
	sessions map[string]*rsvpSession
	byKey    map[rsvp.Session]string
	pending  chan rsvp.Session // sessions whose new senders to reserve for
}

// Options configure the front door.
type Options struct {
	Router      bool
	Refresh     time.Duration // R (rsvp.DefaultRefresh if 0)
	MaxSessions int           // API sessions (policy.DefaultRSVPMaxSessions if 0)
	// Local is the node's address toward a destination and whether the
	// destination is this host (rsvp.Config.Local).
	Local func(dst netip.Addr) (netip.Addr, bool, error)
	// Counters reads the agent's counters (nil: none).
	Counters func() api.RSVPCounters
	// StatePath is where the API's sessions are kept across restarts
	// ("" keeps them in memory only).
	StatePath string
	// Route is the interface (ifindex) of the route toward a destination
	// (nil: none looked up): a signalled reservation is admitted on that
	// link only when it is a managed link, on every shaped link otherwise.
	Route func(dst netip.Addr) (int, error)
	// MaxPathsPerHop and MaxPathsPerSource bound the path states one
	// previous hop and one source address may hold (rsvp.Config; 0: no
	// bound but the node's).
	MaxPathsPerHop, MaxPathsPerSource int
	// Log gets the node's rate-limited notes of refused messages.
	Log *slog.Logger
}

type rsvpSession struct {
	name    string
	key     rsvp.Session
	sender  *api.RSVPSenderRequest
	reserve *api.RSVPReserveRequest
	last    string
}

// New makes the front door and its node over engine e.
func New(e *engine.Engine, o Options) *Front {
	if o.Refresh <= 0 {
		o.Refresh = rsvp.DefaultRefresh
	}
	if o.MaxSessions <= 0 {
		o.MaxSessions = policy.DefaultRSVPMaxSessions
	}
	f := &Front{inst: &Installer{E: e, Route: o.Route, Local: o.Local}, opts: o, sessions: map[string]*rsvpSession{},
		byKey: map[rsvp.Session]string{}, pending: make(chan rsvp.Session, 256)}
	f.Node = rsvp.NewNode(rsvp.Config{Local: o.Local, Install: f.inst, Upcall: f.upcall, Refresh: o.Refresh, Router: o.Router,
		MaxPerHop: o.MaxPathsPerHop, MaxPerSource: o.MaxPathsPerSource, Log: o.Log})
	return f
}

// SetSend sets how messages are sent (the agent's Send).
func (f *Front) SetSend(send func([]rsvp.Out)) {
	f.mu.Lock()
	f.send = send
	f.mu.Unlock()
}

func (f *Front) sendOut(outs []rsvp.Out) {
	f.mu.Lock()
	send := f.send
	f.mu.Unlock()
	if send != nil && len(outs) > 0 {
		send(outs)
	}
}

// Run reserves for senders whose Path arrives after the receiver asked,
// until ctx ends.
func (f *Front) Run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case s := <-f.pending:
			f.mu.Lock()
			name, ok := f.byKey[s]
			f.mu.Unlock()
			if ok {
				_ = f.reserveNew(name, false)
			}
		}
	}
}

// upcall publishes a node's upcall and notes it on the session. It runs
// under the node's lock: it must not call the node.
func (f *Front) upcall(ev rsvp.Event) {
	f.inst.publish(ev)
	f.mu.Lock()
	defer f.mu.Unlock()
	name, ok := f.byKey[ev.Key.Session]
	if !ok {
		return
	}
	s := f.sessions[name]
	s.last = rsvpEventText(ev)
	if ev.Kind == "path" && s.reserve != nil {
		select {
		case f.pending <- ev.Key.Session:
		default: // a later Path refresh does not come again; Reserve again to catch up
		}
	}
}

func rsvpEventText(ev rsvp.Event) string {
	t := fmt.Sprintf("%s %s:%d", ev.Kind, ev.Key.Sender.Src, ev.Key.Sender.Port)
	if ev.Node.IsValid() {
		t += " from " + ev.Node.String()
	}
	if ev.Code != 0 || strings.HasSuffix(ev.Kind, "error") {
		t += fmt.Sprintf(" (error code %d, value %d)", ev.Code, ev.Value)
	}
	if ev.Flowspec != nil {
		t += " " + flowspecText(*ev.Flowspec)
	}
	if ev.Reason != "" {
		t += ": " + ev.Reason
	}
	return t
}

// flowspecText is a flowspec's figures in RFC 2210 units.
func flowspecText(fs rsvp.Flowspec) string {
	svc := "controlled-load"
	if fs.Service == rsvp.ServiceGuaranteed {
		svc = "guaranteed"
	}
	t := fmt.Sprintf("%s r=%.0f B/s b=%.0f B M=%d B", svc, fs.Tspec.Rate, fs.Tspec.Bucket, fs.Tspec.MaxPacket)
	if fs.Service == rsvp.ServiceGuaranteed {
		t += fmt.Sprintf(" R=%.0f B/s", fs.RspecRate)
	}
	return t
}

var rsvpNameRE = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]*$`)

// AddSession registers a session: a unicast destination address and
// port and a protocol. Nothing is sent yet.
func (f *Front) AddSession(who engine.Caller, req api.RSVPSessionRequest) (api.RSVPSession, error) {
	if err := who.MayChange(); err != nil {
		return api.RSVPSession{}, err
	}
	key, err := rsvpSessionKey(req)
	if err != nil {
		return api.RSVPSession{}, &engine.BadRequestError{Err: err}
	}
	f.mu.Lock()
	if _, ok := f.sessions[req.Name]; ok {
		f.mu.Unlock()
		return api.RSVPSession{}, &engine.ConflictError{What: "rsvp session", Name: req.Name}
	}
	if other, ok := f.byKey[key]; ok {
		f.mu.Unlock()
		return api.RSVPSession{}, &engine.BadRequestError{Err: fmt.Errorf("add rsvp session %q: session %q has the same destination %s and protocol %s; use it or remove it", req.Name, other, req.Dest, req.Proto)}
	}
	if len(f.sessions) >= f.opts.MaxSessions {
		f.mu.Unlock()
		return api.RSVPSession{}, &engine.TooManyError{Why: fmt.Sprintf("add rsvp session %q: %d sessions, the most this daemon keeps ([rsvp] max_sessions); remove one first", req.Name, f.opts.MaxSessions)}
	}
	f.sessions[req.Name] = &rsvpSession{name: req.Name, key: key}
	f.byKey[key] = req.Name
	if err := f.saveLocked(); err != nil {
		delete(f.sessions, req.Name)
		delete(f.byKey, key)
		f.mu.Unlock()
		return api.RSVPSession{}, err
	}
	f.mu.Unlock()
	return f.Session(who, req.Name)
}

func rsvpSessionKey(req api.RSVPSessionRequest) (rsvp.Session, error) {
	switch {
	case req.Name == "":
		return rsvp.Session{}, fmt.Errorf("field name: missing; every session needs a name")
	case len(req.Name) > policy.MaxNameLen || !rsvpNameRE.MatchString(req.Name):
		return rsvp.Session{}, fmt.Errorf("field name = %q: not a valid name; use 1-%d of a-z A-Z 0-9 _ . - starting with a letter or digit", policy.Clip(req.Name), policy.MaxNameLen)
	}
	ap, err := netip.ParseAddrPort(req.Dest)
	if err != nil || ap.Port() == 0 {
		return rsvp.Session{}, fmt.Errorf("field dest = %q: want ADDR:PORT with a port 1-65535, e.g. 198.18.2.2:5004 or [2001:db8::2]:5004", policy.Clip(req.Dest))
	}
	a := ap.Addr().Unmap()
	if a.IsMulticast() || a.IsUnspecified() || a.IsLoopback() {
		return rsvp.Session{}, fmt.Errorf("field dest = %q: multicast, unspecified and loopback destinations are not supported; give the receiver's unicast address", policy.Clip(req.Dest))
	}
	k := rsvp.Session{Dest: a, Port: ap.Port()}
	switch req.Proto {
	case "udp":
		k.Proto = 17
	case "tcp":
		k.Proto = 6
	default:
		return rsvp.Session{}, fmt.Errorf("field proto = %q: want udp or tcp", policy.Clip(req.Proto))
	}
	return k, nil
}

// Sender announces (or changes) this host as a sender of session name:
// a Path now and every R toward the destination.
func (f *Front) Sender(who engine.Caller, name string, req api.RSVPSenderRequest) (api.RSVPSession, error) {
	if err := who.MayChange(); err != nil {
		return api.RSVPSession{}, err
	}
	t, err := rsvpTspec(req.Tspec)
	if err != nil {
		return api.RSVPSession{}, &engine.BadRequestError{Err: fmt.Errorf("rsvp sender %q: %w", name, err)}
	}
	f.mu.Lock()
	s, ok := f.sessions[name]
	var key rsvp.Session
	var old *api.RSVPSenderRequest
	if ok {
		key, old = s.key, s.sender
	}
	f.mu.Unlock()
	if !ok {
		return api.RSVPSession{}, &engine.NotFoundError{What: "rsvp session", Name: name}
	}
	src, self, err := f.opts.Local(key.Dest)
	if err != nil {
		return api.RSVPSession{}, &engine.BadRequestError{Err: fmt.Errorf("rsvp sender %q: %w", name, err)}
	}
	if self {
		return api.RSVPSession{}, &engine.BadRequestError{Err: fmt.Errorf("rsvp sender %q: the destination %s is this host; announce the sender on the sending host", name, key.Dest)}
	}
	var outs []rsvp.Out
	if old != nil && old.Port != req.Port {
		outs = f.Node.RemoveSender(rsvp.FlowKey{Session: key, Sender: rsvp.Filter{Src: src, Port: old.Port}})
	}
	o, err := f.Node.Sender(rsvp.FlowKey{Session: key, Sender: rsvp.Filter{Src: src, Port: req.Port}}, t, time.Now())
	if err != nil {
		f.sendOut(outs)
		return api.RSVPSession{}, &engine.BadRequestError{Err: fmt.Errorf("rsvp sender %q: %w", name, err)}
	}
	f.mu.Lock()
	var saveErr error
	if s := f.sessions[name]; s != nil {
		r := req
		s.sender = &r
		saveErr = f.saveLocked()
	}
	f.mu.Unlock()
	f.sendOut(append(outs, o...))
	if saveErr != nil {
		return api.RSVPSession{}, saveErr
	}
	return f.Session(who, name)
}

// Reserve asks, as the receiver, for a reservation for every sender of
// session name whose Path has arrived, and for senders that arrive later.
func (f *Front) Reserve(who engine.Caller, name string, req api.RSVPReserveRequest) (api.RSVPSession, error) {
	if err := who.MayChange(); err != nil {
		return api.RSVPSession{}, err
	}
	if _, _, err := rsvpFlowspec(req); err != nil {
		return api.RSVPSession{}, &engine.BadRequestError{Err: fmt.Errorf("rsvp reserve %q: %w", name, err)}
	}
	f.mu.Lock()
	s, ok := f.sessions[name]
	if ok {
		old := s.reserve
		r := req
		s.reserve = &r
		if err := f.saveLocked(); err != nil {
			s.reserve = old
			f.mu.Unlock()
			return api.RSVPSession{}, err
		}
	}
	f.mu.Unlock()
	if !ok {
		return api.RSVPSession{}, &engine.NotFoundError{What: "rsvp session", Name: name}
	}
	if err := f.reserveNew(name, true); err != nil {
		return api.RSVPSession{}, &engine.BadRequestError{Err: fmt.Errorf("rsvp reserve %q: %w", name, err)}
	}
	return f.Session(who, name)
}

// reserveNew sends the session's reservation to its senders: all of them
// (all) or those not yet reserved for.
func (f *Front) reserveNew(name string, all bool) error {
	f.mu.Lock()
	s, ok := f.sessions[name]
	var key rsvp.Session
	var req api.RSVPReserveRequest
	if ok && s.reserve != nil {
		key, req = s.key, *s.reserve
	}
	f.mu.Unlock()
	if !ok || req.Service == "" {
		return nil
	}
	fs, style, err := rsvpFlowspec(req)
	if err != nil {
		return err
	}
	var filters []rsvp.Filter
	for _, flt := range f.Node.Senders(key) {
		if all || !f.Node.Reserved(rsvp.FlowKey{Session: key, Sender: flt}) {
			filters = append(filters, flt)
		}
	}
	if len(filters) == 0 {
		return nil // reserved when a sender's Path arrives
	}
	if style == rsvp.StyleSE && !all {
		filters = f.Node.Senders(key) // a shared reservation names every sender
	}
	outs, err := f.Node.Reserve(key, style, fs, filters, req.Confirm, time.Now())
	if err != nil {
		return err
	}
	f.sendOut(outs)
	return nil
}

// Remove tears the session down: PathTear for this host's sender,
// ResvTear for its reservations; the session is forgotten.
func (f *Front) Remove(who engine.Caller, name string) error {
	if err := who.MayChange(); err != nil {
		return err
	}
	f.mu.Lock()
	s, ok := f.sessions[name]
	if ok {
		delete(f.sessions, name)
		delete(f.byKey, s.key)
		if err := f.saveLocked(); err != nil {
			f.sessions[name], f.byKey[s.key] = s, name
			f.mu.Unlock()
			return err
		}
	}
	f.mu.Unlock()
	if !ok {
		return &engine.NotFoundError{What: "rsvp session", Name: name}
	}
	var outs []rsvp.Out
	pg := f.Node.View(func(x rsvp.Session) bool { return x == s.key }, 0, 0)
	for _, r := range pg.Resvs {
		if r.Originated {
			outs = append(outs, f.Node.RemoveReservation(r.Key)...)
		}
	}
	for _, p := range pg.Paths {
		if p.Originated {
			outs = append(outs, f.Node.RemoveSender(p.Key)...)
		}
	}
	f.sendOut(outs)
	return nil
}

// Session reports one session of the API with its states (at most
// api.MaxRSVPStates of each).
func (f *Front) Session(_ engine.Caller, name string) (api.RSVPSession, error) {
	f.mu.Lock()
	s, ok := f.sessions[name]
	var out api.RSVPSession
	if ok {
		out = s.view()
	}
	f.mu.Unlock()
	if !ok {
		return api.RSVPSession{}, &engine.NotFoundError{What: "rsvp session", Name: name}
	}
	pg := f.Node.View(func(x rsvp.Session) bool { return x == s.key }, 0, api.MaxRSVPStates)
	out.Paths, out.Resvs = f.pathViews(pg.Paths), f.resvViews(pg.Resvs)
	return out, nil
}

// view is the session without its states (caller holds f.mu).
func (s *rsvpSession) view() api.RSVPSession {
	return api.RSVPSession{Name: s.name, Dest: netip.AddrPortFrom(s.key.Dest, s.key.Port).String(), Proto: protoName(s.key.Proto),
		Sender: s.sender, Reserve: s.reserve, LastEvent: s.last}
}

// Status reports the agent, the API's sessions and a page of the states:
// q.Limit of each list (api.DefaultRSVPPage if 0) from q.Offset on, in the
// order of session and sender.
func (f *Front) Status(_ engine.Caller, q api.RSVPListQuery) api.RSVPStatus {
	st := api.RSVPStatus{Enabled: true, Router: f.opts.Router, Refresh: f.opts.Refresh.String(), Lifetime: rsvp.Lifetime(f.opts.Refresh).String(),
		MaxPeerRefresh: f.Node.MaxPeerRefresh().String()}
	if f.opts.Counters != nil {
		st.Counters = f.opts.Counters()
	}
	st.Counters.Paths, st.Counters.Resvs = f.Node.Counts()
	c := f.Node.Counters()
	st.Counters.Dropped, st.Counters.NotHere, st.Counters.OverHop, st.Counters.OverSource = c.Dropped, c.NotHere, c.OverHop, c.OverSource
	st.Counters.BadTear, st.Counters.NoRoute = c.BadTear, c.NoRoute
	st.Counters.Blockaded, st.Counters.OverNhop = c.Blockaded, c.OverNhop
	f.mu.Lock()
	st.Sessions = make([]api.RSVPSession, 0, len(f.sessions))
	for _, s := range f.sessions {
		st.Sessions = append(st.Sessions, s.view()) // states: listed below, once
	}
	f.mu.Unlock()
	sort.Slice(st.Sessions, func(i, j int) bool { return st.Sessions[i].Name < st.Sessions[j].Name })
	limit := q.Limit
	if limit <= 0 {
		limit = api.DefaultRSVPPage
	}
	pg := f.Node.View(nil, q.Offset, limit)
	st.Paths, st.Resvs = f.pathViews(pg.Paths), f.resvViews(pg.Resvs)
	if next := q.Offset + limit; next < max(pg.PathsTotal, pg.ResvsTotal) {
		st.Truncated, st.NextOffset = true, next
	}
	return st
}

// protoName names a session's protocol (only UDP and TCP are reserved).
func protoName(p uint8) string {
	switch p {
	case 6:
		return "tcp"
	case 17:
		return "udp"
	}
	return fmt.Sprint(p)
}

func sessionText(s rsvp.Session) string {
	return netip.AddrPortFrom(s.Dest, s.Port).String() + "/" + protoName(s.Proto)
}

func expiresIn(t time.Time) float64 {
	if t.IsZero() {
		return 0
	}
	return math.Round(time.Until(t).Seconds()*1000) / 1000
}

func (f *Front) pathViews(ps []rsvp.PathView) []api.RSVPPath {
	out := []api.RSVPPath{}
	for _, p := range ps {
		v := api.RSVPPath{Session: sessionText(p.Key.Session), Sender: netip.AddrPortFrom(p.Key.Sender.Src, p.Key.Sender.Port).String(),
			Tspec: apiTspec(p.Tspec), Expires: expiresIn(p.Expires)}
		switch {
		case p.Originated:
			v.Role = "sender"
		case p.Self:
			v.Role = "receiver"
		default:
			v.Role = "router"
		}
		if p.PrevHop.IsValid() {
			v.PrevHop = p.PrevHop.String()
		}
		out = append(out, v)
	}
	return out
}

func (f *Front) resvViews(rs []rsvp.ResvView) []api.RSVPResv {
	out := []api.RSVPResv{}
	for _, r := range rs {
		v := api.RSVPResv{Session: sessionText(r.Key.Session), Sender: netip.AddrPortFrom(r.Key.Sender.Src, r.Key.Sender.Port).String(),
			Style: strings.ToLower(r.Style.String()), Flowspec: apiTspec(r.Flowspec.Tspec), Expires: expiresIn(r.Expires)}
		v.Service = string(policy.ServiceControlledLoad)
		if r.Flowspec.Service == rsvp.ServiceGuaranteed {
			v.Service = string(policy.ServiceGuaranteed)
			v.Flowspec.ServiceRate, v.Flowspec.Slack = uint64(r.Flowspec.RspecRate), int(min(r.Flowspec.RspecSlack, math.MaxInt32))
		}
		switch {
		case r.Originated:
			v.Role = "receiver"
		case r.NextHop.IsValid():
			v.Role = "router"
			v.NextHop, v.NextHops = r.NextHop.String(), r.NextHops
			v.Reservation = ReservationName(r.Key)
			if src, _, err := f.opts.Local(r.Key.Session.Dest); err == nil && src == r.Key.Sender.Src {
				v.Role = "sender"
			}
		}
		out = append(out, v)
	}
	return out
}

// apiTspec is a Tspec in the API's units (an infinite peak is 0).
func apiTspec(t rsvp.Tspec) api.Tspec {
	out := api.Tspec{Rate: uint64(t.Rate), Bucket: uint64(t.Bucket), MinUnit: uint64(t.MinUnit), MaxUnit: uint64(t.MaxPacket)}
	if !math.IsInf(float64(t.Peak), 1) {
		out.Peak = uint64(t.Peak)
	}
	return out
}

// rsvpTspec checks an API Tspec and converts it: r and b required, p 0
// for no peak limit, m and M their defaults (64, 1500) when 0.
func rsvpTspec(t api.Tspec) (rsvp.Tspec, error) {
	out := rsvp.Tspec{Rate: float32(t.Rate), Bucket: float32(t.Bucket), Peak: float32(math.Inf(1)),
		MinUnit: uint32(min(t.MinUnit, math.MaxUint32)), MaxPacket: uint32(min(t.MaxUnit, math.MaxUint32))}
	if t.Peak != 0 {
		out.Peak = float32(t.Peak)
	}
	if out.MinUnit == 0 {
		out.MinUnit = uint32(policy.DefaultMinUnit)
	}
	if out.MaxPacket == 0 {
		out.MaxPacket = uint32(policy.DefaultMaxUnit)
	}
	maxBps := uint64(policy.MaxRate) / 8
	switch {
	case t.Rate == 0:
		return out, fmt.Errorf("tspec r: missing; give the token rate in bytes/s (r=125000 is 1 Mbit/s)")
	case t.Rate > maxBps || t.Peak > maxBps || t.ServiceRate > maxBps:
		return out, fmt.Errorf("tspec r = %d, p = %d, R = %d B/s: a rate is at most %d B/s (%s); give the flow's real rates", t.Rate, t.Peak, t.ServiceRate, maxBps, policy.MaxRate)
	case t.Rate < uint64(policy.MinReservationRate)/8:
		return out, fmt.Errorf("tspec r = %d B/s: below %d B/s (%s)", t.Rate, uint64(policy.MinReservationRate)/8, policy.MinReservationRate)
	case t.Bucket == 0:
		return out, fmt.Errorf("tspec b: missing; give the bucket depth in bytes, at least M")
	case t.Bucket < uint64(out.MaxPacket):
		return out, fmt.Errorf("tspec b = %d: smaller than M = %d, a packet of M bytes could never conform; use b ≥ M", t.Bucket, out.MaxPacket)
	case t.Bucket > uint64(policy.MaxReservationBurst):
		return out, fmt.Errorf("tspec b = %d: above %d bytes", t.Bucket, uint64(policy.MaxReservationBurst))
	case out.MaxPacket > uint32(policy.MaxMaxUnit):
		return out, fmt.Errorf("tspec M = %d: above %d bytes, the largest IP packet", out.MaxPacket, uint64(policy.MaxMaxUnit))
	case t.Peak != 0 && t.Peak < t.Rate:
		return out, fmt.Errorf("tspec p = %d B/s: below r = %d B/s; p ≥ r, or 0 for no peak limit", t.Peak, t.Rate)
	case out.MinUnit > out.MaxPacket:
		return out, fmt.Errorf("tspec m = %d: above M = %d", out.MinUnit, out.MaxPacket)
	}
	return out, out.Validate()
}

// rsvpFlowspec checks a reserve request and converts it.
func rsvpFlowspec(req api.RSVPReserveRequest) (rsvp.Flowspec, rsvp.Style, error) {
	t, err := rsvpTspec(req.Flowspec)
	if err != nil {
		return rsvp.Flowspec{}, 0, fmt.Errorf("flowspec: %w", err)
	}
	fs := rsvp.Flowspec{Tspec: t}
	switch policy.Service(req.Service) {
	case policy.ServiceGuaranteed:
		fs.Service = rsvp.ServiceGuaranteed
		fs.RspecRate, fs.RspecSlack = float32(req.Flowspec.ServiceRate), uint32(max(req.Flowspec.Slack, 0))
		if req.Flowspec.ServiceRate == 0 {
			fs.RspecRate = t.Rate
		}
		if req.Flowspec.Slack < 0 {
			return fs, 0, fmt.Errorf("flowspec S = %d: want microseconds ≥ 0", req.Flowspec.Slack)
		}
		if fs.RspecRate < t.Rate {
			return fs, 0, fmt.Errorf("flowspec R = %d B/s: below r = %d B/s; guaranteed service needs R ≥ r", req.Flowspec.ServiceRate, req.Flowspec.Rate)
		}
	case policy.ServiceControlledLoad:
		fs.Service = rsvp.ServiceCL
		if req.Flowspec.ServiceRate != 0 || req.Flowspec.Slack != 0 {
			return fs, 0, fmt.Errorf("flowspec R/S: only guaranteed service has an Rspec")
		}
	default:
		return fs, 0, fmt.Errorf("field service = %q: want guaranteed or controlled-load", policy.Clip(req.Service))
	}
	style := rsvp.StyleFF
	switch req.Style {
	case "", "ff":
	case "se":
		style = rsvp.StyleSE
	default:
		return fs, 0, fmt.Errorf("field style = %q: want ff (fixed filter, one reservation per sender) or se (shared explicit)", policy.Clip(req.Style))
	}
	return fs, style, fs.Validate()
}

// rsvpSaved is a session as the state file keeps it.
type rsvpSaved struct {
	Name    string                  `json:"name"`
	Dest    string                  `json:"dest"`
	Proto   string                  `json:"proto"`
	Sender  *api.RSVPSenderRequest  `json:"sender,omitempty"`
	Reserve *api.RSVPReserveRequest `json:"reserve,omitempty"`
}

// saveLocked writes the API's sessions (caller holds f.mu).
func (f *Front) saveLocked() error {
	if f.opts.StatePath == "" {
		return nil
	}
	out := make([]rsvpSaved, 0, len(f.sessions))
	for _, s := range f.sessions {
		out = append(out, rsvpSaved{Name: s.name, Dest: netip.AddrPortFrom(s.key.Dest, s.key.Port).String(), Proto: protoName(s.key.Proto),
			Sender: s.sender, Reserve: s.reserve})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	b, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return fmt.Errorf("encode rsvp sessions: %w", err)
	}
	return atomicfile.Write(f.opts.StatePath, append(b, '\n'))
}

// Restore brings back the sessions of the state file after a restart: a
// sender announces its Path again at once, a reservation is asked again
// as soon as its senders' Paths arrive (soft state: peers that kept the
// state within its lifetime see no gap). Call it after SetSend.
func (f *Front) Restore() error {
	if f.opts.StatePath == "" {
		return nil
	}
	b, err := os.ReadFile(f.opts.StatePath)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read rsvp sessions: %w", err)
	}
	var saved []rsvpSaved
	if err := json.Unmarshal(b, &saved); err != nil {
		return fmt.Errorf("read rsvp sessions %s: %w", f.opts.StatePath, err)
	}
	// One write at the end, not one per session: a crash while restoring
	// keeps the file whole.
	f.mu.Lock()
	path := f.opts.StatePath
	f.opts.StatePath = ""
	f.mu.Unlock()
	var errs []error
	for _, s := range saved {
		if _, err := f.AddSession(rsvpCaller, api.RSVPSessionRequest{Name: s.Name, Dest: s.Dest, Proto: s.Proto}); err != nil {
			errs = append(errs, err)
			continue
		}
		if s.Sender != nil {
			if _, err := f.Sender(rsvpCaller, s.Name, *s.Sender); err != nil {
				errs = append(errs, err)
			}
		}
		if s.Reserve != nil {
			if _, err := f.Reserve(rsvpCaller, s.Name, *s.Reserve); err != nil {
				errs = append(errs, err)
			}
		}
	}
	f.mu.Lock()
	f.opts.StatePath = path
	if err := f.saveLocked(); err != nil {
		errs = append(errs, err)
	}
	f.mu.Unlock()
	if len(errs) > 0 {
		return fmt.Errorf("restore rsvp sessions: %w", errors.Join(errs...))
	}
	return nil
}
