package engine

import (
	"cmp"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/policy"
	"github.com/hostqos/hostqos/internal/store"
	"github.com/hostqos/hostqos/rtchan"
)

// Real-time channels admitted host-wide (docs/rtchan.md
// "Host-wide admission"). A process using the rtchan library asks the
// daemon before it establishes a channel; the engine runs rtchan's D_order
// test (Params.Admit, the library's own arithmetic) over every channel on
// the link, of every process, so that two processes cannot together
// over-commit it. A channel belongs to the process that asked (held by a
// pidfd in the front door) and is released when that process exits or
// closes it.

// Defaults of the limits on channels (per ordinary user, and of everyone).
const (
	DefaultMaxRTChannelsPerUser = 16
	DefaultMaxRTChannels        = 256
)

// DefaultMaxUserRTUtilization bounds the share of a link's real-time
// utilization (Σ T_s/I_min of its channels, the D_order test's) that one
// ordinary user's channels may take together (hostqosd
// --max-user-rt-utilization): without it one user could take the whole
// link and every later channel, root's included, would be refused.
const DefaultMaxUserRTUtilization = 0.5

// CheckRTUtilization checks a value of --max-user-rt-utilization.
func CheckRTUtilization(u float64) error {
	if !(u > 0 && u <= 1) {
		return fmt.Errorf("flag --max-user-rt-utilization = %g: want a share of a link's real-time utilization above 0 and at most 1, e.g. %g", u, DefaultMaxUserRTUtilization)
	}
	return nil
}

// Bounds of a channel request's fields: a real-time channel carries
// messages of at most a megabyte at least once a minute within ten
// seconds; beyond that it is not real-time traffic.
const (
	maxRTMessage = 1 << 20 // bytes
	maxRTBurst   = 1024    // messages
	minRTPeriod  = time.Microsecond
	maxRTPeriod  = time.Minute
	minRTDelay   = time.Microsecond
	maxRTDelay   = 10 * time.Second
	maxRTName    = 64
)

// Events of channels.
const (
	EventRTAdmitted = "rtchannel.admitted"
	EventRTRefused  = "rtchannel.refused"
	EventRTReleased = "rtchannel.released"
)

// RTOwner is the process that owns a channel, held so that it cannot be
// swapped (the daemon's is a pidfd): Alive reports whether it still runs.
type RTOwner interface {
	PID() int
	Start() uint64 // start time, clock ticks after boot (/proc/PID/stat)
	Exe() string
	Alive() bool
	Close()
}

type rtChannel struct {
	ch    api.RTChannel
	spec  rtchan.Spec
	owner RTOwner
}

// rtRegistry holds the admitted channels. Its own lock serialises
// admission; it is never held while talking to a client.
type rtRegistry struct {
	mu    sync.Mutex
	next  uint64
	chans map[uint64]*rtChannel
}

// rtReg returns the registry, locked; the caller unlocks r.mu.
func (e *Engine) rtReg() *rtRegistry {
	r := &e.rt
	r.mu.Lock()
	if r.chans == nil {
		r.chans = map[uint64]*rtChannel{}
	}
	return r
}

func rtField(field, value, reason, fix string) *policy.FieldError {
	return &policy.FieldError{Source: "api", Object: "rtchannel", Field: field, Value: policy.Clip(value), Reason: reason, Fix: fix}
}

// ValidateRTChannel checks a request's fields by themselves.
func ValidateRTChannel(req api.RTChannelRequest) error {
	var errs policy.Errors
	if len(req.Name) > maxRTName {
		errs = append(errs, rtField("name", req.Name, fmt.Sprintf("longer than %d bytes", maxRTName), "give a shorter name"))
	}
	if req.Link == "" {
		errs = append(errs, rtField("link", req.Link, "no link given", "name a managed link (hostqos link list)"))
	}
	if req.Destination != "" {
		if ap, err := netip.ParseAddrPort(req.Destination); err != nil || ap.Port() == 0 || !ap.Addr().IsValid() || ap.Addr().IsUnspecified() {
			errs = append(errs, rtField("destination", req.Destination, "not a receiver's address and port", "give ip:port, e.g. 198.18.0.2:7000 or [2001:db8::2]:7000, or leave it out"))
		}
	}
	if req.MessageBytes <= 0 || req.MessageBytes > maxRTMessage {
		errs = append(errs, rtField("message_bytes", strconv.Itoa(req.MessageBytes), "a message is 1 byte … 1 MiB", "give the largest message the channel sends"))
	}
	if req.Period < minRTPeriod || req.Period > maxRTPeriod {
		errs = append(errs, rtField("period_ns", strconv.FormatInt(int64(req.Period), 10), fmt.Sprintf("a period is %v … %gs", minRTPeriod, maxRTPeriod.Seconds()),
			"give the least time between messages, e.g. 10000000 (10ms) for 100 messages/s"))
	}
	if req.Burst <= 0 || req.Burst > maxRTBurst {
		errs = append(errs, rtField("burst", strconv.Itoa(req.Burst), fmt.Sprintf("a burst is 1 … %d messages", maxRTBurst), "give the most messages sent back to back, e.g. 1"))
	}
	if req.Delay < minRTDelay || req.Delay > maxRTDelay {
		errs = append(errs, rtField("delay_ns", strconv.FormatInt(int64(req.Delay), 10), fmt.Sprintf("a delay bound is %v … %gs", minRTDelay, maxRTDelay.Seconds()),
			"give the end-to-end delay bound, e.g. 20000000 (20ms)"))
	}
	if len(errs) > 0 {
		return errs
	}
	return nil
}

// rtParams is the admission model of a managed link: rtchan's UDP
// parameters at the link's egress rate.
func (e *Engine) rtParams(link string) (rtchan.Params, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, l := range e.eff.Policy.Links {
		if l.Name != link {
			continue
		}
		if l.EgressRate == 0 {
			return rtchan.Params{}, rtField("link", link, "the link has no egress_rate: nothing to admit against", "set one: hostqos link set "+link+" --egress-rate 100mbit")
		}
		return rtchan.UDPParams(int64(l.EgressFloor())), nil
	}
	return rtchan.Params{}, rtField("link", link, "not a managed link", "manage it first: hostqos link set "+link+" --egress-rate RATE")
}

// rtClassOpen refuses who a channel when they could not bind its socket
// to the class its datagrams leave in (rtchan.DaemonClass): the rule of
// qsockets (mayUseClass).
func (e *Engine) rtClassOpen(who Caller) error {
	if who.Privileged {
		return nil
	}
	e.mu.Lock()
	cl, ok := e.eff.Policy.Class(rtchan.DaemonClass)
	e.mu.Unlock()
	if ok && mayUseClass(who, cl) {
		return nil
	}
	why := fmt.Sprintf("is not open to ordinary users (user_allowed is false); ask the admin to open it (hostqos class set %s --user-allowed true)", rtchan.DaemonClass)
	if !ok {
		why = "does not exist; ask the admin to add it"
	}
	return &ForbiddenError{Why: fmt.Sprintf("a real-time channel's datagrams leave in class %s, which %s", rtchan.DaemonClass, why)}
}

// rtUtil is a channel's share of its link's real-time utilization,
// T_s/I_min as the D_order test counts it.
func rtUtil(p rtchan.Params, s rtchan.Spec) float64 {
	return float64(p.Service(s.Mmax).Ts) / float64(s.MinInterval())
}

func (e *Engine) maxUserRTUtil() float64 {
	if e.cfg.MaxUserRTUtilization > 0 {
		return e.cfg.MaxUserRTUtilization
	}
	return DefaultMaxUserRTUtilization
}

// admitUserRTLocked bounds an ordinary user's share of the link's
// real-time utilization: their channels on it (in r) and spec together
// may take at most MaxUserRTUtilization.
func (r *rtRegistry) admitUserRTLocked(e *Engine, who Caller, p rtchan.Params, link string, spec rtchan.Spec) error {
	if who.Privileged {
		return nil
	}
	mine := rtUtil(p, spec)
	for _, c := range r.chans {
		if c.ch.UID == who.UID && c.ch.Link == link {
			mine += rtUtil(p, c.spec)
		}
	}
	if limit := e.maxUserRTUtil(); mine > limit {
		return &TooManyError{Admission: true, Why: fmt.Sprintf("refuse real-time channel on link %s: uid %d's channels on it would take %.4f of its real-time utilization together (this one %.4f), over the %g an ordinary user may (hostqosd --max-user-rt-utilization); ask for a longer period or smaller messages, close one of your channels, or ask the admin to raise --max-user-rt-utilization",
			link, who.UID, mine, rtUtil(p, spec), limit)}
	}
	return nil
}

// rtHoldOf is channel id's share of its link: its wire rate, a burst of
// Bmax messages as HTB counts them (every packet with its IPv4/UDP, rtchan
// and Ethernet headers) and its local delay bound.
func rtHoldOf(p rtchan.Params, id uint64, name string, pid uint32, spec rtchan.Spec) rtHold {
	const ether = 14
	msg := int64(spec.Mmax) + int64(p.Packets(spec.Mmax))*int64(p.HeaderBytes+ether)
	return rtHold{id: id, name: name, pid: pid, rate: policy.Rate(p.WireRate(spec)),
		burst: uint32(min(int64(spec.Bmax)*msg, 1<<30)), bound: p.Requested(spec)}
}

func rtSpec(id uint64, req api.RTChannelRequest) rtchan.Spec {
	return rtchan.Spec{Name: "#" + strconv.FormatUint(id, 10), Mmax: req.MessageBytes, Imin: req.Period, Bmax: req.Burst, Delay: req.Delay}
}

// rtRefusal is an admission refusal: it names the channel whose bound
// fails (the new one or an established one, with its owner).
func (r *rtRegistry) rtRefusal(ae *rtchan.AdmissionError, req api.RTChannelRequest) error {
	failing := "the new channel"
	if ae.Failing != ae.Channel {
		id, _ := strconv.ParseUint(ae.Failing[1:], 10, 64)
		if c, ok := r.chans[id]; ok {
			failing = fmt.Sprintf("established channel %d %q of pid %d (%s)", id, c.ch.Name, c.ch.PID, c.ch.Exe)
		}
	}
	if ae.Reason == "utilization" {
		return &TooManyError{Admission: true, Why: fmt.Sprintf("refuse real-time channel on link %s: the link's utilization would reach %.4f at the priority of %s, so its delay bound %v cannot be met; ask for a longer period, smaller messages or a longer delay, or wait for a channel to close (hostqos rtchan list)",
			req.Link, ae.Util, failing, ae.Bound)}
	}
	return &TooManyError{Admission: true, Why: fmt.Sprintf("refuse real-time channel on link %s: %s would have a worst-case response time of %v, beyond its delay bound %v by %v; ask for a longer delay, a longer period or smaller messages, or wait for a channel to close (hostqos rtchan list)",
		req.Link, failing, ae.Response, ae.Bound, ae.Response-ae.Bound)}
}

// AdmitRTChannel admits a channel owned by owner (the caller's process)
// after the D_order test over every channel on the link. Any local user
// may ask, for their own process only, when the class the channel's
// datagrams leave in is open to them, at most MaxRTChannelsPerUser at
// once, together at most MaxUserRTUtilization of the link; root and group
// hostqos are bounded only by MaxRTChannels. A refusal names the failing
// bound and changes nothing. On success the engine keeps owner (and
// closes it on release); on error the caller does.
func (e *Engine) AdmitRTChannel(who Caller, req api.RTChannelRequest, owner RTOwner) (api.RTChannel, error) {
	if err := ValidateRTChannel(req); err != nil {
		return api.RTChannel{}, err
	}
	if err := e.rtClassOpen(who); err != nil {
		return api.RTChannel{}, err
	}
	if owner == nil || !owner.Alive() {
		return api.RTChannel{}, &BadRequestError{Err: errors.New("the process asking for the channel has exited")}
	}
	p, err := e.rtParams(req.Link)
	if err != nil {
		return api.RTChannel{}, err
	}
	r := e.rtReg()
	defer r.mu.Unlock()
	r.sweepLocked(e)
	mine := 0
	for _, c := range r.chans {
		if c.ch.UID == who.UID {
			mine++
		}
	}
	if !who.Privileged && mine >= e.maxRTPerUser() {
		return api.RTChannel{}, &TooManyError{Why: fmt.Sprintf("you have %d real-time channels, the most one user may have (hostqosd --max-rtchannels-per-user %d); close one first", mine, e.maxRTPerUser())}
	}
	if len(r.chans) >= DefaultMaxRTChannels {
		return api.RTChannel{}, &TooManyError{Why: fmt.Sprintf("the host has %d real-time channels, the most hostqosd keeps; try again when one closes", len(r.chans))}
	}
	id := r.next + 1
	var est []rtchan.Spec
	for _, c := range r.sortedLocked() {
		if c.ch.Link == req.Link {
			est = append(est, c.spec)
		}
	}
	spec := rtSpec(id, req)
	if err := r.admitUserRTLocked(e, who, p, req.Link, spec); err != nil {
		uid := who.UID
		e.Publish(api.Event{Kind: EventRTRefused, Subject: "rtchannel/" + req.Link, UID: &uid, Message: err.Error()})
		return api.RTChannel{}, err
	}
	if _, err := p.Admit(est, spec); err != nil {
		var ae *rtchan.AdmissionError
		if errors.As(err, &ae) {
			err = r.rtRefusal(ae, req)
			uid := who.UID
			e.Publish(api.Event{Kind: EventRTRefused, Subject: "rtchannel/" + req.Link, UID: &uid, Message: err.Error()})
		}
		return api.RTChannel{}, err
	}
	name := req.Name
	if name == "" {
		name = "rt" + strconv.FormatUint(id, 10)
	}
	// The link's one budget: the channel's wire rate beside every other
	// guarantee on it; admitted, it is the rate of the link's real-time
	// leaf.
	hold := rtHoldOf(p, id, name, uint32(owner.PID()), spec)
	e.mu.Lock()
	err = e.admitRTBudgetLocked(req.Link, policy.Contribution{Kind: "rtchannel", Name: strconv.Quote(name), Rate: hold.rate})
	if err == nil {
		err = e.setRTHeldLocked(withHold(e.rtHeld, req.Link, hold))
	}
	e.mu.Unlock()
	if err != nil {
		uid := who.UID
		e.Publish(api.Event{Kind: EventRTRefused, Subject: "rtchannel/" + req.Link, UID: &uid, Message: err.Error()})
		return api.RTChannel{}, err
	}
	r.next = id
	c := &rtChannel{spec: spec, owner: owner, ch: api.RTChannel{ID: id, Name: name, Link: req.Link, Destination: req.Destination, PID: owner.PID(), UID: who.UID, Exe: owner.Exe(),
		MessageBytes: req.MessageBytes, Period: req.Period, Burst: req.Burst, Delay: req.Delay, Since: time.Now()}}
	r.chans[id] = c
	r.saveLocked(e)
	out := r.listLocked(e, id)
	uid := who.UID
	e.Publish(api.Event{Kind: EventRTAdmitted, Subject: fmt.Sprintf("rtchannel/%d", id), UID: &uid,
		Message: fmt.Sprintf("real-time channel %d (%s) of pid %d admitted on %s: %d B every %v, delay bound %v, worst-case response %v", id, name, c.ch.PID, req.Link, req.MessageBytes, req.Period, out[0].Bound, out[0].Response)})
	return out[0], nil
}

func (e *Engine) maxRTPerUser() int {
	if e.cfg.MaxRTChannelsPerUser > 0 {
		return e.cfg.MaxRTChannelsPerUser
	}
	return DefaultMaxRTChannelsPerUser
}

func (r *rtRegistry) sortedLocked() []*rtChannel {
	out := make([]*rtChannel, 0, len(r.chans))
	for _, c := range r.chans {
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b *rtChannel) int { return int(a.ch.ID) - int(b.ch.ID) })
	return out
}

// listLocked returns the channels (only id when id is not 0) with their
// bound figures, computed again for each link's current set.
func (r *rtRegistry) listLocked(e *Engine, id uint64) []api.RTChannel {
	byLink := map[string][]*rtChannel{}
	all := r.sortedLocked()
	for _, c := range all {
		byLink[c.ch.Link] = append(byLink[c.ch.Link], c)
	}
	for link, cs := range byLink {
		p, err := e.rtParams(link)
		if err != nil {
			continue // the link is gone; its channels are shown without figures
		}
		specs := make([]rtchan.Spec, len(cs))
		for i, c := range cs {
			specs[i] = c.spec
		}
		res, _ := p.Analyze(specs)
		for i, b := range res {
			cs[i].ch.Priority, cs[i].ch.Ts, cs[i].ch.Tw, cs[i].ch.Bound, cs[i].ch.Response = b.Priority, b.Ts, b.Tw, b.Bound, b.Response
		}
	}
	var out []api.RTChannel
	for _, c := range all {
		if id == 0 || c.ch.ID == id {
			out = append(out, c.ch)
		}
	}
	return out
}

// rtVisible: an ordinary user sees their own channels; root and group
// hostqos every one.
func rtVisible(who Caller, c api.RTChannel) bool { return who.Privileged || c.UID == who.UID }

// RTChannels lists the admitted channels the caller may see (id 0: all).
func (e *Engine) RTChannels(who Caller, id uint64) ([]api.RTChannel, error) {
	r := e.rtReg()
	defer r.mu.Unlock()
	r.sweepLocked(e)
	out := []api.RTChannel{}
	for _, c := range r.listLocked(e, id) {
		if rtVisible(who, c) {
			out = append(out, c)
		}
	}
	if id != 0 && len(out) == 0 {
		return nil, &NotFoundError{What: "real-time channel", Name: strconv.FormatUint(id, 10)}
	}
	return out, nil
}

// CloseRTChannel releases a channel: its owner's user, root and group
// hostqos may.
func (e *Engine) CloseRTChannel(who Caller, id uint64) error {
	r := e.rtReg()
	defer r.mu.Unlock()
	c, ok := r.chans[id]
	if !ok || !rtVisible(who, c.ch) {
		return &NotFoundError{What: "real-time channel", Name: strconv.FormatUint(id, 10)}
	}
	r.releaseLocked(e, c, "closed")
	return nil
}

// SweepRTChannels releases the channels whose owner has exited; the
// daemon calls it periodically, and every admission and listing does.
func (e *Engine) SweepRTChannels() {
	r := e.rtReg()
	defer r.mu.Unlock()
	r.sweepLocked(e)
}

func (r *rtRegistry) sweepLocked(e *Engine) {
	for _, c := range r.sortedLocked() {
		if !c.owner.Alive() {
			r.releaseLocked(e, c, "its process exited")
		}
	}
}

func (r *rtRegistry) releaseLocked(e *Engine, c *rtChannel, why string) {
	delete(r.chans, c.ch.ID)
	c.owner.Close()
	e.mu.Lock()
	if err := e.setRTHeldLocked(withoutHold(e.rtHeld, c.ch.ID)); err != nil {
		e.log.Warn("shrink the real-time leaf of a released channel; the next change does", "link", c.ch.Link, "err", err)
		e.rtHeld = withoutHold(e.rtHeld, c.ch.ID)
		e.rtOwnerIDs = rtOwnerIDs(e.rtOwnerIDs, e.rtHeld)
	}
	e.mu.Unlock()
	r.saveLocked(e)
	uid := c.ch.UID
	e.Publish(api.Event{Kind: EventRTReleased, Subject: fmt.Sprintf("rtchannel/%d", c.ch.ID), UID: &uid,
		Message: fmt.Sprintf("real-time channel %d (%s) of pid %d on %s released: %s", c.ch.ID, c.ch.Name, c.ch.PID, c.ch.Link, why)})
	e.log.Info("real-time channel released", "channel", c.ch.ID, "pid", c.ch.PID, "link", c.ch.Link, "why", why)
}

// Channels are a section of the runtime state file (they belong to
// running processes: they survive a daemon crash or restart, not a
// reboot). A restarted daemon takes each owner again with
// RestoreRTChannels, which drops those whose process has gone (or whose
// PID is now another's: the owner's start time is kept with it).

// saveLocked writes the channels; a failure is logged (the channels stay
// admitted: losing them on a crash is the lesser harm than refusing). The
// registry's lock is taken before the engine's (rtParams), so taking the
// engine's here keeps that order.
func (r *rtRegistry) saveLocked(e *Engine) {
	saved := make(map[uint64]*store.RTChannel, len(r.chans))
	for id, c := range r.chans {
		saved[id] = &store.RTChannel{Channel: c.ch, Start: c.owner.Start()}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	st := e.stTemp.Holds()
	st.RT = saved
	if _, err := e.stTemp.Write(st); err != nil {
		e.log.Warn("save real-time channels", "err", err)
	}
}

// RestoreRTChannels takes the saved channels again: open returns the owner
// of pid if it is the process that started at start, or an error when it
// has gone. Channels whose owner is gone are released.
func (e *Engine) RestoreRTChannels(open func(pid int, start uint64) (RTOwner, error)) error {
	r := e.rtReg()
	defer r.mu.Unlock()
	saved := make([]*store.RTChannel, 0, len(e.rtSaved))
	for _, s := range e.rtSaved {
		saved = append(saved, s)
	}
	slices.SortFunc(saved, func(a, b *store.RTChannel) int { return cmp.Compare(a.Channel.ID, b.Channel.ID) })
	e.rtSaved = nil
	for _, s := range saved {
		r.next = max(r.next, s.Channel.ID) // ids of released ones are not given again
		if len(r.chans) >= DefaultMaxRTChannels {
			break
		}
		o, err := open(s.Channel.PID, s.Start)
		if err != nil {
			e.log.Info("real-time channel released", "channel", s.Channel.ID, "pid", s.Channel.PID, "why", err.Error())
			continue
		}
		req := api.RTChannelRequest{MessageBytes: s.Channel.MessageBytes, Period: s.Channel.Period, Burst: s.Channel.Burst, Delay: s.Channel.Delay}
		r.chans[s.Channel.ID] = &rtChannel{ch: s.Channel, spec: rtSpec(s.Channel.ID, req), owner: o}
	}
	// Their shares of the links' budgets, and the real-time leaves.
	var held map[string][]rtHold
	for _, c := range r.sortedLocked() {
		p, err := e.rtParams(c.ch.Link)
		if err != nil {
			continue // the link is gone: nothing to hold there
		}
		held = withHold(held, c.ch.Link, rtHoldOf(p, c.ch.ID, c.ch.Name, uint32(c.ch.PID), c.spec))
	}
	e.mu.Lock()
	err := e.setRTHeldLocked(held)
	e.mu.Unlock()
	r.saveLocked(e)
	return err
}
