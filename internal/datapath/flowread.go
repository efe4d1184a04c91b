package datapath

import (
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// Reading flows.
//
// A flow's key, owner and first-seen time live in the flow tables (LRU
// hash maps, one for IPv4 and one for IPv6 flows, which the kernel only
// exposes through iterators and syscalls); everything a packet changes —
// packets, bytes, drops, last seen, rule — lives in the flow's counter
// slot, one cache line of a memory-mapped array (hq_fctr) that both
// tables share. The BPF program hands out slots with a global cursor;
// each slot carries the tag (cursor value + 1) of the flow that owns it,
// and so does the flow's table entry. A reader that knows a flow's slot
// and tag (a FlowRef) reads its counters in a few nanoseconds and can tell
// when the slot no longer belongs to the flow.
//
// A table only gains flows, loses flows (LRU eviction happens on an
// insert) or moves a flow to another slot when a slot is allocated, which
// advances the cursor; FlowReader therefore rescans the tables only when
// the cursor has moved since its last scan.

// FlowRef locates a flow's counters in the shared counter array. It stays
// valid while the flow keeps its counter slot.
type FlowRef struct {
	Slot uint32 // index into the counter array
	Tag  uint64 // owner tag; 0 = the flow has no slot (yet)
	// Counts of the flow's earlier slots at the time of the scan.
	base     Counters
	baseLast uint64
}

// FlowCounters are a flow's counters as read from its counter slot.
type FlowCounters struct {
	Counters
	LastSeenNS uint64
	RuleSlot   int // -1 = no rule matched
}

// fctrSize is the size of one counter slot (struct hq_fctr).
const fctrSize = unsafe.Sizeof(hostqosHqFctr{})

// fctrMem is the read-only mapping of the counter array. It is unmapped
// by a cleanup once unreachable, so a reader holding it can never touch
// unmapped memory, even while the datapath is being closed.
type fctrMem struct {
	b []byte
	n uint32
}

func mapFctr(m *ebpf.Map, n uint32) (*fctrMem, error) {
	size := (int(n)*int(fctrSize) + 4095) &^ 4095
	b, err := unix.Mmap(m.FD(), 0, size, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mmap flow counters: %w", err)
	}
	fm := &fctrMem{b: b, n: n}
	runtime.AddCleanup(fm, func(b []byte) { _ = unix.Munmap(b) }, b)
	return fm, nil
}

// read returns the counters of the flow behind ref: its base plus the
// slot's counts when the slot still carries ref's tag (ok), else the base
// alone. rule is the slot's rule, -1 when unknown.
func (m *fctrMem) read(ref *FlowRef) (c FlowCounters, ok bool) {
	c.Counters, c.LastSeenNS, c.RuleSlot = ref.base, ref.baseLast, -1
	if ref.Tag == 0 || ref.Slot >= m.n {
		return c, false
	}
	s := (*hostqosHqFctr)(unsafe.Pointer(&m.b[uintptr(ref.Slot)*fctrSize]))
	if atomic.LoadUint64(&s.Tag) != ref.Tag {
		return c, false
	}
	p := atomic.LoadUint64(&s.Packets)
	b := atomic.LoadUint64(&s.Bytes)
	d := atomic.LoadUint64(&s.Drops)
	rp := atomic.LoadUint64(&s.RxPackets)
	rb := atomic.LoadUint64(&s.RxBytes)
	rd := atomic.LoadUint32(&s.RxDrops)
	last := atomic.LoadUint64(&s.LastNs)
	rule := *(*uint16)(unsafe.Pointer(&s.Rule))
	// The slot may have been taken over while we read it.
	if atomic.LoadUint64(&s.Tag) != ref.Tag {
		return c, false
	}
	c.add(&hostqosHqFctr{Packets: p, Bytes: b, Drops: d, RxPackets: rp, RxBytes: rb, RxDrops: rd, LastNs: last, Rule: rule})
	return c, true
}

// add adds a counter slot's counts to c.
func (c *FlowCounters) add(s *hostqosHqFctr) {
	c.Packets += s.Packets
	c.Bytes += s.Bytes
	c.Drops += s.Drops
	c.RxPackets += s.RxPackets
	c.RxBytes += s.RxBytes
	c.RxDrops += uint64(s.RxDrops)
	if s.LastNs > c.LastSeenNS {
		c.LastSeenNS = s.LastNs
	}
	if s.Rule != slotNone {
		c.RuleSlot = int(s.Rule)
	}
}

// FlowCountersSyscall is FlowCounters read with a bpf(2) map lookup of
// the flow's counter slot instead of from the memory-mapped array: the
// read a sampler without shared memory makes (the benchmarks compare the
// two under CPU contention, as Q-Pod compares lock-free shared memory
// with a system call).
func (d *Datapath) FlowCountersSyscall(ref FlowRef) (c FlowCounters, ok bool, err error) {
	c.Counters, c.LastSeenNS, c.RuleSlot = ref.base, ref.baseLast, -1
	if ref.Tag == 0 || ref.Slot >= d.fctrN {
		return c, false, nil
	}
	var s hostqosHqFctr
	if err := d.objs.HqFctr.Lookup(ref.Slot, &s); err != nil {
		return c, false, fmt.Errorf("look up flow counter slot %d: %w", ref.Slot, err)
	}
	if s.Tag != ref.Tag {
		return c, false, nil
	}
	c.add(&s)
	return c, true, nil
}

// FlowCounters reads the counters of the flow behind ref from the shared
// counter array, without a syscall. ok is false when the flow no longer
// owns the slot (it left the table or moved; a new scan finds it again):
// the answer then holds only the counts known when ref was taken.
func (d *Datapath) FlowCounters(ref FlowRef) (c FlowCounters, ok bool) {
	m := d.fctr.Load()
	if m == nil {
		return FlowCounters{Counters: ref.base, LastSeenNS: ref.baseLast, RuleSlot: -1}, false
	}
	return m.read(&ref)
}

// flowCursor is the counter slot allocation cursor: it moves whenever a
// flow enters the table (and so whenever one may have left it) or changes
// slot.
func (d *Datapath) flowCursor() uint64 {
	return atomic.LoadUint64(&d.stateView().Fcursor)
}

// flowRec is a flow's table entry as of the reader's last scan.
type flowRec struct {
	key     FlowKey
	ref     FlowRef
	rule    int
	gen     uint32 // the entry's policy generation
	pid     uint32
	veth    uint32
	uid     uint32
	comm    string
	firstNS uint64
	memo    FlowMemo // the tracker's (flowtrack.go)
}

// FlowReader reads the flow table: keys and owners from a scan of the
// table, repeated only when flows have come, gone or moved since, and
// counters from the memory-mapped counter array on every read. Its methods
// are safe for concurrent use; callbacks must not call back into it.
type FlowReader struct {
	d  *Datapath
	mu sync.Mutex
	// Scan state: the cursor and the policy generation at the scan.
	scanned bool
	cursor  uint64
	gen     uint32
	recs    []flowRec
	index   map[FlowKey]int // built on first Lookup after a scan
	comms   map[[16]int8]string
	gone    []flowRec // tracked flows gone from the table (flowtrack.go)
}

// NewFlowReader returns a reader of d's flow table.
func (d *Datapath) NewFlowReader() *FlowReader {
	return &FlowReader{d: d, comms: map[[16]int8]string{}}
}

// refresh rescans the table when the allocation cursor moved or the
// policy changed since the last scan: a flow classified again since the
// scan then was classified under the scan's policy (see flow). Called with
// r.mu held.
func (r *FlowReader) refresh(force bool) error {
	cur, gen := r.d.flowCursor(), r.d.Generation()
	if r.scanned && !force && cur == r.cursor && gen == r.gen {
		return nil
	}
	// A new slice: the trackers' memos move over from the old one
	// (carry).
	recs := make([]flowRec, 0, len(r.recs)+len(r.recs)/8+16)
	err := r.d.scanFlows(func(k *hostqosHqFlowKey, v *hostqosHqFlow) bool {
		recs = append(recs, r.rec(k, v))
		return true
	})
	if err != nil {
		return err
	}
	// Slot order makes the counter reads sequential (the cursor hands
	// slots out in order), which the CPU's prefetcher rewards.
	slices.SortFunc(recs, bySlot)
	r.carry(r.recs, recs)
	r.recs, r.cursor, r.gen, r.scanned, r.index = recs, cur, gen, true, nil
	if len(r.comms) > 4096 {
		r.comms = map[[16]int8]string{}
	}
	return nil
}

func (r *FlowReader) rec(k *hostqosHqFlowKey, v *hostqosHqFlow) flowRec {
	comm, ok := r.comms[v.Comm]
	if !ok {
		comm = commString(&v.Comm)
		r.comms[v.Comm] = comm
	}
	fr := flowRec{
		key: FlowKey{
			Proto:  k.Proto,
			Local:  netip.AddrPortFrom(addrFromWords(k.Family, &k.Src), k.Sport),
			Remote: netip.AddrPortFrom(addrFromWords(k.Family, &k.Dst), k.Dport),
		},
		ref: FlowRef{
			Slot: v.Cslot,
			Tag:  v.Tag,
			base: Counters{Packets: v.BasePackets, Bytes: v.BaseBytes, Drops: v.BaseDrops,
				RxPackets: v.BaseRxPackets, RxBytes: v.BaseRxBytes, RxDrops: v.BaseRxDrops},
			baseLast: v.BaseLastNs,
		},
		rule:    -1,
		gen:     v.Gen,
		pid:     v.Tgid,
		veth:    v.Veth,
		uid:     v.Uid,
		comm:    comm,
		firstNS: v.FirstNs,
	}
	if v.Slot != slotNone {
		fr.rule = int(v.Slot)
	}
	return fr
}

// flow completes a record of a scan made at policy generation gen with
// its live counters into *f.
func (m *fctrMem) flow(fr *flowRec, gen uint32, f *Flow) {
	f.Key = fr.key
	f.RuleSlot, f.Gen = fr.rule, fr.gen
	f.PID, f.UID, f.Comm = fr.pid, fr.uid, fr.comm
	f.Veth = int(fr.veth)
	f.FirstSeenNS = fr.firstNS
	f.Ref = fr.ref
	var c FlowCounters
	ok := false
	if m != nil {
		c, ok = m.read(&fr.ref)
	} else {
		c = FlowCounters{Counters: fr.ref.base, LastSeenNS: fr.ref.baseLast}
	}
	f.Counters, f.LastSeenNS = c.Counters, c.LastSeenNS
	if ok && c.RuleSlot != fr.rule {
		// Classified again since the scan: under the scan's policy, as
		// a newer one would have been scanned anew (refresh).
		f.RuleSlot, f.Gen = c.RuleSlot, gen
	}
}

// Scan rereads the flow table now, whether or not it changed.
func (r *FlowReader) Scan() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.refresh(true)
}

// Flows calls fn for every flow in the table until fn returns false. The
// table is rescanned only if flows came, went or moved since the last
// call; counters are always current.
func (r *FlowReader) Flows(fn func(Flow) bool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.refresh(false); err != nil {
		return err
	}
	m := r.d.fctr.Load()
	var f Flow
	for i := range r.recs {
		m.flow(&r.recs[i], r.gen, &f)
		if !fn(f) {
			return nil
		}
	}
	return nil
}

// Lookup returns the flow with key k, if the table holds it.
func (r *FlowReader) Lookup(k FlowKey) (Flow, bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.refresh(false); err != nil {
		return Flow{}, false, err
	}
	if r.index == nil {
		r.index = make(map[FlowKey]int, len(r.recs))
		for i := range r.recs {
			r.index[r.recs[i].key] = i
		}
	}
	i, ok := r.index[k]
	if !ok {
		return Flow{}, false, nil
	}
	var f Flow
	r.d.fctr.Load().flow(&r.recs[i], r.gen, &f)
	return f, true, nil
}

// Len is the number of flows found by the last scan.
func (r *FlowReader) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.recs)
}

// Flows calls fn for every flow in the flow table until fn returns false.
// Keys and owners come from a scan of the table (a BPF map iterator, batch
// lookups as a fallback) that is repeated only when flows came, went or
// changed counter slot since the previous call; counters are read from
// the memory-mapped counter array. fn must not call back into d.
func (d *Datapath) Flows(fn func(Flow) bool) error {
	d.readerMu.Lock()
	if d.reader == nil {
		d.reader = d.NewFlowReader()
	}
	r := d.reader
	d.readerMu.Unlock()
	return r.Flows(fn)
}

// flowsScanOnly calls fn for every flow with a fresh scan of the table
// (the pre-mmap read path; kept for the benchmark's comparison).
func (d *Datapath) flowsScanOnly(fn func(Flow) bool) error {
	r := d.NewFlowReader()
	m := d.fctr.Load()
	gen := d.Generation()
	return d.scanFlows(func(k *hostqosHqFlowKey, v *hostqosHqFlow) bool {
		fr := r.rec(k, v)
		var f Flow
		m.flow(&fr, gen, &f)
		return fn(f)
	})
}

// flowBatch is the number of flows read per batch syscall.
const flowBatch = 4096

// scanFlows calls fn with every entry of the flow tables (IPv4, then
// IPv6), keys in full form. It dumps the tables with BPF map iterators
// (falling back to batch lookups); the tables keep changing meanwhile, so
// a flow created or evicted during the dump may be missed. The pointers
// are only valid during the call.
func (d *Datapath) scanFlows(fn func(*hostqosHqFlowKey, *hostqosHqFlow) bool) error {
	if !d.noIter.Load() {
		err := d.dumpFlows(fn)
		if err == nil {
			return nil
		}
		d.iterFailed(err)
	}
	return d.flowsBatch(fn)
}

func (d *Datapath) flowsBatch(fn func(*hostqosHqFlowKey, *hostqosHqFlow) bool) error {
	more, err := batchFlows(d.objs.HqFlows4, "IPv4", key4Full, fn)
	if err != nil || !more {
		return err
	}
	_, err = batchFlows(d.objs.HqFlows6, "IPv6", func(k *hostqosHqFlowKey) hostqosHqFlowKey { return *k }, fn)
	return err
}

// key4Full turns an IPv4 flow table key into the full form.
func key4Full(k *hostqosHqFlowKey4) hostqosHqFlowKey {
	return hostqosHqFlowKey{
		Family: famIPv4,
		Proto:  k.Proto,
		Sport:  k.Sport,
		Dport:  k.Dport,
		Src:    [4]uint32{k.Saddr},
		Dst:    [4]uint32{k.Daddr},
	}
}

// batchFlows calls fn with every entry of flow table m (the name's
// family; keys of type K, turned into the full form by full). more is
// false when fn stopped.
func batchFlows[K any](m *ebpf.Map, name string, full func(*K) hostqosHqFlowKey, fn func(*hostqosHqFlowKey, *hostqosHqFlow) bool) (more bool, err error) {
	keys := make([]K, flowBatch)
	vals := make([]hostqosHqFlow, flowBatch)
	var cur ebpf.MapBatchCursor
	for {
		n, err := m.BatchLookup(&cur, keys, vals, nil)
		done := errors.Is(err, ebpf.ErrKeyNotExist)
		if err != nil && !done {
			if errors.Is(err, ebpf.ErrNotSupported) {
				return iterFlows(m, name, full, fn)
			}
			return false, fmt.Errorf("read %s flow table: %w", name, err)
		}
		for i := 0; i < n; i++ {
			k := full(&keys[i])
			if !fn(&k, &vals[i]) {
				return false, nil
			}
		}
		if done || n == 0 {
			return true, nil
		}
	}
}

func iterFlows[K any](m *ebpf.Map, name string, full func(*K) hostqosHqFlowKey, fn func(*hostqosHqFlowKey, *hostqosHqFlow) bool) (more bool, err error) {
	var k K
	var v hostqosHqFlow
	it := m.Iterate()
	for it.Next(&k, &v) {
		fk := full(&k)
		if !fn(&fk, &v) {
			return false, nil
		}
	}
	if err := it.Err(); err != nil {
		return false, fmt.Errorf("iterate %s flow table: %w", name, err)
	}
	return true, nil
}
