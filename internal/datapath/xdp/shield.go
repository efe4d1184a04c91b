// Package xdp loads, pins, adopts and feeds hostqos's XDP shield: one XDP
// program (hqxdp.bpf.c, its own bpf2go object) that drops or rate-limits
// listed sources and throttles pure SYNs per link and per source, with
// protected clients exempt. It pins its maps and links in the datapath's
// pin directory (internal/datapath/pin), beside the datapath's, so a dead
// daemon leaves it enforcing, a restarted one adopts it and `hostqos down`
// removes it with the rest.
package xdp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"path/filepath"
	"sort"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/hostqos/hostqos/internal/datapath/pin"
)

// Limits of the XDP shield, defined once in C (enum hqx_limits in
// bpf/include/hqxdp.h).
const (
	// MaxBlocks is the capacity of each drop-list trie (IPv4, IPv6).
	MaxBlocks      = int(hqxdpHqxLimitsHQX_BLOCK_ENTRIES)
	blockSlots     = uint32(hqxdpHqxLimitsHQX_BLOCK_SLOTS)
	MaxProtected   = int(hqxdpHqxLimitsHQX_PROTECT_ENTRIES)
	maxShieldLinks = int(hqxdpHqxLimitsHQX_LINKS)
	xdpLinkPrefix  = "xdp_"
)

// BlockEntry is one drop-list entry: packets from Prefix are dropped, or,
// with Rate (bit/s) set, passed at most at that rate (quarantine).
type BlockEntry struct {
	Prefix netip.Prefix
	Rate   uint64
}

// BlockCounters are a drop-list entry's counters since it was added:
// every packet from the prefix (frame bytes, Ethernet header included) and
// those dropped.
type BlockCounters struct {
	Prefix                  netip.Prefix
	Packets, Bytes, Dropped uint64
}

// SynLimits throttle pure SYNs (SYN without ACK) arriving on a link: Rate
// per second for the link, PerSource per second per source (IPv4 address
// or IPv6 /64), each with a burst of Burst/PerSourceBurst SYNs (0: a tenth
// of a second at the rate, at least 1). Zero rates: no limit.
type SynLimits struct {
	Rate, Burst, PerSource, PerSourceBurst uint32
}

// Enabled reports whether any SYN limit is set.
func (s SynLimits) Enabled() bool { return s.Rate > 0 || s.PerSource > 0 }

// Protected is a client whose SYNs to a local TCP port (0: any) bypass SYN
// throttling.
type Protected struct {
	Addr netip.Addr
	Port uint16
}

// ShieldStats are the XDP program's global counters.
type ShieldStats struct {
	Packets      uint64 `json:"packets"`
	NotIP        uint64 `json:"not_ip"`
	Truncated    uint64 `json:"truncated"`
	Blocked      uint64 `json:"blocked"`
	Quarantined  uint64 `json:"quarantined"`
	SynSeen      uint64 `json:"syn_seen"`
	SynDropped   uint64 `json:"syn_dropped"`
	SynProtected uint64 `json:"syn_protected"`
}

// SynCounters are a link's pure-SYN counters.
type SynCounters struct {
	Seen, Dropped uint64
}

// Shield is the XDP program (drop list, SYN throttling) and its pinned
// maps. Its maps and links are pinned in the datapath's directory, so a
// dead daemon leaves it enforcing and `hostqos down` (Remove) takes it away.
type Shield struct {
	mu      sync.Mutex
	dir     string
	log     *slog.Logger
	objs    hqxdpObjects
	xdp     map[int]link.Link
	entries map[netip.Prefix]shieldSlot
	used    []bool // by slot
	next    uint32 // where the search for a free slot starts
	protect map[Protected]bool
	ncpu    int
}

type shieldSlot struct {
	slot uint32
	rate uint64 // bit/s
}

// OpenShield loads the XDP program, adopting the pinned maps and XDP
// links under dir (the datapath's pin directory).
func OpenShield(dir string, log *slog.Logger) (_ *Shield, err error) {
	if log == nil {
		log = slog.Default()
	}
	if dir == "" {
		dir = pin.DefaultDir
	}
	s := &Shield{dir: filepath.Clean(dir), log: log.With("component", "shield"), xdp: map[int]link.Link{},
		entries: map[netip.Prefix]shieldSlot{}, used: make([]bool, blockSlots), protect: map[Protected]bool{}}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	if _, err := pin.Prepare(s.log, s.dir); err != nil {
		return nil, err
	}
	if s.ncpu, err = ebpf.PossibleCPU(); err != nil {
		return nil, fmt.Errorf("count possible CPUs: %w", err)
	}
	spec, err := loadHqxdp()
	if err != nil {
		return nil, fmt.Errorf("parse XDP object: %w", err)
	}
	if err := spec.LoadAndAssign(&s.objs, &ebpf.CollectionOptions{Maps: ebpf.MapOptions{PinPath: s.dir}}); err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			s.log.Error("BPF verifier rejected the XDP program", "log", fmt.Sprintf("%+v", ve))
			return nil, fmt.Errorf("load XDP program: %+v", ve)
		}
		return nil, pin.Incompatible("", err)
	}
	if err := s.readPinned(); err != nil {
		return nil, err
	}
	if err := s.adoptXDP(); err != nil {
		return nil, err
	}
	return s, nil
}

// readPinned rebuilds the entry and slot tables from the pinned tries and
// the protected clients from their map.
func (s *Shield) readPinned() error {
	var k4 hqxdpHqxKey4
	var e hqxdpHqxEntry
	it := s.objs.HqxBlock4.Iterate()
	for it.Next(&k4, &e) {
		var a [4]byte
		binary.NativeEndian.PutUint32(a[:], k4.Addr)
		s.adoptEntry(netip.PrefixFrom(netip.AddrFrom4(a), int(k4.Prefixlen)), e)
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("read pinned IPv4 drop list: %w", err)
	}
	var k6 hqxdpHqxKey6
	it = s.objs.HqxBlock6.Iterate()
	for it.Next(&k6, &e) {
		s.adoptEntry(netip.PrefixFrom(netip.AddrFrom16(k6.Addr), int(k6.Prefixlen)), e)
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("read pinned IPv6 drop list: %w", err)
	}
	var h4 uint32
	it = s.objs.HqxHost4.Iterate()
	for it.Next(&h4, &e) {
		var a [4]byte
		binary.NativeEndian.PutUint32(a[:], h4)
		s.adoptEntry(netip.PrefixFrom(netip.AddrFrom4(a), 32), e)
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("read pinned IPv4 host drop list: %w", err)
	}
	var h6 hqxdpHqxAddr6
	it = s.objs.HqxHost6.Iterate()
	for it.Next(&h6, &e) {
		s.adoptEntry(netip.PrefixFrom(netip.AddrFrom16(h6.Addr), 128), e)
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("read pinned IPv6 host drop list: %w", err)
	}
	if err := s.writeTries(); err != nil {
		return err
	}
	var pk hqxdpHqxProtectKey
	var v uint32
	it = s.objs.HqxProtect.Iterate()
	for it.Next(&pk, &v) {
		s.protect[Protected{Addr: netip.AddrFrom16(pk.Addr).Unmap(), Port: pk.Port}] = true
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("read pinned protected clients: %w", err)
	}
	return nil
}

func (s *Shield) adoptEntry(p netip.Prefix, e hqxdpHqxEntry) {
	if e.Slot >= blockSlots || s.used[e.Slot] {
		return // not ours to trust; SetBlocks rewrites it
	}
	s.used[e.Slot] = true
	s.entries[p] = shieldSlot{slot: e.Slot, rate: e.Rate * 8}
}

// adoptXDP takes over the pinned XDP links of a previous run, swapping in
// the freshly loaded program without a gap.
func (s *Shield) adoptXDP() error {
	return s.links().Adopt(s.log, func(ifindex int, path string, l link.Link) error {
		if err := l.Update(s.objs.HqxXdp); err != nil {
			return fmt.Errorf("update XDP program in pinned link %s: %w", path, err)
		}
		s.xdp[ifindex] = l
		return nil
	})
}

// links are the shield's pinned XDP links.
func (s *Shield) links() pin.Links {
	return pin.Links{Dir: s.dir, Prefix: xdpLinkPrefix, Type: link.XDPType, What: "XDP"}
}

func key4(p netip.Prefix) hqxdpHqxKey4 {
	a := p.Addr().As4()
	return hqxdpHqxKey4{Prefixlen: uint32(p.Bits()), Addr: binary.NativeEndian.Uint32(a[:])}
}

func key6(p netip.Prefix) hqxdpHqxKey6 {
	return hqxdpHqxKey6{Prefixlen: uint32(p.Bits()), Addr: p.Addr().As16()}
}

func (s *Shield) trieOf(p netip.Prefix) (*ebpf.Map, any) {
	if p.IsSingleIP() { // host entries: a hash by address
		if p.Addr().Is4() {
			a := p.Addr().As4()
			k := binary.NativeEndian.Uint32(a[:])
			return s.objs.HqxHost4, &k
		}
		k := hqxdpHqxAddr6{Addr: p.Addr().As16()}
		return s.objs.HqxHost6, &k
	}
	if p.Addr().Is4() {
		k := key4(p)
		return s.objs.HqxBlock4, &k
	}
	k := key6(p)
	return s.objs.HqxBlock6, &k
}

// SetBlocks makes the drop list exactly entries (prefixes masked, at most
// MaxBlocks per family): removed entries go, new ones start with zeroed
// counters and a full bucket, changed rates keep their counters. On error
// the list may be partly updated; calling again with the previous list
// restores it.
func (s *Shield) SetBlocks(entries []BlockEntry) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	want := make(map[netip.Prefix]uint64, len(entries))
	n4 := 0
	for _, e := range entries {
		p := e.Prefix.Masked()
		if !p.IsValid() {
			return fmt.Errorf("set drop list: invalid prefix %v", e.Prefix)
		}
		if p.Addr().Is4() {
			n4++
		}
		want[p] = e.Rate
	}
	if n4 > MaxBlocks || len(want)-n4 > MaxBlocks {
		return fmt.Errorf("set drop list: %d IPv4 and %d IPv6 entries, at most %d of each", n4, len(want)-n4, MaxBlocks)
	}
	// Removals first, so their slots are free for the additions.
	for p, cur := range s.entries {
		if _, ok := want[p]; ok {
			continue
		}
		m, k := s.trieOf(p)
		if err := m.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("remove %v from the drop list: %w", p, err)
		}
		s.used[cur.slot] = false
		delete(s.entries, p)
	}
	for p, rate := range want {
		cur, ok := s.entries[p]
		if ok && cur.rate == rate {
			continue
		}
		if !ok {
			slot, err := s.freeSlot()
			if err != nil {
				return err
			}
			if err := s.resetSlot(slot); err != nil {
				return err
			}
			cur = shieldSlot{slot: slot}
		}
		m, k := s.trieOf(p)
		v := hqxdpHqxEntry{Slot: cur.slot, Rate: rate / 8}
		if err := m.Put(k, &v); err != nil {
			return fmt.Errorf("add %v to the drop list: %w", p, err)
		}
		cur.rate = rate
		s.used[cur.slot] = true
		s.entries[p] = cur
	}
	return s.writeTries()
}

// writeTries tells the program how many shorter prefixes each trie holds
// (it skips an empty one). A removal is written after the entries go, an
// addition before its lookups matter, so the count never hides an entry
// for long: SetBlocks writes it last, and an entry added to a trie that
// was empty is enforced from this write on.
func (s *Shield) writeTries() error {
	var t hqxdpHqxTries
	for p := range s.entries {
		if p.IsSingleIP() {
			continue
		}
		if p.Addr().Is4() {
			t.N4++
		} else {
			t.N6++
		}
	}
	if err := s.objs.HqxTries.Put(uint32(0), &t); err != nil {
		return fmt.Errorf("write drop-list trie sizes: %w", err)
	}
	return nil
}

func (s *Shield) freeSlot() (uint32, error) {
	for i := uint32(0); i < blockSlots; i++ {
		slot := (s.next + i) % blockSlots
		if !s.used[slot] {
			s.next = slot + 1
			return slot, nil
		}
	}
	return 0, errors.New("set drop list: no free counter slot")
}

func (s *Shield) resetSlot(slot uint32) error {
	zero := make([]hqxdpHqxCounters, s.ncpu)
	if err := s.objs.HqxCtr.Put(slot, zero); err != nil {
		return fmt.Errorf("reset drop-list counters of slot %d: %w", slot, err)
	}
	if err := s.objs.HqxBucket.Put(slot, hqxdpHqxBucket{}); err != nil {
		return fmt.Errorf("reset quarantine bucket of slot %d: %w", slot, err)
	}
	return nil
}

// BlockCounters reads the counters of every drop-list entry, sorted by
// prefix.
func (s *Shield) BlockCounters() ([]BlockCounters, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]BlockCounters, 0, len(s.entries))
	vals := make([]hqxdpHqxCounters, s.ncpu)
	for p, e := range s.entries {
		if err := s.objs.HqxCtr.Lookup(e.slot, vals); err != nil {
			return nil, fmt.Errorf("read drop-list counters of %v: %w", p, err)
		}
		c := BlockCounters{Prefix: p}
		for _, v := range vals {
			c.Packets += v.Packets
			c.Bytes += v.Bytes
			c.Dropped += v.Dropped
		}
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool {
		if c := out[i].Prefix.Addr().Compare(out[j].Prefix.Addr()); c != 0 {
			return c < 0
		}
		return out[i].Prefix.Bits() < out[j].Prefix.Bits()
	})
	return out, nil
}

// SetProtected makes the protected clients exactly list.
func (s *Shield) SetProtected(list []Protected) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(list) > MaxProtected {
		return fmt.Errorf("set protected clients: %d, at most %d", len(list), MaxProtected)
	}
	want := map[Protected]bool{}
	for _, p := range list {
		want[Protected{Addr: p.Addr.Unmap(), Port: p.Port}] = true
	}
	for p := range s.protect {
		if want[p] {
			continue
		}
		k := protectKey(p)
		if err := s.objs.HqxProtect.Delete(&k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("remove protected client %v port %d: %w", p.Addr, p.Port, err)
		}
		delete(s.protect, p)
	}
	for p := range want {
		if s.protect[p] {
			continue
		}
		k := protectKey(p)
		if err := s.objs.HqxProtect.Put(&k, uint32(1)); err != nil {
			return fmt.Errorf("add protected client %v port %d: %w", p.Addr, p.Port, err)
		}
		s.protect[p] = true
	}
	return nil
}

func protectKey(p Protected) hqxdpHqxProtectKey {
	return hqxdpHqxProtectKey{Addr: netip.AddrFrom16(p.Addr.As16()).As16(), Port: p.Port}
}

// synValue converts limits into the map's arithmetic (ns per SYN, burst
// tolerance in ns).
func synValue(l SynLimits) hqxdpHqxSyn {
	var v hqxdpHqxSyn
	gcra := func(rate, burst uint32) (interval, tau uint64) {
		if rate == 0 {
			return 0, 0
		}
		if burst == 0 {
			burst = max(1, rate/10)
		}
		interval = 1_000_000_000 / uint64(rate)
		return max(interval, 1), uint64(burst-1) * max(interval, 1)
	}
	v.IntervalNs, v.TauNs = gcra(l.Rate, l.Burst)
	v.SrcIntervalNs, v.SrcTauNs = gcra(l.PerSource, l.PerSourceBurst)
	return v
}

// AttachXDP puts the shield on an interface (idempotent) with the link's
// SYN limits. It refuses an interface that has another XDP program and
// one without an Ethernet header.
func (s *Shield) AttachXDP(ifindex int, syn SynLimits) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.setSyn(ifindex, syn); err != nil {
		return err
	}
	if l, ok := s.xdp[ifindex]; ok {
		if info, err := l.Info(); err != nil || (info.XDP() != nil && int(info.XDP().Ifindex) == ifindex) {
			return nil // attached, or the kernel cannot say: keep it
		}
		delete(s.xdp, ifindex)
		_ = pin.Drop(l)
	}
	if ifi, err := net.InterfaceByIndex(ifindex); err == nil && len(ifi.HardwareAddr) != 6 {
		return fmt.Errorf("attach XDP shield to %s: not an Ethernet-like interface (the drop list and SYN limits need one)", ifi.Name)
	}
	l, err := link.AttachXDP(link.XDPOptions{Program: s.objs.HqxXdp, Interface: ifindex})
	if err != nil {
		if errors.Is(err, unix.EBUSY) || errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("attach XDP shield to ifindex %d: another XDP program is attached there; hostqos does not replace it (remove it, or remove the drop list and SYN limits of this link): %w", ifindex, err)
		}
		return fmt.Errorf("attach XDP shield to ifindex %d: %w", ifindex, err)
	}
	if err := s.links().Pin(l, ifindex); err != nil {
		return err
	}
	s.xdp[ifindex] = l
	return nil
}

// setSyn writes the link's SYN limits, keeping its bucket and counters.
func (s *Shield) setSyn(ifindex int, syn SynLimits) error {
	k := uint32(ifindex)
	if !syn.Enabled() {
		if err := s.objs.HqxSyn.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("remove SYN limits of ifindex %d: %w", ifindex, err)
		}
		return nil
	}
	v := synValue(syn)
	var cur hqxdpHqxSyn
	if err := s.objs.HqxSyn.Lookup(k, &cur); err == nil {
		v.Tat, v.Seen, v.Dropped = cur.Tat, cur.Seen, cur.Dropped
	}
	if err := s.objs.HqxSyn.Put(k, &v); err != nil {
		return fmt.Errorf("set SYN limits of ifindex %d: %w", ifindex, err)
	}
	return nil
}

// SynCounters reads a link's pure-SYN counters (zero without limits).
func (s *Shield) SynCounters(ifindex int) (SynCounters, error) {
	var v hqxdpHqxSyn
	err := s.objs.HqxSyn.Lookup(uint32(ifindex), &v)
	if errors.Is(err, ebpf.ErrKeyNotExist) {
		return SynCounters{}, nil
	}
	if err != nil {
		return SynCounters{}, fmt.Errorf("read SYN counters of ifindex %d: %w", ifindex, err)
	}
	return SynCounters{Seen: v.Seen, Dropped: v.Dropped}, nil
}

// DetachXDP removes the shield from an interface and forgets its SYN
// limits.
func (s *Shield) DetachXDP(ifindex int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.objs.HqxSyn.Delete(uint32(ifindex)); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		s.log.Warn("remove SYN limits", "ifindex", ifindex, "err", err)
	}
	l, ok := s.xdp[ifindex]
	if !ok {
		var err error
		if l, err = s.links().Load(ifindex); err != nil || l == nil {
			return err
		}
	}
	delete(s.xdp, ifindex)
	if err := pin.Drop(l); err != nil {
		return fmt.Errorf("detach XDP shield from ifindex %d: %w", ifindex, err)
	}
	return nil
}

// XDPAttached lists the interfaces the shield is attached to.
func (s *Shield) XDPAttached() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]int, 0, len(s.xdp))
	for i := range s.xdp {
		out = append(out, i)
	}
	sort.Ints(out)
	return out
}

// Stats reads the XDP program's global counters.
func (s *Shield) Stats() (ShieldStats, error) {
	vals := make([]hqxdpHqxStats, s.ncpu)
	if err := s.objs.HqxHealth.Lookup(uint32(0), vals); err != nil {
		return ShieldStats{}, fmt.Errorf("read XDP shield stats: %w", err)
	}
	var out ShieldStats
	for _, v := range vals {
		out.Packets += v.Packets
		out.NotIP += v.NotIp
		out.Truncated += v.Truncated
		out.Blocked += v.Blocked
		out.Quarantined += v.Quarantined
		out.SynSeen += v.SynSeen
		out.SynDropped += v.SynDropped
		out.SynProtected += v.SynProtected
	}
	return out, nil
}

// TestRun runs the XDP program once on frame as if it arrived on ifindex
// and returns its verdict (XDP_DROP 1, XDP_PASS 2).
func (s *Shield) TestRun(frame []byte, ifindex int) (uint32, error) {
	ctx := xdpMD{IngressIfindex: uint32(ifindex), DataEnd: uint32(len(frame))}
	ret, err := s.objs.HqxXdp.Run(&ebpf.RunOptions{Data: frame, Context: ctx})
	if err != nil {
		return 0, fmt.Errorf("test-run XDP program: %w", err)
	}
	return ret, nil
}

// XDPProgram is the shield's XDP program, for tools that run it on frames
// themselves (the lab's XDP injector, xdpgen.Borrow, which feeds it live
// frames as if a driver had received them). It belongs to the shield:
// valid until Close, and never to be closed by the caller.
func (s *Shield) XDPProgram() *ebpf.Program { return s.objs.HqxXdp }

// xdpMD is struct xdp_md as BPF_PROG_TEST_RUN takes it.
type xdpMD struct {
	Data, DataEnd, DataMeta, IngressIfindex, RxQueueIndex, EgressIfindex uint32
}

// Close releases file descriptors; pinned maps and links keep enforcing.
func (s *Shield) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, l := range s.xdp {
		l.Close()
		delete(s.xdp, i)
	}
	return s.objs.Close()
}
