package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/datapath"
	"github.com/hostqos/hostqos/internal/policy"
	"github.com/hostqos/hostqos/internal/shaper"
	"github.com/hostqos/hostqos/internal/units"
	"github.com/hostqos/hostqos/rtchan"
)

// qsockets: sockets applications register through the app API
// (libhostqos, package qsock, the Python module; docs/qsockets.md). The
// front door hands the engine a descriptor of the socket itself (passed
// with SCM_RIGHTS); the engine checks who may do what with it and the
// kernel tags it. What a qsocket is lives in the datapath's pinned table
// (hq_qsock: cookie, owner, class, DSCP, scheduler, counters), so a
// restarted daemon knows every open qsocket without a state file, and a
// closed socket frees its entry in the kernel (sock_release).

// QSockKernel is what qsockets need of the kernel, beside Kernel
// (Host.QSockets).
type QSockKernel interface {
	InspectSocket(fd int) (datapath.SocketInfo, error)
	AttachQSock(fd int, id uint32, q datapath.QSock) error
	ChangeQSock(id uint32, q datapath.QSock) error
	DetachQSock(fd int, id uint32, cookie uint64) error
	ReadQSock(id uint32) (datapath.QSockCounters, error)
	QSocks() (map[uint32]datapath.QSock, error)
	SetQScheds(ls map[int]datapath.QSched) error
}

// Default limits of ordinary users' qsockets (hostqosd
// --max-qsocks-per-user, --max-user-qsocks).
const (
	DefaultMaxQSocksPerUser = 64
	DefaultMaxUserQSocks    = 1024
)

// Bounds of a qsocket's scheduler attributes.
const (
	maxQSockIPG = 60_000_000 // µs: one message a minute
	maxQSockOLD = 1000
)

// Events of qsockets.
const (
	EventQSockAttached = "qsocket.attached"
	EventQSockChanged  = "qsocket.changed"
	EventQSockDetached = "qsocket.detached"
)

// qsockMu serialises qsocket changes (the choice of a free id and the
// per-user counts); it is not the engine's policy lock.
var qsockMu sync.Mutex

func (e *Engine) qsockKernel() (QSockKernel, error) {
	e.mu.Lock()
	k, qk := e.k, e.qk
	e.mu.Unlock()
	if k == nil {
		return nil, errNotLoaded
	}
	if qk == nil {
		return nil, errors.New("this datapath has no qsocket support")
	}
	return qk, nil
}

func qsockField(field, value, reason, fix string) *policy.FieldError {
	return &policy.FieldError{Source: "api", Object: "qsocket", Field: field, Value: policy.Clip(value), Reason: reason, Fix: fix}
}

// schedNumber is the scheduler's number in the datapath's record (0 for
// an unknown name).
func schedNumber(name string) uint32 {
	if name == "" {
		name = api.SchedFIFO
	}
	return uint32(slices.Index(api.Schedulers, name) + 1)
}

func schedName(n uint32) string {
	if n == 0 || int(n) > len(api.Schedulers) {
		return api.SchedFIFO
	}
	return api.Schedulers[n-1]
}

// ValidateQSockParams checks a qsocket's parameters by themselves (not
// who may use them).
func ValidateQSockParams(p api.QSockParams) error {
	var errs policy.Errors
	if schedNumber(p.Scheduler) == 0 {
		errs = append(errs, qsockField("scheduler", p.Scheduler, "unknown scheduler", "use fifo, dwcs, edf-lossy or edf-lossless"))
	}
	if p.DSCP != nil && (*p.DSCP < 0 || *p.DSCP > 63) {
		errs = append(errs, qsockField("dscp", strconv.Itoa(*p.DSCP), "a DSCP is 0..63", "give a DSCP in 0..63, or leave it out for the class's"))
	}
	if p.Rate > units.MaxRate {
		errs = append(errs, qsockField("rate", strconv.FormatUint(p.Rate, 10), "above "+policy.MaxRate.String()+" (bit/s), the most a rate may be",
			"declare the rate the socket sends at, in bit/s, e.g. 1000000 for 1 Mbit/s"))
	}
	if p.Priority != nil && p.Class != "" {
		errs = append(errs, qsockField("priority", strconv.Itoa(*p.Priority), "both a class and a priority given", "give one of them"))
	}
	if p.Scheduler == api.SchedDWCS {
		switch {
		case p.IPGMicros == 0 || p.IPGMicros > maxQSockIPG:
			errs = append(errs, qsockField("ipg_us", strconv.FormatUint(uint64(p.IPGMicros), 10), "dwcs needs an inter-packet gap of 1 µs … 60 s", "set ipg to the stream's period, e.g. 50000 for 20 messages/s"))
		}
		if p.OLD == 0 || p.OLD > maxQSockOLD || p.OLN > p.OLD {
			errs = append(errs, qsockField("oln/old", fmt.Sprintf("%d/%d", p.OLN, p.OLD), "dwcs needs a loss tolerance oln/old with 1 ≤ old ≤ 1000 and oln ≤ old", "e.g. oln 1, old 10: at most one of ten consecutive messages lost"))
		}
	} else if p.IPGMicros != 0 || p.OLN != 0 || p.OLD != 0 {
		errs = append(errs, qsockField("scheduler", p.Scheduler, "ipg, oln and old are attributes of dwcs", "set scheduler dwcs, or leave them out"))
	}
	if len(errs) > 0 {
		return errs
	}
	return nil
}

// mayUseClass is the rule for the classes who may put sockets into: any
// for root and group hostqos, those the admin opened (user_allowed) for an
// ordinary user. Qsockets follow it, and so do real-time channels, whose
// datagrams leave by a socket bound to rtchan.DaemonClass.
func mayUseClass(who Caller, cl policy.Class) bool { return who.Privileged || cl.UserAllowed }

// qsockClass resolves the class (and mark) of params for who, with the
// classes of the effective policy.
func (e *Engine) qsockClass(who Caller, p api.QSockParams) (policy.Class, uint32, int8, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	pol := e.eff.Policy
	var cl policy.Class
	var ok bool
	switch {
	case p.Class != "":
		cl, ok = pol.Class(p.Class)
		if !ok {
			return cl, 0, 0, qsockField("class", p.Class, "no such class", "see hostqos class list")
		}
	case p.Priority != nil:
		for _, c := range pol.Classes {
			if c.Priority == *p.Priority && mayUseClass(who, c) {
				cl, ok = c, true
				break
			}
		}
		if !ok {
			return cl, 0, 0, qsockField("priority", strconv.Itoa(*p.Priority), "no class you may use has this priority", "name a class instead (hostqos class list)")
		}
	default:
		cl, _ = pol.Class(policy.DefaultClassName)
	}
	if !mayUseClass(who, cl) {
		return cl, 0, 0, &ForbiddenError{Why: fmt.Sprintf("class %q is not open to ordinary users (user_allowed is false); pick a class the admin allows (hostqos class list shows user_allowed), or ask the admin to allow it", cl.Name)}
	}
	if p.DSCP != nil && !who.Privileged {
		return cl, 0, 0, &ForbiddenError{Why: "choosing a DSCP needs root or group hostqos; name a class the admin allows instead"}
	}
	idx, ok := e.slots.Classes[cl.Name]
	if !ok {
		return cl, 0, 0, fmt.Errorf("resolve class %q: no index assigned", cl.Name)
	}
	dscp := int8(cl.DSCP)
	if p.DSCP != nil {
		dscp = int8(*p.DSCP)
	}
	return cl, shaper.ClassLeafID(idx), dscp, nil
}

// rtClassLocked is the HTB class of a qsocket asking for params p: a
// process with admitted real-time channels binds each channel's socket to
// their class (rtchan.DaemonClass) naming the channel (p.RTChannel), and
// its datagrams take the channel's own leaf under the link's real-time
// class, guaranteed the rate the channel was admitted with, with the
// class's mark. A socket in that class naming no channel takes the leaf
// of its process's first channel; classid otherwise. Naming a channel the
// caller's process does not hold is refused.
func (e *Engine) rtClassLocked(who Caller, p api.QSockParams, classid uint32) (uint32, error) {
	if p.RTChannel != 0 {
		if p.Class != rtchan.DaemonClass {
			return 0, qsockField("class", p.Class, "a real-time channel's socket leaves in the channels' class",
				fmt.Sprintf("ask for class %s with rt_channel, or leave rt_channel out", rtchan.DaemonClass))
		}
		leaf, ok := e.rtLeafLocked(uint32(max(who.PID, 0)), p.RTChannel)
		if !ok {
			return 0, qsockField("rt_channel", strconv.FormatUint(p.RTChannel, 10), "no real-time channel of that id belongs to the calling process",
				"name a channel this process was admitted (hostqos rtchan list), or leave rt_channel out")
		}
		return leaf, nil
	}
	if p.Class == rtchan.DaemonClass && who.PID > 0 {
		if leaf, ok := e.rtFirstLeafLocked(uint32(who.PID)); ok {
			return leaf, nil
		}
	}
	return classid, nil
}

// className is the class whose leaf is classid (its name, or "" when none
// is; the real-time leaf's class is the channels' class).
func (e *Engine) className(classid uint32) string {
	if m := uint16(classid & 0xffff); classid>>16 == shaper.RTClassID()>>16 && m >= shaper.RTMinor && m <= shaper.RTMinor+shaper.MaxRTOwners {
		return rtchan.DaemonClass
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for name, idx := range e.slots.Classes {
		if shaper.ClassLeafID(idx) == classid {
			return name
		}
	}
	return ""
}

// inspectQSock checks the socket behind fd may be used by who at all: an
// inet socket of the datapath's network namespace, created by who (or any
// socket for root and group hostqos).
func inspectQSock(qk QSockKernel, who Caller, fd int) (datapath.SocketInfo, error) {
	si, err := qk.InspectSocket(fd)
	if errors.Is(err, unix.ENOTSOCK) {
		return si, &BadRequestError{Err: errors.New("the descriptor passed with the request (SCM_RIGHTS) is not a socket; " +
			"pass the socket itself (the descriptor socket(2) or accept(2) returned), not an O_PATH descriptor of a socket file nor another kind of file")}
	}
	if err != nil {
		return si, err
	}
	if si.Family != unix.AF_INET && si.Family != unix.AF_INET6 {
		return si, &BadRequestError{Err: fmt.Errorf("the socket passed is not an IPv4 or IPv6 socket (domain %d); only those carry traffic hostqos classifies", si.Family)}
	}
	if !si.SameNetns {
		return si, &BadRequestError{Err: errors.New("the socket passed is in another network namespace than hostqosd; its traffic is not classified by this daemon")}
	}
	if !who.Privileged && si.Owner != who.UID {
		return si, &ForbiddenError{Why: fmt.Sprintf("the socket belongs to uid %d (who created it), not to you (uid %d): an ordinary user may attach only their own sockets", si.Owner, who.UID)}
	}
	return si, nil
}

// AttachQSock makes the socket behind fd (a descriptor the daemon holds
// for the request) a qsocket with params: its traffic takes the class
// and mark from its next packet. An ordinary user may attach only a socket
// they created, only into classes the admin allows, and at most
// MaxQSocksPerUser at once.
func (e *Engine) AttachQSock(ctx context.Context, who Caller, fd int, p api.QSockParams) (api.QSocket, error) {
	if err := ValidateQSockParams(p); err != nil {
		return api.QSocket{}, err
	}
	qk, err := e.qsockKernel()
	if err != nil {
		return api.QSocket{}, err
	}
	si, err := inspectQSock(qk, who, fd)
	if err != nil {
		return api.QSocket{}, err
	}
	cl, classid, dscp, err := e.qsockClass(who, p)
	if err != nil {
		return api.QSocket{}, err
	}
	qsockMu.Lock()
	defer qsockMu.Unlock()
	all, err := qk.QSocks()
	if err != nil {
		return api.QSocket{}, err
	}
	if q, ok := all[si.QSock]; ok && si.QSock != 0 && q.Cookie == si.Cookie {
		return api.QSocket{}, &ConflictError{What: "qsocket", Name: strconv.FormatUint(uint64(si.QSock), 10)}
	}
	if !who.Privileged {
		mine, users := 0, 0
		for _, q := range all {
			if q.User {
				users++
				if q.UID == who.UID {
					mine++
				}
			}
		}
		if mine >= e.maxQSocksPerUser() {
			return api.QSocket{}, &TooManyError{Why: fmt.Sprintf("uid %d has %d qsockets open (limit %d per user); close some, or the admin raises it with hostqosd --max-qsocks-per-user", who.UID, mine, e.maxQSocksPerUser())}
		}
		if users >= e.maxUserQSocks() {
			return api.QSocket{}, &TooManyError{Why: fmt.Sprintf("ordinary users have %d qsockets open (limit %d in all); try again later, or the admin raises it with hostqosd --max-user-qsocks", users, e.maxUserQSocks())}
		}
	}
	id := uint32(0)
	for i := uint32(1); int(i) < datapath.MaxQSocks; i++ {
		if _, used := all[i]; !used {
			id = i
			break
		}
	}
	if id == 0 {
		return api.QSocket{}, &TooManyError{Why: fmt.Sprintf("the datapath holds %d qsockets (its limit); close some", datapath.MaxQSocks-1)}
	}
	owner := si.Owner
	if !who.Privileged {
		owner = who.UID
	}
	dq := datapath.QSock{Cookie: si.Cookie, ClassID: classid, DSCP: dscp, User: !who.Privileged,
		UID: owner, Sched: schedNumber(p.Scheduler)}
	setQSchedParams(&dq, p)
	e.mu.Lock()
	defer e.mu.Unlock()
	if dq.ClassID, err = e.rtClassLocked(who, p, dq.ClassID); err != nil {
		return api.QSocket{}, err
	}
	if scheduled(dq) {
		if err := e.admitUserQSched(who, cl, all, 0, dq.Rate); err != nil {
			return api.QSocket{}, err
		}
		if err := e.admitQSchedLocked(all, 0, dq.Rate); err != nil {
			return api.QSocket{}, err
		}
	}
	if err := qk.AttachQSock(fd, id, dq); err != nil {
		return api.QSocket{}, fmt.Errorf("attach qsocket: %w", err)
	}
	if scheduled(dq) {
		if err := e.reshapeQSchedLocked(); err != nil {
			e.undoQSchedLocked(func() error { return qk.DetachQSock(fd, id, dq.Cookie) })
			return api.QSocket{}, fmt.Errorf("attach qsocket: set up the links' qsocket scheduler: %w", err)
		}
	}
	out := api.QSocket{ID: id, Cookie: si.Cookie, UID: owner, Class: cl.Name, DSCP: int(dscp), Scheduler: schedName(dq.Sched), Rate: dq.Rate}
	e.publishQSock(EventQSockAttached, who, out)
	return out, nil
}

// ownQSock finds the qsocket of the socket behind fd and checks who may
// act on it.
func (e *Engine) ownQSock(who Caller, fd int) (QSockKernel, uint32, datapath.QSock, error) {
	qk, err := e.qsockKernel()
	if err != nil {
		return nil, 0, datapath.QSock{}, err
	}
	si, err := inspectQSock(qk, who, fd)
	if err != nil {
		return nil, 0, datapath.QSock{}, err
	}
	all, err := qk.QSocks()
	if err != nil {
		return nil, 0, datapath.QSock{}, err
	}
	q, ok := all[si.QSock]
	if si.QSock == 0 || !ok || q.Cookie != si.Cookie {
		return nil, 0, datapath.QSock{}, &NotFoundError{What: "qsocket", Name: fmt.Sprintf("socket %d", si.Cookie)}
	}
	if !who.Privileged && q.UID != who.UID {
		return nil, 0, datapath.QSock{}, &ForbiddenError{Why: fmt.Sprintf("qsocket %d belongs to uid %d, not to you (uid %d)", si.QSock, q.UID, who.UID)}
	}
	return qk, si.QSock, q, nil
}

// ChangeQSock gives the qsocket of the socket behind fd new params,
// effective at its next packet; its counters go on.
func (e *Engine) ChangeQSock(ctx context.Context, who Caller, fd int, p api.QSockParams) (api.QSocket, error) {
	if err := ValidateQSockParams(p); err != nil {
		return api.QSocket{}, err
	}
	cl, classid, dscp, err := e.qsockClass(who, p)
	if err != nil {
		return api.QSocket{}, err
	}
	qsockMu.Lock()
	defer qsockMu.Unlock()
	qk, id, q, err := e.ownQSock(who, fd)
	if err != nil {
		return api.QSocket{}, err
	}
	prev := q
	q.ClassID, q.DSCP, q.Sched = classid, dscp, schedNumber(p.Scheduler)
	q.User = q.User && !who.Privileged
	setQSchedParams(&q, p)
	e.mu.Lock()
	defer e.mu.Unlock()
	if q.ClassID, err = e.rtClassLocked(who, p, q.ClassID); err != nil {
		return api.QSocket{}, err
	}
	if scheduled(q) {
		all, err := qk.QSocks()
		if err != nil {
			return api.QSocket{}, err
		}
		if err := e.admitUserQSched(who, cl, all, id, q.Rate); err != nil {
			return api.QSocket{}, err
		}
		if err := e.admitQSchedLocked(all, id, q.Rate); err != nil {
			return api.QSocket{}, err
		}
	}
	if err := qk.ChangeQSock(id, q); err != nil {
		return api.QSocket{}, fmt.Errorf("change qsocket %d: %w", id, err)
	}
	if scheduled(q) != scheduled(prev) || q.Rate != prev.Rate {
		if err := e.reshapeQSchedLocked(); err != nil {
			e.undoQSchedLocked(func() error { return qk.ChangeQSock(id, prev) })
			return api.QSocket{}, fmt.Errorf("change qsocket %d: set up the links' qsocket scheduler: %w", id, err)
		}
	}
	out := api.QSocket{ID: id, Cookie: q.Cookie, UID: q.UID, Class: cl.Name, DSCP: int(dscp), Scheduler: schedName(q.Sched), Rate: q.Rate}
	e.publishQSock(EventQSockChanged, who, out)
	return out, nil
}

// QSockInfo reads the feedback of the qsocket of the socket behind fd.
func (e *Engine) QSockInfo(who Caller, fd int) (api.QSockInfo, error) {
	qk, id, q, err := e.ownQSock(who, fd)
	if err != nil {
		return api.QSockInfo{}, err
	}
	c, err := qk.ReadQSock(id)
	if err != nil {
		return api.QSockInfo{}, err
	}
	return api.QSockInfo{
		QSocket: e.toAPIQSock(id, q),
		Open:    c.Open && c.Cookie == q.Cookie,
		Packets: c.Packets, Bytes: c.Bytes, Rate: c.Rate * 8,
		Late: c.Late, LateDropped: c.LateDropped, FrameDropped: c.FrameDropped,
		DroppedBytes: c.DroppedBytes, Violations: c.Violations,
	}, nil
}

// DetachQSock makes the socket behind fd an ordinary socket again: its
// flows are classified by the rules from their next packet.
func (e *Engine) DetachQSock(ctx context.Context, who Caller, fd int) error {
	qsockMu.Lock()
	defer qsockMu.Unlock()
	qk, id, q, err := e.ownQSock(who, fd)
	if err != nil {
		return err
	}
	if err := qk.DetachQSock(fd, id, q.Cookie); err != nil {
		return fmt.Errorf("detach qsocket %d: %w", id, err)
	}
	if scheduled(q) {
		e.mu.Lock()
		if err := e.reshapeQSchedLocked(); err != nil {
			e.log.Warn("shrink the links' qsocket scheduler", "err", err)
		}
		e.mu.Unlock()
	}
	e.publishQSock(EventQSockDetached, who, e.toAPIQSock(id, q))
	return nil
}

// QSocks lists the open qsockets who may see: their own; all for root and
// group hostqos.
func (e *Engine) QSocks(who Caller) ([]api.QSocket, error) {
	qk, err := e.qsockKernel()
	if err != nil {
		return nil, err
	}
	all, err := qk.QSocks()
	if err != nil {
		return nil, err
	}
	out := []api.QSocket{}
	for id, q := range all {
		if who.Privileged || q.UID == who.UID {
			out = append(out, e.toAPIQSock(id, q))
		}
	}
	slices.SortFunc(out, func(a, b api.QSocket) int { return int(a.ID) - int(b.ID) })
	return out, nil
}

// InitQSockLink prepares a link for qsockets (qsockinit): the link is
// managed (classifier, HTB root at rate); a link already managed is left
// as it is. Root and group hostqos only.
func (e *Engine) InitQSockLink(ctx context.Context, who Caller, req api.QSockInit) error {
	if !who.Privileged {
		return &ForbiddenError{Why: "qsockinit prepares a link for every qsocket on the host and needs root or membership of group hostqos; ask the admin to manage the link (hostqos link set)"}
	}
	if req.Link == "" {
		return qsockField("link", "", "qsockinit names the link to prepare", "give the interface, e.g. eth0")
	}
	e.mu.Lock()
	for _, l := range e.eff.Policy.Links {
		if l.Name == req.Link {
			e.mu.Unlock()
			return nil
		}
	}
	e.mu.Unlock()
	l := policy.Link{Name: req.Link}
	if req.EgressRate != "" {
		r, err := policy.ParseRate(req.EgressRate)
		if err != nil {
			return qsockField("egress_rate", req.EgressRate, err.Error(), "a rate such as 100mbit")
		}
		l.EgressRate = policy.LinkRate(r)
	}
	return e.SetLink(ctx, who, req.Link, l, LinkChange{})
}

func (e *Engine) toAPIQSock(id uint32, q datapath.QSock) api.QSocket {
	out := api.QSocket{ID: id, Cookie: q.Cookie, UID: q.UID, Class: e.className(q.ClassID), DSCP: int(q.DSCP), Scheduler: schedName(q.Sched)}
	if scheduled(q) {
		out.Rate = q.Rate
	}
	return out
}

// setQSchedParams gives q the scheduling attributes of p: a scheduled
// qsocket's declared rate (DefaultQSchedRate when p has none) and DWCS's
// gap and loss tolerance.
func setQSchedParams(q *datapath.QSock, p api.QSockParams) {
	q.Rate, q.IPGNanos, q.OLN, q.OLD = 0, 0, 0, 0
	if !scheduled(*q) {
		return
	}
	q.Rate = p.Rate
	if q.Rate == 0 {
		q.Rate = DefaultQSchedRate
	}
	if q.Sched == datapath.SchedDWCS {
		q.IPGNanos = uint64(p.IPGMicros) * 1000
		q.OLN, q.OLD = uint16(p.OLN), uint16(p.OLD)
	}
}

func (e *Engine) publishQSock(kind string, who Caller, q api.QSocket) {
	ev := api.Event{Kind: kind, Subject: "qsocket/" + strconv.FormatUint(uint64(q.ID), 10),
		Message: fmt.Sprintf("qsocket %d of uid %d: class %s, scheduler %s", q.ID, q.UID, q.Class, q.Scheduler),
		Fields:  map[string]any{"class": q.Class, "dscp": q.DSCP, "scheduler": q.Scheduler, "cookie": q.Cookie}}
	if !who.Privileged {
		uid := q.UID
		ev.UID = &uid
	}
	e.Publish(ev)
}

func (e *Engine) maxQSocksPerUser() int {
	if e.cfg.MaxQSocksPerUser > 0 {
		return e.cfg.MaxQSocksPerUser
	}
	return DefaultMaxQSocksPerUser
}

func (e *Engine) maxUserQSocks() int {
	if e.cfg.MaxUserQSocks > 0 {
		return e.cfg.MaxUserQSocks
	}
	return DefaultMaxUserQSocks
}
