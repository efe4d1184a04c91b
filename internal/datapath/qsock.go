package datapath

// qsockets: sockets applications registered through the app API
// (libhostqos, package qsock). The daemon receives the socket itself (a
// descriptor passed with SCM_RIGHTS), writes an hq_qsock entry and puts
// its id into the socket's identity (hq_sk_ident, keyed by the
// descriptor); the classifier then gives every packet of the socket's
// flows the entry's class and DSCP, read at each packet, and counts it.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// MaxQSocks is the number of qsocket ids (1 … MaxQSocks-1; 0 is none).
const MaxQSocks = int(hostqosHqLimitsHQ_MAX_QSOCK)

// ActQSock is the cached action of a qsocket's flow.
const ActQSock = Action(hostqosHqActionHQ_ACT_QSOCK)

// QSock is what the classifier does with a qsocket's packets.
type QSock struct {
	Cookie  uint64 // the socket's cookie (SO_COOKIE)
	ClassID uint32 // HTB class (skb->priority), 0 = leave
	DSCP    int8   // DSCP to write, -1 = leave
	// User: an ordinary user's qsocket; a rule that matches the flow
	// (the admin's) comes first.
	User bool
	// UID is the owner; Sched the scheduler the application named
	// (kept for the daemon, unused by the classifier).
	UID   uint32
	Sched uint32
	// The scheduling attributes (Sched other than fifo): the declared
	// rate (bit/s, admitted on the links' qsched classes) and DWCS's
	// inter-packet gap and loss tolerance (OLN of any OLD consecutive).
	Rate     uint64
	IPGNanos uint64
	OLN, OLD uint16
}

// Schedulers as the datapath numbers them (struct hq_qsock.sched).
const (
	SchedFIFO        = uint32(hostqosHqSchedHQ_SCHED_FIFO)
	SchedDWCS        = uint32(hostqosHqSchedHQ_SCHED_DWCS)
	SchedEDFLossy    = uint32(hostqosHqSchedHQ_SCHED_EDF_LOSSY)
	SchedEDFLossless = uint32(hostqosHqSchedHQ_SCHED_EDF_LOSSLESS)
)

// The per-message attributes a scheduled qsocket's datagram carries in
// its SCM_TXTIME (enum hq_txtime): bits 8..63 the deadline (or send
// time), bits 0..7 these flags.
const (
	TxtDeadline   = uint64(hostqosHqTxtimeHQ_TXT_DEADLINE)
	TxtNoDrop     = uint64(hostqosHqTxtimeHQ_TXT_NODROP)
	TxtFrameStart = uint64(hostqosHqTxtimeHQ_TXT_FRAME_START)
	TxtFrameEnd   = uint64(hostqosHqTxtimeHQ_TXT_FRAME_END)
	TxtPrioShift  = uint64(hostqosHqTxtimeHQ_TXT_PRIO_SHIFT)
	TxtPrioMask   = uint64(hostqosHqTxtimeHQ_TXT_PRIO_MASK)
	TxtMark       = uint64(hostqosHqTxtimeHQ_TXT_MARK)
	TxtFlags      = uint64(hostqosHqTxtimeHQ_TXT_FLAGS)
)

// QSchedBands is the number of band leaves of a link's qsched class.
const QSchedBands = int(hostqosHqLimitsHQ_QSCHED_BANDS)

// QSockCounters are what a qsocket's packets did in the classifier.
type QSockCounters struct {
	Open    bool   // the socket is open (its entry still holds its cookie)
	Cookie  uint64 // the cookie the entry holds (0 once closed)
	Packets uint64
	Bytes   uint64 // skb->len: the L2 frame as the qdisc sees it
	FirstNS uint64 // coarse CLOCK_MONOTONIC of the first packet, 0 = none
	LastNS  uint64
	Rate    uint64 // bytes/s over the last complete second
	// The host-wide scheduler's (a scheduled qsocket's datagrams):
	// messages sent predicted after their deadline, dropped because they
	// could not meet it, dropped with the rest of their frame, the bytes
	// dropped, DWCS messages sent late with no loss left in their
	// window, and messages passed undecided (the state's lock was held).
	Late, LateDropped, FrameDropped, DroppedBytes, Violations, LockMisses uint64
}

const qsockSize = int(unsafe.Sizeof(hostqosHqQsock{}))

// qsockMem is the read-write mapping of hq_qsock, unmapped once
// unreachable (like fctrMem).
type qsockMem struct{ b []byte }

func (d *Datapath) qsockMap() (*qsockMem, error) {
	if m := d.qmem.Load(); m != nil {
		return m, nil
	}
	d.qmemMu.Lock()
	defer d.qmemMu.Unlock()
	if m := d.qmem.Load(); m != nil {
		return m, nil
	}
	size := (MaxQSocks*qsockSize + 4095) &^ 4095
	b, err := unix.Mmap(d.objs.HqQsock.FD(), 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mmap qsocket table: %w", err)
	}
	m := &qsockMem{b: b}
	runtime.AddCleanup(m, func(b []byte) { _ = unix.Munmap(b) }, b)
	d.qmem.Store(m)
	return m, nil
}

func (m *qsockMem) entry(id uint32) *hostqosHqQsock {
	return (*hostqosHqQsock)(unsafe.Pointer(&m.b[int(id)*qsockSize]))
}

func checkQSockID(id uint32) error {
	if id == 0 || int(id) >= MaxQSocks {
		return fmt.Errorf("qsocket id %d out of range 1..%d", id, MaxQSocks-1)
	}
	return nil
}

// classWord packs classid, dscp and user as they lie in the entry (one
// little-endian 64-bit word at classid), so a change is one store.
func classWord(q QSock) uint64 {
	w := uint64(q.ClassID) | uint64(uint8(q.DSCP))<<32
	if q.User {
		w |= 1 << 40
	}
	return w
}

// AttachQSock makes the socket behind fd (a descriptor of the daemon's)
// qsocket id: the entry gets q with fresh counters, the socket's identity
// names the id, and the socket's flows (only they) are classified again,
// so its traffic takes q from its next packet. A socket without an identity (born
// before the datapath, or in a way sock_create does not see) gets one
// with owner uid.
func (d *Datapath) AttachQSock(fd int, id uint32, q QSock) error {
	if err := checkQSockID(id); err != nil {
		return err
	}
	m, err := d.qsockMap()
	if err != nil {
		return err
	}
	e := m.entry(id)
	atomic.StoreUint64(&e.Cookie, 0)
	for _, p := range []*uint64{&e.Packets, &e.Bytes, &e.FirstNs, &e.LastNs, &e.WinNs, &e.WinBytes, &e.Rate} {
		atomic.StoreUint64(p, 0)
	}
	atomic.StoreUint64((*uint64)(unsafe.Pointer(&e.Classid)), classWord(q))
	atomic.StoreUint32(&e.Uid, q.UID)
	atomic.StoreUint32(&e.Sched, q.Sched)
	for _, p := range []*uint64{&e.Late, &e.LateDropped, &e.FrameDropped, &e.DroppedBytes, &e.Violations, &e.LockMisses} {
		atomic.StoreUint64(p, 0)
	}
	setSchedAttrs(e, q, true)
	atomic.StoreUint64(&e.Cookie, q.Cookie)

	var v hostqosHqIdent
	err = d.objs.HqSkIdent.Lookup(int32(fd), &v)
	if errors.Is(err, ebpf.ErrKeyNotExist) {
		v = hostqosHqIdent{Uid: q.UID}
	} else if err != nil {
		atomic.StoreUint64(&e.Cookie, 0)
		return fmt.Errorf("read identity of socket %d: %w", q.Cookie, err)
	}
	v.Qsock, v.Qcookie = id, q.Cookie
	if err := d.objs.HqSkIdent.Update(int32(fd), &v, ebpf.UpdateAny); err != nil {
		atomic.StoreUint64(&e.Cookie, 0)
		return fmt.Errorf("tag socket %d as qsocket %d: %w", q.Cookie, id, err)
	}
	d.forgetSocketFlows(fd)
	return nil
}

// ChangeQSock gives qsocket id a new class, DSCP and owner kind, taking
// effect at its next packet; its counters go on. cookie must be the
// socket's.
func (d *Datapath) ChangeQSock(id uint32, q QSock) error {
	if err := checkQSockID(id); err != nil {
		return err
	}
	m, err := d.qsockMap()
	if err != nil {
		return err
	}
	e := m.entry(id)
	if c := atomic.LoadUint64(&e.Cookie); c != q.Cookie {
		return fmt.Errorf("change qsocket %d: it is no longer socket %d (closed)", id, q.Cookie)
	}
	atomic.StoreUint64((*uint64)(unsafe.Pointer(&e.Classid)), classWord(q))
	reset := atomic.LoadUint32(&e.Sched) != q.Sched || e.Old != q.OLD || e.Oln != q.OLN || e.IpgNs != q.IPGNanos
	atomic.StoreUint32(&e.Sched, q.Sched)
	setSchedAttrs(e, q, reset)
	return nil
}

// setSchedAttrs writes q's scheduling attributes into e and, with reset,
// starts its scheduling state afresh (no frame, an empty loss window).
// The classifier may be deciding a message meanwhile: at worst that one
// message is decided on a mix, which a change of scheduler allows.
func setSchedAttrs(e *hostqosHqQsock, q QSock, reset bool) {
	atomic.StoreUint64(&e.SchedRate, q.Rate)
	atomic.StoreUint64(&e.IpgNs, q.IPGNanos)
	e.Oln, e.Old = q.OLN, q.OLD
	if !reset {
		return
	}
	atomic.StoreUint64(&e.DlPrev, 0)
	atomic.StoreUint32(&e.Seq, 0)
	e.Lost, e.Frame = 0, 0
	for i := range e.Win {
		atomic.StoreUint64(&e.Win[i], 0)
	}
	atomic.StoreUint32(&e.Busy, 0)
}

// DetachQSock ends qsocket id of the socket behind fd (which may be -1
// when the socket is gone): the entry is freed, the identity forgets it,
// and its flows are classified again by the rules at their next packet.
func (d *Datapath) DetachQSock(fd int, id uint32, cookie uint64) error {
	if err := checkQSockID(id); err != nil {
		return err
	}
	m, err := d.qsockMap()
	if err != nil {
		return err
	}
	e := m.entry(id)
	atomic.CompareAndSwapUint64(&e.Cookie, cookie, 0)
	if fd >= 0 {
		var v hostqosHqIdent
		if err := d.objs.HqSkIdent.Lookup(int32(fd), &v); err == nil && v.Qsock == id {
			v.Qsock, v.Qcookie = 0, 0
			if err := d.objs.HqSkIdent.Update(int32(fd), &v, ebpf.UpdateExist); err != nil {
				return fmt.Errorf("untag qsocket %d (socket %d): %w", id, cookie, err)
			}
		}
		d.forgetSocketFlows(fd)
		return nil
	}
	// The socket is gone: its flows meet the freed entry at their next
	// packet (hq_qsock_result) and are classified again then.
	return nil
}

// QSockOf returns the qsocket id and cookie the identity of the socket
// behind fd names (0: none).
func (d *Datapath) QSockOf(fd int) (id uint32, cookie uint64, err error) {
	var v hostqosHqIdent
	err = d.objs.HqSkIdent.Lookup(int32(fd), &v)
	if errors.Is(err, ebpf.ErrKeyNotExist) {
		return 0, 0, nil
	}
	if err != nil {
		return 0, 0, fmt.Errorf("read the identity of a socket: %w", err)
	}
	return v.Qsock, v.Qcookie, nil
}

// ReadQSock returns qsocket id's counters.
func (d *Datapath) ReadQSock(id uint32) (QSockCounters, error) {
	if err := checkQSockID(id); err != nil {
		return QSockCounters{}, err
	}
	m, err := d.qsockMap()
	if err != nil {
		return QSockCounters{}, err
	}
	e := m.entry(id)
	c := QSockCounters{
		Cookie:  atomic.LoadUint64(&e.Cookie),
		Packets: atomic.LoadUint64(&e.Packets),
		Bytes:   atomic.LoadUint64(&e.Bytes),
		FirstNS: atomic.LoadUint64(&e.FirstNs),
		LastNS:  atomic.LoadUint64(&e.LastNs),
		Rate:    atomic.LoadUint64(&e.Rate),

		Late:         atomic.LoadUint64(&e.Late),
		LateDropped:  atomic.LoadUint64(&e.LateDropped),
		FrameDropped: atomic.LoadUint64(&e.FrameDropped),
		DroppedBytes: atomic.LoadUint64(&e.DroppedBytes),
		Violations:   atomic.LoadUint64(&e.Violations),
		LockMisses:   atomic.LoadUint64(&e.LockMisses),
	}
	c.Open = c.Cookie != 0
	return c, nil
}

// QSocks returns the qsockets whose sockets are open, by id: what the
// datapath keeps across a daemon restart.
func (d *Datapath) QSocks() (map[uint32]QSock, error) {
	m, err := d.qsockMap()
	if err != nil {
		return nil, err
	}
	out := map[uint32]QSock{}
	for id := uint32(1); int(id) < MaxQSocks; id++ {
		e := m.entry(id)
		c := atomic.LoadUint64(&e.Cookie)
		if c == 0 {
			continue
		}
		w := atomic.LoadUint64((*uint64)(unsafe.Pointer(&e.Classid)))
		out[id] = QSock{Cookie: c, ClassID: uint32(w), DSCP: int8(uint8(w >> 32)), User: w>>40&1 == 1,
			UID: atomic.LoadUint32(&e.Uid), Sched: atomic.LoadUint32(&e.Sched),
			Rate: atomic.LoadUint64(&e.SchedRate), IPGNanos: atomic.LoadUint64(&e.IpgNs), OLN: e.Oln, OLD: e.Old}
	}
	return out, nil
}

// SocketCookie is the kernel's cookie of the socket behind fd (SO_COOKIE):
// unique for the host's uptime, what the classifier sees.
func SocketCookie(fd int) (uint64, error) {
	var c uint64
	size := uint32(8)
	_, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_SOCKET, unix.SO_COOKIE,
		uintptr(unsafe.Pointer(&c)), uintptr(unsafe.Pointer(&size)), 0)
	if errno != 0 {
		return 0, fmt.Errorf("read the cookie of a socket: %w", errno)
	}
	return c, nil
}

// SocketInfo is what the daemon checks of a socket an application passed
// it before making it a qsocket.
type SocketInfo struct {
	Cookie   uint64
	Owner    uint32 // uid of the socket's inode: its creator's (fs)uid
	Family   int    // AF_INET, AF_INET6, …
	Type     int    // SOCK_STREAM, SOCK_DGRAM, …
	Protocol int
	// SameNetns: the socket is in the network namespace the datapath
	// serves (its traffic is classified here).
	SameNetns bool
	// QSock and QCookie are the qsocket its identity names (0: none).
	QSock   uint32
	QCookie uint64
}

// InspectSocket reads what SocketInfo holds of the socket behind fd. A
// descriptor that is not a socket — another kind of file, or an O_PATH
// descriptor of a socket file, which names the file but is no socket to
// ask — is an error wrapping unix.ENOTSOCK. Errors never name fd: it is a
// number of this process, meaningless to whoever passed the socket.
func (d *Datapath) InspectSocket(fd int) (SocketInfo, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return SocketInfo{}, fmt.Errorf("inspect the descriptor passed: %w", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		return SocketInfo{}, fmt.Errorf("inspect the descriptor passed: %w", unix.ENOTSOCK)
	}
	si := SocketInfo{Owner: st.Uid}
	var err error
	if si.Family, err = unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_DOMAIN); err != nil {
		if errors.Is(err, unix.EBADF) || errors.Is(err, unix.ENOTSOCK) {
			// Fstat worked, so the descriptor is open: an O_PATH one.
			return SocketInfo{}, fmt.Errorf("inspect the descriptor passed: an O_PATH descriptor of a socket file: %w", unix.ENOTSOCK)
		}
		return SocketInfo{}, fmt.Errorf("inspect the socket passed: read its domain: %w", err)
	}
	if si.Type, err = unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TYPE); err != nil {
		return SocketInfo{}, fmt.Errorf("inspect the socket passed: read its type: %w", err)
	}
	if si.Protocol, err = unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_PROTOCOL); err != nil {
		return SocketInfo{}, fmt.Errorf("inspect the socket passed: read its protocol: %w", err)
	}
	if si.Family != unix.AF_INET && si.Family != unix.AF_INET6 {
		return si, nil
	}
	if si.Cookie, err = SocketCookie(fd); err != nil {
		return SocketInfo{}, err
	}
	ns, err := unix.GetsockoptUint64(fd, unix.SOL_SOCKET, unix.SO_NETNS_COOKIE)
	if err != nil {
		return SocketInfo{}, fmt.Errorf("inspect socket %d: read its network namespace: %w", si.Cookie, err)
	}
	si.SameNetns = ns == d.netnsCookie
	if si.QSock, si.QCookie, err = d.QSockOf(fd); err != nil {
		return SocketInfo{}, err
	}
	return si, nil
}

// forgetSocketFlows makes the flows of the socket behind fd, and no
// others, be classified again at their next packet (hq_forget_flows): a
// connected socket's flow by its 5-tuple, an unconnected one's by its
// local port (and address) in its family's table — an IPv6 socket's in
// both, as it may send IPv4. A socket without a local port has sent
// nothing yet: it has no flows. When the program cannot run, every flow
// is classified again (Reevaluate), as before it existed.
func (d *Datapath) forgetSocketFlows(fd int) int {
	reqs, err := socketFlows(fd)
	if err != nil {
		d.Reevaluate()
		return -1
	}
	n := 0
	for i := range reqs {
		if _, err := d.objs.HqForgetFlows.Run(&ebpf.RunOptions{Context: &reqs[i], ContextOut: &reqs[i]}); err != nil {
			d.Reevaluate()
			return -1
		}
		n += int(reqs[i].Count)
	}
	return n
}

// socketFlows describes the flows of the socket behind fd for
// hq_forget_flows: none for a socket without a local port or of another
// protocol than TCP and UDP.
func socketFlows(fd int) ([]hostqosHqForget, error) {
	proto, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_PROTOCOL)
	if err != nil {
		return nil, fmt.Errorf("read the protocol of a socket: %w", err)
	}
	if proto != unix.IPPROTO_TCP && proto != unix.IPPROTO_UDP {
		return nil, nil
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		return nil, fmt.Errorf("read the address of a socket: %w", err)
	}
	local, ok := sockaddrAddrPort(sa)
	if !ok || local.Port() == 0 {
		return nil, nil
	}
	r := hostqosHqForget{Proto: uint8(proto), Sport: local.Port()}
	if pa, err := unix.Getpeername(fd); err == nil {
		if peer, ok := sockaddrAddrPort(pa); ok && peer.Port() != 0 {
			r.Dport = peer.Port()
			l, p := local.Addr().Unmap(), peer.Addr().Unmap()
			r.Family = famOf(p)
			putAddrWords(&r.Src, l)
			putAddrWords(&r.Dst, p)
			return []hostqosHqForget{r}, nil
		}
	}
	l := local.Addr()
	if l.IsUnspecified() {
		r.Any = 1
		if l.Is4() {
			r.Family = famIPv4
			return []hostqosHqForget{r}, nil
		}
		r4, r6 := r, r
		r4.Family, r6.Family = famIPv4, famIPv6
		return []hostqosHqForget{r4, r6}, nil
	}
	l = l.Unmap()
	r.Family = famOf(l)
	putAddrWords(&r.Src, l)
	return []hostqosHqForget{r}, nil
}

func famOf(a netip.Addr) uint8 {
	if a.Is4() {
		return famIPv4
	}
	return famIPv6
}

// putAddrWords lays a out as the flow keys do (network byte order; IPv4
// in the first word).
func putAddrWords(w *[4]uint32, a netip.Addr) {
	var b [16]byte
	if a.Is4() {
		v := a.As4()
		copy(b[:], v[:])
	} else {
		b = a.As16()
	}
	for i := range w {
		w[i] = binary.NativeEndian.Uint32(b[i*4:])
	}
}

func sockaddrAddrPort(sa unix.Sockaddr) (netip.AddrPort, bool) {
	switch s := sa.(type) {
	case *unix.SockaddrInet4:
		return netip.AddrPortFrom(netip.AddrFrom4(s.Addr), uint16(s.Port)), true
	case *unix.SockaddrInet6:
		return netip.AddrPortFrom(netip.AddrFrom16(s.Addr), uint16(s.Port)), true
	}
	return netip.AddrPort{}, false
}

// QSched is a link's qsocket scheduler: the rate its qsched class is
// guaranteed (the sum of the scheduled qsockets' declared rates) and the
// classid of its band 0 (band b: ClassID0 + b).
type QSched struct {
	Rate     uint64 // bit/s
	ClassID0 uint32
	// Margin is how much later than predicted at Rate a packet may
	// leave (shaper.QSchedMargin): a message is kept only with that much
	// room before its deadline.
	Margin time.Duration
}

// SetQScheds makes the links' qsocket schedulers (by ifindex) those of
// ls: new ones start with an empty backlog, changed ones keep theirs, and
// links not in ls lose theirs (their scheduled qsockets' packets go to
// their class's leaf, undecided but for their own deadlines).
func (d *Datapath) SetQScheds(ls map[int]QSched) error {
	var k uint32
	var v hostqosHqQsched
	var gone []uint32
	it := d.objs.HqQsched.Iterate()
	for it.Next(&k, &v) {
		if _, ok := ls[int(k)]; !ok {
			gone = append(gone, k)
		}
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("read qsocket schedulers: %w", err)
	}
	for ifindex, q := range ls {
		if q.Rate == 0 {
			return fmt.Errorf("set qsocket scheduler of ifindex %d: rate 0", ifindex)
		}
		k = uint32(ifindex)
		var cur hostqosHqQsched
		err := d.objs.HqQsched.Lookup(&k, &cur)
		if err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("read qsocket scheduler of ifindex %d: %w", ifindex, err)
		}
		nsq16 := (uint64(8e9) << 16) / q.Rate
		if err == nil && cur.NsQ16 == nsq16 && cur.Classid0 == q.ClassID0 && cur.Margin == uint64(q.Margin) {
			continue
		}
		v = hostqosHqQsched{Vtime: cur.Vtime, Lastfin: cur.Lastfin, Room: cur.Room, NsQ16: nsq16, Classid0: q.ClassID0, Margin: uint64(q.Margin)}
		if err := d.objs.HqQsched.Update(&k, &v, ebpf.UpdateAny); err != nil {
			return fmt.Errorf("set qsocket scheduler of ifindex %d: %w", ifindex, err)
		}
	}
	for _, k := range gone {
		if err := d.objs.HqQsched.Delete(&k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("remove qsocket scheduler of ifindex %d: %w", k, err)
		}
	}
	return nil
}
