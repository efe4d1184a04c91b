package datapath

import (
	"fmt"
	"hash/fnv"
	"io"
	"maps"
	"math"
	"math/bits"
	"net/netip"
	"path/filepath"
	"slices"
	"sort"
	"sync/atomic"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/hostqos/hostqos/internal/datapath/pin"
)

// Service is a reservation's service (enum hq_service in
// bpf/include/hostqos.h).
type Service uint8

const (
	// ServiceNone counts and limits a rule's sessions (MaxSessions)
	// without a Tspec: nothing is policed.
	ServiceNone = Service(hostqosHqServiceHQ_SVC_NONE)
	// ServiceGuaranteed polices by the Tspec and leaves non-conformant
	// packets to the reservation's HTB leaf, which shapes them.
	ServiceGuaranteed = Service(hostqosHqServiceHQ_SVC_GUARANTEED)
	// ServiceControlledLoad sends non-conformant packets as best effort
	// (DemoteClassID, DemoteDSCP).
	ServiceControlledLoad = Service(hostqosHqServiceHQ_SVC_CONTROLLED_LOAD)
	// ServiceBestEffort counts conformance but changes nothing.
	ServiceBestEffort = Service(hostqosHqServiceHQ_SVC_BEST_EFFORT)
)

// ActReserve is the action of a rule that names a reservation; compile
// sets it for ActPass rules with a Reservation.
const ActReserve = Action(hostqosHqActionHQ_ACT_RESV)

// Limits of reservations: ids are 1..MaxReservations-1; at most
// MaxBindings sockets are bound at once.
const (
	MaxReservations = int(hostqosHqLimitsHQ_MAX_RESV)
	MaxBindings     = int(hostqosHqLimitsHQ_BIND_ENTRIES)
	refusalSlots    = int(hostqosHqLimitsHQ_REFUSALS)
	// MinReservationRate is the lowest token or peak rate the policer
	// takes (bytes/s, i.e. 1 kbit/s): below it a charge could overflow.
	MinReservationRate = 125
)

// Reservation is a reservation as the datapath enforces it. The rules that
// name it (Rule.Reservation) select its sessions: a socket whose connect()
// or unconnected sendmsg() the policy classifies under such a rule is bound
// to it then, before it sends; a socket opened earlier is bound by its
// first packet after the policy changed. Every packet of those rules is
// policed against the reservation's Tspec, shared by all its sockets and
// rules:
//
//	t_m = max(t − b/r, t_m) + max(L, m)/r
//	t_p = max(t − M/p, t_p) + max(L, m)/p
//
// with t_m = t_p = −∞ at setup (and whenever the Tspec changes); a packet
// conforms when L ≤ M and t ≥ max(t_m, t_p) before the update. L is the IP
// packet (no link-layer header), t the packet's time at the classifier in
// ns; charges are rounded up to the ns. Rates are in bytes/s and sizes in
// bytes, as in RFC 2210.
type Reservation struct {
	ID      uint16 // 1..MaxReservations-1, stable for the reservation's life
	Service Service
	// Tspec. Rate 0 means no policing (ServiceNone).
	Rate    uint64 // r, bytes/s
	Bucket  uint64 // b, bytes
	Peak    uint64 // p, bytes/s; 0 = no peak term
	MinUnit uint32 // m, bytes
	MaxUnit uint32 // M, bytes
	// ClassID and DSCP are given to conformant packets (all packets of a
	// guaranteed reservation); DemoteClassID and DemoteDSCP to the
	// non-conformant packets of a controlled-load one. 0 / -1 = leave.
	ClassID       uint32
	DSCP          int8
	DemoteClassID uint32
	DemoteDSCP    int8
	// MaxSessions is the number of sockets bound at once (0 = any): the
	// next connect() fails with EPERM, as does an unconnected sendmsg()
	// of a socket that holds no session.
	MaxSessions uint32
	// SendBuffer is the SO_SNDBUF value a socket gets when it connects
	// under the reservation (0 = leave); see SendBufferFor.
	SendBuffer uint32
	// SessionClassID (0 = none) gives each session its own HTB leaf: a
	// socket that takes one of the MaxSessions (at most SessionLeaves)
	// sessions also takes a free leaf i and its flows go to class
	// SessionClassID+i; traffic of the reservation's rules without a
	// session keeps its rule's class (Rule.ClassID).
	SessionClassID uint32
}

// SessionLeaves is the most sessions a reservation with per-session
// leaves (Reservation.SessionClassID) may admit at once.
const SessionLeaves = int(hostqosHqLimitsHQ_SESSION_LEAVES)

// ResvCounters are a reservation's cumulative counters and its current
// sessions, summed over its rules and sockets.
type ResvCounters struct {
	ConformantPackets    uint64 `json:"conformant_packets"`
	ConformantBytes      uint64 `json:"conformant_bytes"`
	NonConformantPackets uint64 `json:"nonconformant_packets"`
	NonConformantBytes   uint64 `json:"nonconformant_bytes"`
	DemotedBytes         uint64 `json:"demoted_bytes"`  // controlled load sent as best effort
	ShapedPackets        uint64 `json:"shaped_packets"` // guaranteed packets its leaf had to delay
	ShapedNS             uint64 `json:"shaped_ns"`      // sum of the delays the Tspec asked of them
	OversizePackets      uint64 `json:"oversize_packets"`
	Sessions             int64  `json:"sessions"` // sockets bound now
	SessionsTotal        uint64 `json:"sessions_total"`
	RefusedConnects      uint64 `json:"refused_connects"`
	RefusedSends         uint64 `json:"refused_sends"`
	// LockMisses: packets that found the policer's lock held too long
	// (HQ_RESV_WAIT attempts) and passed uncharged; 0 in practice.
	LockMisses uint64 `json:"lock_misses"`
}

// Binding is a socket bound to a reservation.
type Binding struct {
	Cookie      uint64 // socket cookie (SO_COOKIE)
	Reservation uint16
	PID         uint32 // creator's tgid
	UID         uint32
	Comm        string
	Exe         FileID
	Key         FlowKey // egress 5-tuple; the local part stays unset until the socket sends
	BoundNS     uint64  // CLOCK_MONOTONIC
	Counted     bool    // holds one of the reservation's sessions
	// Session is 1 + the per-session leaf the socket holds (0: none).
	Session int
	// SendBufferSet: the connect hook gave the socket the reservation's
	// SendBuffer. A socket bound otherwise (open before its reservation,
	// or at an unconnected sendmsg) has the send buffer it had.
	SendBufferSet bool
}

// RefusalKind says which call a session refusal failed.
type RefusalKind uint8

const (
	RefusedConnect = RefusalKind(hostqosHqRefuseHQ_REFUSE_CONNECT)
	RefusedSend    = RefusalKind(hostqosHqRefuseHQ_REFUSE_SENDMSG)
)

// Refusal is a session refused for being over its reservation's
// MaxSessions.
type Refusal struct {
	Seq         uint64 // 1, 2, ... in the order of the refusals
	NS          uint64 // CLOCK_MONOTONIC
	Kind        RefusalKind
	Reservation uint16
	Limit       uint32
	PID         uint32
	UID         uint32
	Comm        string
	Key         FlowKey // the address the call named; local part if bound
}

// resvCharge is the policer's cost of a byte at rate bytes/s, in 1/65536
// ns, rounded up.
func resvCharge(rate uint64) uint64 {
	hi, lo := bits.Mul64(1e9<<16, 1)
	q, r := bits.Div64(hi, lo, rate)
	if r != 0 {
		q++
	}
	return q
}

// Validate checks a reservation on its own; errors name the field.
func (r *Reservation) Validate() error {
	where := fmt.Sprintf("reservation %d", r.ID)
	if r.ID == 0 || int(r.ID) >= MaxReservations {
		return fmt.Errorf("%s: id out of range 1..%d", where, MaxReservations-1)
	}
	switch r.Service {
	case ServiceNone:
		if r.Rate != 0 || r.Peak != 0 {
			return fmt.Errorf("%s: a Tspec needs a service (guaranteed, controlled-load or best-effort)", where)
		}
		return r.validateSessions(where)
	case ServiceGuaranteed, ServiceControlledLoad, ServiceBestEffort:
	default:
		return fmt.Errorf("%s: service %d unknown", where, r.Service)
	}
	switch {
	case r.Rate < MinReservationRate:
		return fmt.Errorf("%s: rate %d bytes/s below the minimum %d", where, r.Rate, MinReservationRate)
	case r.Peak != 0 && r.Peak < r.Rate:
		return fmt.Errorf("%s: peak rate %d bytes/s below the rate %d: the peak must be at least r (or 0 for none)", where, r.Peak, r.Rate)
	case r.MaxUnit == 0 || r.MaxUnit > 1<<16:
		return fmt.Errorf("%s: maximum packet size %d out of range 1..65536", where, r.MaxUnit)
	case r.MinUnit > r.MaxUnit:
		return fmt.Errorf("%s: minimum policed unit %d above the maximum packet size %d", where, r.MinUnit, r.MaxUnit)
	case r.Bucket < uint64(r.MaxUnit):
		return fmt.Errorf("%s: bucket %d bytes below the maximum packet size %d: it must hold one packet", where, r.Bucket, r.MaxUnit)
	case r.Bucket > 1<<40:
		return fmt.Errorf("%s: bucket %d bytes above 1 TiB", where, r.Bucket)
	case r.DSCP < -1 || r.DSCP > 63:
		return fmt.Errorf("%s: DSCP %d out of range -1..63", where, r.DSCP)
	case r.DemoteDSCP < -1 || r.DemoteDSCP > 63:
		return fmt.Errorf("%s: demote DSCP %d out of range -1..63", where, r.DemoteDSCP)
	}
	return r.validateSessions(where)
}

// validateSessions checks the per-session leaves of a reservation.
func (r *Reservation) validateSessions(where string) error {
	if r.SessionClassID != 0 && (r.MaxSessions == 0 || r.MaxSessions > uint32(SessionLeaves)) {
		return fmt.Errorf("%s: per-session leaves need max sessions 1..%d, not %d", where, SessionLeaves, r.MaxSessions)
	}
	return nil
}

// bpf is the reservation as struct hq_resv holds it.
func (r *Reservation) bpf() hostqosHqResv {
	v := hostqosHqResv{
		MinUnit:       r.MinUnit,
		MaxUnit:       r.MaxUnit,
		Classid:       r.ClassID,
		DemoteClassid: r.DemoteClassID,
		MaxSessions:   r.MaxSessions,
		Sndbuf:        r.SendBuffer,
		Id:            r.ID,
		Service:       uint8(r.Service),
		Dscp:          r.DSCP,
		DemoteDscp:    r.DemoteDSCP,
		SessClassid:   r.SessionClassID,
	}
	if r.SendBuffer > math.MaxInt32 {
		v.Sndbuf = math.MaxInt32
	}
	if r.Rate > 0 {
		v.R_q16 = resvCharge(r.Rate)
		v.B_ns = uint64(math.Round(float64(r.Bucket) * 1e9 / float64(r.Rate)))
		if r.Peak > 0 {
			v.P_q16 = resvCharge(r.Peak)
			v.MpNs = uint64(math.Round(float64(r.MaxUnit) * 1e9 / float64(r.Peak)))
		}
	}
	h := fnv.New32a()
	fmt.Fprint(h, v.R_q16, v.P_q16, v.B_ns, v.MpNs, v.MinUnit, v.MaxUnit, v.Service)
	v.Epoch = h.Sum32() | 1
	return v
}

// compileResv checks the policy's reservations and gives each rule that
// names one its struct hq_resv; it sets the rules' action. The returned
// map is keyed by rule slot.
func compileResv(p Policy, rules []hostqosHqRule) (map[uint16]hostqosHqResv, error) {
	byID := map[uint16]*Reservation{}
	for i := range p.Reservations {
		r := &p.Reservations[i]
		if err := r.Validate(); err != nil {
			return nil, err
		}
		if _, dup := byID[r.ID]; dup {
			return nil, fmt.Errorf("reservation %d: id used twice", r.ID)
		}
		byID[r.ID] = r
	}
	out := map[uint16]hostqosHqResv{}
	for i, r := range p.Rules {
		if r.Reservation == 0 {
			continue
		}
		where := fmt.Sprintf("rule %d (slot %d)", i, r.Slot)
		rv := byID[r.Reservation]
		if rv == nil {
			return nil, fmt.Errorf("%s: reservation %d is not in the policy", where, r.Reservation)
		}
		if r.ActionCode != ActPass || r.PoliceRate != 0 {
			return nil, fmt.Errorf("%s: a rule with a reservation needs action pass and no policer", where)
		}
		rules[i].Action = uint8(ActReserve)
		out[r.Slot] = rv.bpf()
	}
	return out, nil
}

// writeResv writes buffer buf's reservation of every rule slot (zero for
// slots without one) and returns the number of rules with a reservation
// and of those with a session limit. Buffers that never had a reservation
// and get none are left alone.
func (d *Datapath) writeResv(buf uint32, slots map[uint16]hostqosHqResv, hadAny bool) (nresv, nsess uint16, err error) {
	for _, v := range slots {
		nresv++
		if v.MaxSessions > 0 {
			nsess++
		}
	}
	have := d.resvBufs[buf]
	if len(slots) == 0 && (have != nil && len(have) == 0 || have == nil && !hadAny) {
		d.resvBufs[buf] = map[uint16]hostqosHqResv{} // all zero
		return 0, 0, nil
	}
	// Only the slots that differ from what the buffer holds are written
	// (all of them when that is unknown: adopted state, a failed write).
	d.resvBufs[buf] = nil
	var keys []uint32
	var vals []hostqosHqResv
	if have == nil {
		keys = make([]uint32, MaxRules)
		vals = make([]hostqosHqResv, MaxRules)
		for i := range keys {
			keys[i] = buf*uint32(MaxRules) + uint32(i)
		}
		for s, v := range slots {
			vals[s] = v
		}
	} else {
		for s, v := range slots {
			if hv, ok := have[s]; !ok || hv != v {
				keys, vals = append(keys, buf*uint32(MaxRules)+uint32(s)), append(vals, v)
			}
		}
		for s := range have {
			if _, ok := slots[s]; !ok {
				keys, vals = append(keys, buf*uint32(MaxRules)+uint32(s)), append(vals, hostqosHqResv{})
			}
		}
	}
	if err := batchUpdate(d.objs.HqRuleResv, keys, vals); err != nil {
		return 0, 0, fmt.Errorf("write reservations of the rules: %w", err)
	}
	d.resvBufs[buf] = maps.Clone(slots)
	if d.resvBufs[buf] == nil {
		d.resvBufs[buf] = map[uint16]hostqosHqResv{}
	}
	return nresv, nsess, nil
}

// resvIDs lists the reservation ids buffer buf's rules name.
func (d *Datapath) resvIDs(buf uint32) (map[uint16]bool, error) {
	ids := map[uint16]bool{}
	var v hostqosHqResv
	for i := 0; i < MaxRules; i++ {
		k := buf*uint32(MaxRules) + uint32(i)
		if err := d.objs.HqRuleResv.Lookup(&k, &v); err != nil {
			return nil, fmt.Errorf("read reservation of rule slot %d: %w", i, err)
		}
		if v.Id != 0 {
			ids[v.Id] = true
		}
	}
	return ids, nil
}

// releaseResv starts the states of reservations the active policy no
// longer names afresh: counters and sessions 0, times at -inf on first
// use, and a new incarnation so that sockets still bound to the old one
// give nothing back to the new one.
func (d *Datapath) releaseResv(ids map[uint16]bool) error {
	for id := range ids {
		k := uint32(id)
		var v hostqosHqResvState
		if err := d.objs.HqResvState.Lookup(&k, &v); err != nil {
			return fmt.Errorf("read state of reservation %d: %w", id, err)
		}
		v = hostqosHqResvState{Incarnation: v.Incarnation + 1}
		if err := d.objs.HqResvState.Update(&k, &v, ebpf.UpdateLock); err != nil {
			return fmt.Errorf("reset state of reservation %d: %w", id, err)
		}
	}
	return nil
}

// ReservationCounters returns the counters of the reservations the active
// policy names, by id.
func (d *Datapath) ReservationCounters() (map[uint16]ResvCounters, error) {
	d.mu.Lock()
	buf := atomic.LoadUint32(&d.stateView().Gen) & 1
	ids, err := d.activeResv(buf)
	d.mu.Unlock()
	if err != nil {
		return nil, err
	}
	out := make(map[uint16]ResvCounters, len(ids))
	for id := range ids {
		k := uint32(id)
		var v hostqosHqResvState
		if err := d.objs.HqResvState.LookupWithFlags(&k, &v, ebpf.LookupLock); err != nil {
			return nil, fmt.Errorf("read counters of reservation %d: %w", id, err)
		}
		out[id] = ResvCounters{
			ConformantPackets:    v.ConfPackets,
			ConformantBytes:      v.ConfBytes,
			NonConformantPackets: v.NonconfPackets,
			NonConformantBytes:   v.NonconfBytes,
			DemotedBytes:         v.DemotedBytes,
			ShapedPackets:        v.ShapedPackets,
			ShapedNS:             v.ShapedNs,
			OversizePackets:      v.OversizePackets,
			Sessions:             v.Sessions,
			SessionsTotal:        v.SessionsTotal,
			RefusedConnects:      v.RefusedConnects,
			RefusedSends:         v.RefusedSends,
			LockMisses:           uint64(v.BusyMisses),
		}
	}
	return out, nil
}

// activeResv is resvIDs of the active buffer, skipped when it has no
// reservations. Caller holds d.mu.
func (d *Datapath) activeResv(buf uint32) (map[uint16]bool, error) {
	if d.stateView().Buf[buf].Nresv == 0 {
		return map[uint16]bool{}, nil
	}
	if known := d.resvBufs[buf]; known != nil {
		// What Apply wrote: no read of every slot (16,384 lookups).
		ids := map[uint16]bool{}
		for _, v := range known {
			if v.Id != 0 {
				ids[v.Id] = true
			}
		}
		return ids, nil
	}
	return d.resvIDs(buf)
}

// Bindings returns the sockets bound to reservations, ordered by
// reservation and cookie.
func (d *Datapath) Bindings() ([]Binding, error) {
	var (
		k   uint64
		v   hostqosHqBinding
		out []Binding
	)
	it := d.objs.HqBind.Iterate()
	for it.Next(&k, &v) {
		out = append(out, Binding{
			Cookie:        k,
			Reservation:   v.Resv,
			PID:           v.Tgid,
			UID:           v.Uid,
			Comm:          commString(&v.Comm),
			Exe:           FileID{Dev: v.ExeDev, Ino: v.ExeIno},
			Key:           flowKeyOf(&v.Key),
			BoundNS:       v.BoundNs,
			Counted:       v.Counted != 0,
			Session:       int(v.Sess),
			SendBufferSet: v.Flags&uint32(hostqosHqBindFlagsHQ_BIND_SNDBUF) != 0,
		})
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("list socket bindings: %w", err)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Reservation != out[j].Reservation {
			return out[i].Reservation < out[j].Reservation
		}
		return out[i].Cookie < out[j].Cookie
	})
	return out, nil
}

// SessionRefusals returns the refusals after seq since (0: all it still
// holds, the latest HQ_REFUSALS), oldest first, and the newest seq to pass
// next time. Refusals older than the ring are lost (compare the first
// Seq with since+1).
func (d *Datapath) SessionRefusals(since uint64) ([]Refusal, uint64, error) {
	last := atomic.LoadUint64(&d.stateView().RefuseSeq)
	var out []Refusal
	for i := 0; i < refusalSlots; i++ {
		k := uint32(i)
		var v hostqosHqRefusal
		if err := d.objs.HqRefusal.Lookup(&k, &v); err != nil {
			return nil, since, fmt.Errorf("read session refusal %d: %w", i, err)
		}
		if v.Seq == 0 || v.Seq <= since || v.Seq > last {
			continue
		}
		out = append(out, Refusal{
			Seq: v.Seq, NS: v.Ns, Kind: RefusalKind(v.Why), Reservation: v.Resv,
			Limit: v.Sessions, PID: v.Tgid, UID: v.Uid, Comm: commString(&v.Comm),
			Key: flowKeyOf(&v.Key),
		})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Seq < out[j].Seq })
	if last < since {
		last = since
	}
	return out, last, nil
}

func flowKeyOf(k *hostqosHqFlowKey) FlowKey {
	return FlowKey{
		Proto:  k.Proto,
		Local:  netip.AddrPortFrom(addrFromWords(k.Family, &k.Src), k.Sport),
		Remote: netip.AddrPortFrom(addrFromWords(k.Family, &k.Dst), k.Dport),
	}
}

func boolByte(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}

// attachSessionHooks attaches (or adopts, swapping in the new programs)
// the cgroup hooks that bind sockets to reservations: connect4/6 and
// sendmsg4/6 bind and admit sessions, sock_release unbinds. Like
// sock_create they are pinned and stay attached when the daemon dies.
func (d *Datapath) attachSessionHooks(cgroupPath string) error {
	for _, h := range []struct {
		name   string
		prog   *ebpf.Program
		attach ebpf.AttachType
	}{
		{"connect4", d.objs.HqConnect4, ebpf.AttachCGroupInet4Connect},
		{"connect6", d.objs.HqConnect6, ebpf.AttachCGroupInet6Connect},
		{"sendmsg4", d.objs.HqSendmsg4, ebpf.AttachCGroupUDP4Sendmsg},
		{"sendmsg6", d.objs.HqSendmsg6, ebpf.AttachCGroupUDP6Sendmsg},
		{"sock_release", d.objs.HqSockRelease, ebpf.AttachCgroupInetSockRelease},
	} {
		path := filepath.Join(d.dir, pin.LinksDir, h.name)
		l, err := pin.Open(path)
		if err != nil {
			return err
		}
		if l != nil {
			if err := l.Update(h.prog); err != nil {
				l.Close()
				return fmt.Errorf("update %s program in pinned link %s: %w", h.name, path, err)
			}
			d.hooks = append(d.hooks, l)
			continue
		}
		if cgroupPath == "" {
			continue
		}
		l, err = link.AttachCgroup(link.CgroupOptions{Path: cgroupPath, Attach: h.attach, Program: h.prog})
		if err != nil {
			return fmt.Errorf("attach %s to cgroup %s: %w", h.name, cgroupPath, err)
		}
		if err := l.Pin(path); err != nil {
			l.Close()
			return fmt.Errorf("pin %s link %s: %w", h.name, path, err)
		}
		d.hooks = append(d.hooks, l)
	}
	return nil
}

// Kernel facts behind FlowControl (Linux 6.x, 64-bit): an skb's truesize
// is its data allocation plus SKB_DATA_ALIGN(sizeof(struct sk_buff)) (256)
// and SKB_DATA_ALIGN(sizeof(struct skb_shared_info)) (320); the smallest
// data allocation is 64 bytes, a full-size (1500-byte) packet's 2048
// (minus the shared info). A socket's send buffer is at least
// SOCK_MIN_SNDBUF = 2 * (2048 + 256).
const (
	minTruesize   = 256 + 320 + 64
	mtuTruesize   = 2048 - 320 + 256 + 320
	sockMinSndbuf = 2 * (2048 + 256)
)

// FlowControl sizes a guaranteed reservation's buffers (seed §III-C,
// "buffer management") for shaping by flow control. The seed gives a
// reservation ⌈b/m⌉ buffers of a full-size packet each; here they are the
// send buffers of its sockets: up to sessions sockets (0: one) share
// ⌈b/m⌉ full-size skbs' worth of truesize, each getting SO_SNDBUF sndbuf
// (the kernel doubles the value). The reservation's leaf queue holds queue
// packets: at least ⌈b/m⌉, and as many as the sockets can have queued at
// once whatever their packets' size — a socket may queue while its unsent
// bytes, counted as truesize, are below its send buffer, so at most
// ⌈2·sndbuf / minTruesize⌉ packets. A faster sender therefore blocks in
// send() (or gets EAGAIN) before the leaf's queue can overflow: nothing
// inside the reservation is dropped on the host. The kernel caps SO_SNDBUF
// at net.core.wmem_max, which only lowers the bound.
func FlowControl(bucket uint64, minUnit, sessions uint32) (sndbuf, queue uint32) {
	m := uint64(max(minUnit, 1))
	q := (bucket + m - 1) / m // ⌈b/m⌉, the seed's buffer count
	n := uint64(max(sessions, 1))
	s := max(min(q, 1<<20)*mtuTruesize/n, sockMinSndbuf)
	s = min(s, 1<<30)
	perEff := (s + minTruesize - 1) / minTruesize
	return uint32(s / 2), uint32(min(max(q, n*perEff), 1<<24))
}

// BindOpenSockets binds the connected TCP and UDP sockets of the calling
// thread's network namespace that the active policy puts under a
// reservation and that are not bound yet (sockets opened before their
// reservation): it runs the iter/tcp and iter/udp programs once. Apply
// does not: the classifier binds such a socket at its next packet, and a
// walk of every socket is worth it only after a reservation was added or
// changed (the engine calls it then, after answering). protos (IPPROTO_TCP,
// IPPROTO_UDP; 0 or none: both) limits it to the walks of those protocols.
func (d *Datapath) BindOpenSockets(protos ...uint8) error {
	walk := func(proto uint8) bool {
		return len(protos) == 0 || slices.Contains(protos, 0) || slices.Contains(protos, proto)
	}
	for _, p := range []struct {
		name  string
		proto uint8
		prog  *ebpf.Program
	}{{"TCP", unix.IPPROTO_TCP, d.objs.HqIterBindTcp}, {"UDP", unix.IPPROTO_UDP, d.objs.HqIterBindUdp}} {
		if !walk(p.proto) {
			continue
		}
		it, err := link.AttachIter(link.IterOptions{Program: p.prog})
		if err != nil {
			return fmt.Errorf("bind open %s sockets: attach iterator: %w", p.name, err)
		}
		rd, err := it.Open()
		if err == nil {
			_, err = io.Copy(io.Discard, rd)
			rd.Close()
		}
		it.Close()
		if err != nil {
			return fmt.Errorf("bind open %s sockets: %w", p.name, err)
		}
	}
	return nil
}
