package datapath

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/hostqos/hostqos/internal/datapath/pin"
)

// Limits of the datapath. They are defined once, in C (enum hq_limits in
// bpf/include/hostqos.h), and reach Go through the bpf2go bindings.
const (
	MaxRules         = int(hostqosHqLimitsHQ_MAX_RULES)     // rule slots, and rules per policy
	MaxAppRules      = int(hostqosHqLimitsHQ_MAX_APP_RULES) // rules with at least one app selector
	DefaultFlowTable = int(hostqosHqLimitsHQ_FLOW_ENTRIES)  // entries of each flow table
	abiVersion       = uint32(hostqosHqLimitsHQ_ABI_VERSION)
	slotNone         = uint16(hostqosHqLimitsHQ_SLOT_NONE)
	cgLevels         = int(hostqosHqLimitsHQ_CG_LEVELS)
	// Keys of the app-selector maps per policy buffer (two buffers share
	// each map).
	maxExeKeys    = int(hostqosHqLimitsHQ_EXE_ENTRIES) / 2
	maxCommKeys   = int(hostqosHqLimitsHQ_COMM_ENTRIES) / 2
	maxUIDKeys    = int(hostqosHqLimitsHQ_UID_ENTRIES) / 2
	maxCgroupKeys = int(hostqosHqLimitsHQ_CG_ENTRIES) / 2
)

const (
	stateMapName    = "hq_policy"
	metaMapName     = "hq_meta"
	sockCreateLink  = "sock_create"
	tcxEgressPrefix = "tcx_egress_"
	DefaultBPFFSDir = pin.DefaultDir
)

// Datapath is a loaded (or adopted) set of hostqos BPF objects.
type Datapath struct {
	mu sync.Mutex
	// rxMu guards the buffers of addRxRuleCounters.
	rxMu   sync.Mutex
	rxKeys []uint32
	rxVals []hostqosHqCounters
	span   ruleSpan // rulectr.go
	dir    string
	log    *slog.Logger
	objs   hostqosObjects
	state  *ebpf.Map   // pinned .bss (struct hq_state)
	mem    []byte      // mmap of state
	sock   link.Link   // nil when not attached by us
	hooks  []link.Link // session hooks (connect, sendmsg, sock_release)
	tcx    map[int]link.Link
	tcxIn  map[int]link.Link // ingress classifier links (ingress.go)
	// Container veth classifier links (veth.go): TCX ingress, egress.
	tcxVethIn, tcxVethOut map[int]link.Link
	// What hq_veth and hq_cnetns hold (nil: not read yet; veth.go),
	// guarded by ctrMu, so that a change writes what differs instead of
	// reading the maps whole.
	ctrMu  sync.Mutex
	veths  map[uint32]bool
	cnetns map[uint64]uint32
	// inLast is the download limit last written per rule slot (nil =
	// unknown); guarded by mu.
	inLast map[uint16]inLimit
	// bufs is what Apply last wrote to each policy buffer (nil =
	// unknown: adopted, or a write failed); guarded by mu.
	bufs [2]*bufState
	// placed is the position of each rule slot in the last policy
	// applied (noPos: none; nil: none applied), see place.go; guarded by
	// mu.
	placed []uint32
	// resvBufs are the reservations Apply last wrote to each buffer of
	// hq_rule_resv, by rule slot (nil = unknown; see writeResv).
	resvBufs [2]map[uint16]hostqosHqResv
	adopted  bool
	// Map iterators for Flows (IPv4 and IPv6 tables) and RuleCounters,
	// attached on first use; guarded by mu.
	flowIter4, flowIter6, ctrIter *link.Iter
	dumpBuf                       []uint64    // read buffer of the iterators (1 MiB)
	noIter                        atomic.Bool // iterators unavailable: use batch lookups
	ncpu                          int
	mountedBPFFS                  string // where Open mounted a bpffs ("" if none)
	flowMax                       uint32 // entries of each flow table (IPv4, IPv6)
	// Flow counter slots (hq_fctr), memory-mapped read-only; nil after
	// Close. The mapping is released when no reader holds it any more.
	fctr  atomic.Pointer[fctrMem]
	fctrN uint32
	// The qsocket table (hq_qsock), memory-mapped read-write on first use
	// (qsock.go).
	qmem   atomic.Pointer[qsockMem]
	qmemMu sync.Mutex
	// netnsCookie is the network namespace the datapath serves.
	netnsCookie uint64
	// loops is the loop variant loaded (features.go); mptcp: the kernel
	// has bpf_skc_to_mptcp_sock.
	loops string
	mptcp bool
	// reader serves Flows; guarded by readerMu.
	readerMu sync.Mutex
	reader   *FlowReader
	// lazy loads the programs verified on first use; progDir is where
	// the verified programs are pinned (load.go).
	lazy    *lazyLoader
	progDir string
}

// meta is the value of the pinned hq_meta map: it tells a later Open what
// layout the pinned maps have and which network namespace they serve.
type meta struct {
	Version     uint32
	Pad         uint32
	NetnsCookie uint64
}

// Open loads the programs and maps, adopting pinned ones under opts.BPFFSDir
// so that a restarted daemon takes over without a gap, and attaches the
// sock_create program to opts.CgroupPath (scoped to the caller's netns).
// An empty CgroupPath leaves sock_create unattached (tests, forwarders).
func Open(opts Options) (_ *Datapath, err error) {
	dir := opts.BPFFSDir
	if dir == "" {
		dir = DefaultBPFFSDir
	}
	dir = filepath.Clean(dir)
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	d := &Datapath{
		dir:   dir,
		log:   log.With("component", "datapath"),
		tcx:   map[int]link.Link{},
		tcxIn: map[int]link.Link{},

		tcxVethIn:  map[int]link.Link{},
		tcxVethOut: map[int]link.Link{},
	}
	defer func() {
		if err != nil {
			d.Close()
		}
	}()

	if d.mountedBPFFS, err = pin.Prepare(d.log, dir); err != nil {
		return nil, err
	}
	cookie, err := NetnsCookie()
	if err != nil {
		return nil, err
	}
	d.netnsCookie = cookie
	if d.ncpu, err = ebpf.PossibleCPU(); err != nil {
		return nil, fmt.Errorf("count possible CPUs: %w", err)
	}
	if d.loops, err = ResolveLoops(opts.Loops); err != nil {
		return nil, err
	}
	if d.mptcp = HaveMPTCPHelper(); !d.mptcp {
		d.log.Warn("the kernel has no bpf_skc_to_mptcp_sock (Linux 5.19): MPTCP subflows, such as the accepted TCP connections of Go servers, get no app identity; flow rules still match them")
	}

	// Pinned state from a previous run?
	metaPin := filepath.Join(dir, metaMapName)
	metaMap, err := ebpf.LoadPinnedMap(metaPin, nil)
	switch {
	case err == nil:
		defer metaMap.Close()
		var m meta
		if err := metaMap.Lookup(uint32(0), &m); err != nil {
			return nil, fmt.Errorf("read pinned %s: %w", metaPin, err)
		}
		if m.Version != abiVersion {
			return nil, fmt.Errorf("adopt pinned state in %s: layout version %d, this build uses %d (run `hostqos down` to remove the old state)", dir, m.Version, abiVersion)
		}
		if m.NetnsCookie != cookie {
			return nil, fmt.Errorf("adopt pinned state in %s: it serves another network namespace (cookie %d, ours %d); use another BPFFS dir or run `hostqos down` there", dir, m.NetnsCookie, cookie)
		}
		d.adopted = true
	case errors.Is(err, os.ErrNotExist):
		metaMap = nil
	default:
		return nil, fmt.Errorf("open pinned %s: %w", metaPin, err)
	}

	spec, err := loadHostqos()
	if err != nil {
		return nil, fmt.Errorf("parse BPF object: %w", err)
	}
	// The generated specs name every map, program and variable, so the
	// compiler checks the names this loader uses.
	var specs hostqosSpecs
	if err := spec.Assign(&specs); err != nil {
		return nil, fmt.Errorf("parse BPF object: %w", err)
	}

	// Flow table size: each address family has a table of this size (the
	// IPv4 one has a shorter key, which hashes faster), so a flood of one
	// family never evicts the other's flows. A pinned table keeps its size.
	d.flowMax = specs.HqFlows4.MaxEntries
	if opts.FlowTableSize > 0 {
		d.flowMax = uint32(opts.FlowTableSize)
	}
	if fm, err := ebpf.LoadPinnedMap(filepath.Join(dir, specs.HqFlows4.Name), nil); err == nil {
		if fm.MaxEntries() != d.flowMax && opts.FlowTableSize > 0 {
			d.log.Warn("pinned flow table keeps its size", "pinned", fm.MaxEntries(), "requested", d.flowMax)
		}
		d.flowMax = fm.MaxEntries()
		fm.Close()
	}
	specs.HqFlows4.MaxEntries = d.flowMax
	specs.HqFlows6.MaxEntries = d.flowMax
	// As many counter slots as both tables hold flows together. Usually
	// one family dominates, so most slots are free or belong to flows gone
	// from the tables and allocation rarely takes a slot over from a live
	// flow; when both tables are full, takeovers keep counts exact (the old
	// owner's counts move to its flow entry) at the price of more churn.
	// Twice this would halve churn in that case for twice the memory.
	d.fctrN = 2 * d.flowMax
	specs.HqFctr.MaxEntries = d.fctrN
	specs.HqFkey.MaxEntries = d.fctrN
	var vals []any // what the programs are loaded with (objectID)
	for _, v := range []struct {
		what string
		spec *ebpf.VariableSpec
		val  any
	}{
		{"counter slot count", specs.HqFctrN, d.fctrN},
		{"netns cookie", specs.HqNetnsCookie, cookie},
		{"tick length", specs.HqTickNs, tickNS()},
		{"CPU count", specs.HqNcpu, uint32(d.ncpu)},
		{"test clock", specs.HqTestClock, boolByte(opts.testClock)},
		{"loop variant", specs.HqBounded, boolByte(d.loops == LoopsBounded)},
		{"MPTCP helper switch", specs.HqMptcp, boolByte(d.mptcp)},
	} {
		if err := v.spec.Set(v.val); err != nil {
			return nil, fmt.Errorf("set %s: %w", v.what, err)
		}
		vals = append(vals, v.val)
	}
	d.progDir = filepath.Join(dir, progsDir, objectID(_HostqosBytes, vals))

	// The policy state is the program's .bss (the section of hq_policy);
	// pin it under our own name so the active policy survives a restart,
	// and never overwrite it on load.
	bssName := specs.HqPolicy.SectionName
	bss, ok := spec.Maps[bssName]
	if !ok {
		return nil, fmt.Errorf("parse BPF object: no %s section", bssName)
	}
	ss := bss.Copy()
	ss.Name = stateMapName
	ss.Pinning = ebpf.PinByName
	ss.Contents = nil
	ss.Flags |= unix.BPF_F_MMAPABLE
	d.state, err = ebpf.NewMapWithOptions(ss, ebpf.MapOptions{PinPath: dir})
	if err != nil {
		return nil, pin.Incompatible(stateMapName, err)
	}
	size := int(ss.ValueSize+4095) &^ 4095
	d.mem, err = unix.Mmap(d.state.FD(), 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mmap policy state: %w", err)
	}

	coll, err := d.loadObjects(spec, ebpf.CollectionOptions{
		Maps:            ebpf.MapOptions{PinPath: dir},
		MapReplacements: map[string]*ebpf.Map{bssName: d.state},
	}, func(name string) bool { return !lazyPrograms[name] }, d.adopted)
	if err != nil {
		return nil, d.loadError(err)
	}
	err = d.takeObjects(spec, coll)
	coll.Close()
	if err != nil {
		return nil, err
	}

	fm, err := mapFctr(d.objs.HqFctr, d.fctrN)
	if err != nil {
		return nil, err
	}
	d.fctr.Store(fm)

	if metaMap == nil {
		m, err := ebpf.NewMapWithOptions(&ebpf.MapSpec{
			Name:       metaMapName,
			Type:       ebpf.Array,
			KeySize:    4,
			ValueSize:  uint32(unsafe.Sizeof(meta{})),
			MaxEntries: 1,
			Pinning:    ebpf.PinByName,
		}, ebpf.MapOptions{PinPath: dir})
		if err != nil {
			return nil, fmt.Errorf("create %s: %w", metaMapName, err)
		}
		err = m.Put(uint32(0), meta{Version: abiVersion, NetnsCookie: cookie})
		m.Close()
		if err != nil {
			return nil, fmt.Errorf("write %s: %w", metaMapName, err)
		}
	}

	if err := d.attachSockCreate(opts.CgroupPath); err != nil {
		return nil, err
	}
	if err := d.attachSessionHooks(opts.CgroupPath); err != nil {
		return nil, err
	}
	if err := d.adoptTCX(); err != nil {
		return nil, err
	}
	d.log.Info("datapath ready", "dir", dir, "adopted", d.adopted, "flow_table", d.flowMax, "loops", d.loops, "mptcp_identity", d.mptcp)
	return d, nil
}

// Adopted reports whether Open took over pinned state from a previous run.
func (d *Datapath) Adopted() bool { return d.adopted }

// Dir is the pin directory.
func (d *Datapath) Dir() string { return d.dir }

// FlowTableSize is the number of entries of each flow table (one for IPv4
// flows, one for IPv6 flows).
func (d *Datapath) FlowTableSize() int { return int(d.flowMax) }

func (d *Datapath) attachSockCreate(cgroupPath string) error {
	path := filepath.Join(d.dir, pin.LinksDir, sockCreateLink)
	l, err := pin.Open(path)
	if err != nil {
		return err
	}
	if l != nil {
		if err := l.Update(d.objs.HqSockCreate); err != nil {
			l.Close()
			return fmt.Errorf("update sock_create program in pinned link %s: %w", path, err)
		}
		d.sock = l
		return nil
	}
	if cgroupPath == "" {
		return nil
	}
	l, err = link.AttachCgroup(link.CgroupOptions{
		Path:    cgroupPath,
		Attach:  ebpf.AttachCGroupInetSockCreate,
		Program: d.objs.HqSockCreate,
	})
	if err != nil {
		return fmt.Errorf("attach sock_create to cgroup %s: %w", cgroupPath, err)
	}
	if err := l.Pin(path); err != nil {
		l.Close()
		return fmt.Errorf("pin sock_create link %s: %w", path, err)
	}
	d.sock = l
	return nil
}

// adoptTCX takes over the pinned TCX links of a previous run, swapping in
// the freshly loaded program without detaching (no gap).
func (d *Datapath) adoptTCX() error {
	for _, k := range []struct {
		links pin.Links
		tcx   map[int]link.Link
		pick  func(int) (*ebpf.Program, error)
	}{
		{d.egressLinks(), d.tcx, d.egressProgram},
		{d.ingressLinks(), d.tcxIn, d.ingressProgram},
		{d.vethInLinks(), d.tcxVethIn, func(int) (*ebpf.Program, error) { return d.vethProgram(false) }},
		{d.vethOutLinks(), d.tcxVethOut, func(int) (*ebpf.Program, error) { return d.vethProgram(true) }},
	} {
		err := k.links.Adopt(d.log, func(ifindex int, path string, l link.Link) error {
			prog, err := k.pick(ifindex)
			if err != nil {
				return err
			}
			if err := l.Update(prog); err != nil {
				return fmt.Errorf("update program in pinned link %s: %w", path, err)
			}
			k.tcx[ifindex] = l
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// egressLinks are the pinned links of the TCX egress classifier.
func (d *Datapath) egressLinks() pin.Links {
	return pin.Links{Dir: d.dir, Prefix: tcxEgressPrefix, Type: link.TCXType, What: "egress"}
}

// egressProgram picks the classifier variant for the interface's link
// layer: Ethernet-like devices (6-byte hardware address, including
// loopback) carry a 14-byte header, tunnels and tun devices carry none.
func (d *Datapath) egressProgram(ifindex int) (*ebpf.Program, error) {
	if !hasEthernetHeader(ifindex) {
		egress, _, err := d.loadL3()
		return egress, err
	}
	return d.objs.HqTcEgress, nil
}

// hasEthernetHeader tells whether the packets of an interface carry an
// Ethernet header at the TC hooks (6-byte hardware address, loopback
// included); an interface that is gone counts as Ethernet.
func hasEthernetHeader(ifindex int) bool {
	ifi, err := net.InterfaceByIndex(ifindex)
	return err != nil || len(ifi.HardwareAddr) == 6
}

// AttachLink attaches the egress classifier to an interface (idempotent).
// It runs at the head of the interface's TCX egress chain and always lets
// later programs run (it only ends the chain for drop rules and policers).
func (d *Datapath) AttachLink(ifindex int) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if l, ok := d.tcx[ifindex]; ok {
		live, err := onHook(ifindex, l)
		if err != nil || live {
			// attached, or the kernel cannot say: keep what we have
			return d.attachIngress(ifindex)
		}
		// Someone detached our program from the hook: start afresh.
		delete(d.tcx, ifindex)
		_ = pin.Drop(l)
	}
	prog, err := d.egressProgram(ifindex)
	if err != nil {
		return err
	}
	l, err := link.AttachTCX(link.TCXOptions{
		Interface: ifindex,
		Program:   prog,
		Attach:    ebpf.AttachTCXEgress,
		Anchor:    link.Head(),
	})
	if err != nil {
		return fmt.Errorf("attach egress classifier to ifindex %d: %w", ifindex, err)
	}
	if err := d.egressLinks().Pin(l, ifindex); err != nil {
		return err
	}
	d.tcx[ifindex] = l
	return d.attachIngress(ifindex)
}

// LinkAttached reports whether this datapath's egress classifier is on the
// TCX egress hook of ifindex, as the kernel sees it now.
func (d *Datapath) LinkAttached(ifindex int) (bool, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	l, ok := d.tcx[ifindex]
	if !ok {
		return false, nil
	}
	return onHook(ifindex, l)
}

// onHook asks the kernel whether the program of link l is attached to the
// TCX egress hook of ifindex.
func onHook(ifindex int, l link.Link) (bool, error) {
	info, err := l.Info()
	if err != nil {
		return false, fmt.Errorf("read egress link of ifindex %d: %w", ifindex, err)
	}
	res, err := link.QueryPrograms(link.QueryOptions{Target: ifindex, Attach: ebpf.AttachTCXEgress})
	if err != nil {
		return false, fmt.Errorf("query TCX egress programs of ifindex %d: %w", ifindex, err)
	}
	for _, p := range res.Programs {
		if p.ID == info.Program {
			return true, nil
		}
	}
	return false, nil
}

// DetachLink removes hostqos's egress classifier from an interface.
func (d *Datapath) DetachLink(ifindex int) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	l, ok := d.tcx[ifindex]
	if !ok {
		var err error
		if l, err = d.egressLinks().Load(ifindex); err != nil {
			return err
		}
		if l == nil {
			return d.detachIngress(ifindex)
		}
	}
	delete(d.tcx, ifindex)
	return errors.Join(pin.Drop(l), d.detachIngress(ifindex))
}

// TagSocket records id for the socket behind fd unless it already has one.
// It reports whether it wrote an identity.
func (d *Datapath) TagSocket(fd int, id Identity) (bool, error) {
	v := identToBPF(id)
	err := d.objs.HqSkIdent.Update(int32(fd), &v, ebpf.UpdateNoExist)
	if errors.Is(err, ebpf.ErrKeyExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("tag a socket with its identity: %w", err)
	}
	return true, nil
}

// IdentityOf returns the identity stored with the socket behind fd; ok is
// false when the socket has none.
func (d *Datapath) IdentityOf(fd int) (id Identity, ok bool, err error) {
	var v hostqosHqIdent
	err = d.objs.HqSkIdent.Lookup(int32(fd), &v)
	if errors.Is(err, ebpf.ErrKeyNotExist) {
		return Identity{}, false, nil
	}
	if err != nil {
		return Identity{}, false, fmt.Errorf("read the identity of a socket: %w", err)
	}
	return identFromBPF(&v), true, nil
}

func identToBPF(id Identity) hostqosHqIdent {
	v := hostqosHqIdent{
		Tgid:   id.PID,
		Uid:    id.UID,
		ExeIno: id.Exe.Ino,
		ExeDev: id.Exe.Dev,
		Ctr:    id.Container,
	}
	putComm(&v.Comm, id.Comm)
	if n := len(id.Cgroups); n > 0 {
		v.CgLevel = uint32(n - 1)
		v.CgOwn = id.Cgroups[n-1]
		for i := 0; i < n && i < cgLevels; i++ {
			v.Cg[i] = id.Cgroups[i]
		}
	}
	return v
}

func identFromBPF(v *hostqosHqIdent) Identity {
	id := Identity{
		PID:  v.Tgid,
		UID:  v.Uid,
		Comm: commString(&v.Comm),
		Exe:  FileID{Dev: v.ExeDev, Ino: v.ExeIno},

		Container: v.Ctr,
	}
	n := int(v.CgLevel) + 1
	for i := 0; i < n && i < cgLevels; i++ {
		id.Cgroups = append(id.Cgroups, v.Cg[i])
	}
	if n > cgLevels {
		// Deeper than the kept levels: the own id closes the list.
		id.Cgroups = append(id.Cgroups, v.CgOwn)
	}
	return id
}

func putComm(dst *[16]int8, s string) {
	for i := 0; i < len(s) && i < 15; i++ {
		dst[i] = int8(s[i])
	}
}

func commString(c *[16]int8) string {
	b := make([]byte, 0, 16)
	for _, x := range c {
		if x == 0 {
			break
		}
		b = append(b, byte(x))
	}
	return string(b)
}

// RuleCounters returns cumulative counters indexed by rule slot (MaxRules
// entries), summed over CPUs. It dumps the per-CPU array with a BPF map
// iterator that sums in the kernel and skips idle slots (one read(2) for
// the whole array); without iterator support it falls back to one batch
// lookup.
func (d *Datapath) RuleCounters() ([]Counters, error) {
	var out []Counters
	if !d.noIter.Load() {
		out = make([]Counters, MaxRules)
		err := d.dumpRuleCounters(out)
		if err != nil {
			d.iterFailed(err)
			out = nil
		}
	}
	if out == nil {
		var err error
		if out, err = d.ruleCountersBatch(); err != nil {
			return nil, err
		}
	}
	if err := d.addRxRuleCounters(out); err != nil {
		return nil, err
	}
	return out, nil
}

// iterFailed falls back to batch lookups after a failed map-iterator dump:
// for good when the kernel cannot run the iterator, for this one read when
// the failure was for want of resources (descriptors, memory), which
// proves nothing about the kernel.
func (d *Datapath) iterFailed(err error) {
	for _, transient := range []error{unix.EMFILE, unix.ENFILE, unix.ENOMEM, unix.EAGAIN, unix.EINTR} {
		if errors.Is(err, transient) {
			d.log.Warn("map iterator failed for want of resources; batch lookups for this read", "err", err)
			return
		}
	}
	d.log.Warn("map iterator unavailable, using batch lookups", "err", err)
	d.noIter.Store(true)
}

func (d *Datapath) ruleCountersBatch() ([]Counters, error) {
	keys := make([]uint32, MaxRules)
	vals := make([]hostqosHqCounters, MaxRules*d.ncpu)
	var cur ebpf.MapBatchCursor
	n, err := d.objs.HqRuleCtr.BatchLookup(&cur, keys, vals, nil)
	if err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return nil, fmt.Errorf("read rule counters: %w", err)
	}
	out := make([]Counters, MaxRules)
	for i := 0; i < n; i++ {
		k := keys[i]
		if k >= uint32(MaxRules) {
			continue
		}
		for c := 0; c < d.ncpu; c++ {
			v := &vals[i*d.ncpu+c]
			out[k].Packets += v.Packets
			out[k].Bytes += v.Bytes
			out[k].Drops += v.Drops
		}
	}
	return out, nil
}

// Stats returns the datapath's health counters.
func (d *Datapath) Stats() (Stats, error) {
	vals := make([]hostqosHqStats, d.ncpu)
	if err := d.objs.HqHealth.Lookup(uint32(0), vals); err != nil {
		return Stats{}, fmt.Errorf("read datapath stats: %w", err)
	}
	var s Stats
	for _, v := range vals {
		s.Packets += v.Packets
		s.Classified += v.Classified
		s.FlowInsertFail += v.FlowInsertFail
		s.ParseErrors += v.ParseErrors
		s.NoIdentity += v.NoIdentity
		s.Evaluations += v.Evaluations
		s.Drops += v.Drops
		s.IdentityFail += v.IdentFail
		s.RxPackets += v.RxPackets
		s.RxClassified += v.RxClassified
		s.RxDrops += v.RxDrops
		s.RxParseErrors += v.RxParseErrors
		s.RxNoSocket += v.RxNoSocket
		s.RwndClamps += v.RwndClamps
		s.RxUnmatchedPackets += v.RxNonePackets
		s.RxUnmatchedBytes += v.RxNoneBytes
		s.RxUnmatchedDrops += v.RxNoneDrops
	}
	return s, nil
}

// stateView gives typed access to the mmapped policy state.
func (d *Datapath) stateView() *hostqosHqState {
	return (*hostqosHqState)(unsafe.Pointer(&d.mem[0]))
}

// Generation is the active policy generation (incremented by each Apply).
func (d *Datapath) Generation() uint32 {
	return atomic.LoadUint32(&d.stateView().Gen)
}

// Close releases file descriptors; pinned programs keep enforcing.
func (d *Datapath) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	for i, l := range d.tcx {
		l.Close()
		delete(d.tcx, i)
	}
	for _, m := range []map[int]link.Link{d.tcxIn, d.tcxVethIn, d.tcxVethOut} {
		for i, l := range m {
			l.Close()
			delete(m, i)
		}
	}
	for _, it := range []**link.Iter{&d.flowIter4, &d.flowIter6, &d.ctrIter} {
		if *it != nil {
			(*it).Close()
			*it = nil
		}
	}
	if d.sock != nil {
		d.sock.Close()
		d.sock = nil
	}
	for _, l := range d.hooks {
		l.Close()
	}
	d.hooks = nil
	d.qmem.Store(nil)
	if d.lazy != nil {
		d.lazy.mu.Lock()
		d.lazy.close()
		d.objs.Close()
		d.lazy.mu.Unlock()
	} else {
		d.objs.Close()
	}
	d.fctr.Store(nil)
	if d.mem != nil {
		_ = unix.Munmap(d.mem)
		d.mem = nil
	}
	if d.state != nil {
		d.state.Close()
		d.state = nil
	}
	return nil
}

// Remove detaches and unpins everything under bpffsDir that hostqos created,
// then removes the directory. It touches nothing outside bpffsDir.
func Remove(bpffsDir string) error {
	if bpffsDir == "" {
		bpffsDir = DefaultBPFFSDir
	}
	dir := filepath.Clean(bpffsDir)
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return fmt.Errorf("statfs %s: %w", dir, err)
	}
	if uint32(st.Type) != unix.BPF_FS_MAGIC {
		return fmt.Errorf("remove %s: not on a BPF filesystem, refusing", dir)
	}
	ldir := filepath.Join(dir, pin.LinksDir)
	ents, err := os.ReadDir(ldir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("list pinned links in %s: %w", ldir, err)
	}
	var errs []error
	for _, e := range ents {
		path := filepath.Join(ldir, e.Name())
		l, err := link.LoadPinnedLink(path, nil)
		if err != nil {
			// Not a link we can open: unpinning is all we can do.
			if err := os.Remove(path); err != nil {
				errs = append(errs, fmt.Errorf("remove pin %s: %w", path, err))
			}
			continue
		}
		if err := pin.Drop(l); err != nil {
			errs = append(errs, fmt.Errorf("remove link %s: %w", path, err))
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		errs = append(errs, fmt.Errorf("remove pins in %s: %w", dir, err))
	}
	return errors.Join(errs...)
}

// MountedBPFFS is where Open mounted a BPF file system for the pins because
// none was mounted there ("" if it did not): /sys/fs/bpf.
func (d *Datapath) MountedBPFFS() string { return d.mountedBPFFS }

// NetnsCookie returns the cookie of the calling thread's network namespace.
func NetnsCookie() (uint64, error) {
	// The socket must be created by the calling OS thread's netns.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, fmt.Errorf("create socket for netns cookie: %w", err)
	}
	defer unix.Close(fd)
	c, err := unix.GetsockoptUint64(fd, unix.SOL_SOCKET, unix.SO_NETNS_COOKIE)
	if err != nil {
		return 0, fmt.Errorf("read netns cookie: %w", err)
	}
	return c, nil
}
