package datapath

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
)

// skBuff mirrors struct __sk_buff (uapi, 192 bytes), the context TestRun
// passes in and reads back.
type skBuff struct {
	Len            uint32
	PktType        uint32
	Mark           uint32
	QueueMapping   uint32
	Protocol       uint32
	VlanPresent    uint32
	VlanTci        uint32
	VlanProto      uint32
	Priority       uint32
	IngressIfindex uint32
	Ifindex        uint32
	TcIndex        uint32
	Cb             [5]uint32
	Hash           uint32
	TcClassid      uint32
	Data           uint32
	DataEnd        uint32
	NapiID         uint32
	Family         uint32
	RemoteIP4      uint32
	LocalIP4       uint32
	RemoteIP6      [4]uint32
	LocalIP6       [4]uint32
	RemotePort     uint32
	LocalPort      uint32
	DataMeta       uint32
	FlowKeys       uint64
	Tstamp         uint64
	WireLen        uint32
	GsoSegs        uint32
	Sk             uint64
	GsoSize        uint32
	TstampType     uint8
	_              [3]uint8
	Hwtstamp       uint64
}

// TestRunResult is the outcome of running the egress classifier on one
// packet with BPF_PROG_TEST_RUN.
type TestRunResult struct {
	Verdict  int32  // TCX verdict: -1 next (pass), 2 drop
	Packet   []byte // the packet after the program ran
	Priority uint32 // skb->priority after the program ran
}

// TestRun runs the Ethernet egress classifier on frame (starting with the
// Ethernet header) repeat times (>= 1) and returns its verdict, the possibly
// rewritten frame and skb->priority.
func (d *Datapath) TestRun(frame []byte, repeat uint32) (TestRunResult, error) {
	if repeat == 0 {
		repeat = 1
	}
	var out skBuff
	data := make([]byte, len(frame)+256)
	ret, err := d.objs.HqTcEgress.Run(&ebpf.RunOptions{
		Data:       frame,
		DataOut:    data,
		Context:    skBuff{},
		ContextOut: &out,
		Repeat:     repeat,
	})
	if err != nil {
		return TestRunResult{}, fmt.Errorf("test-run egress classifier: %w", err)
	}
	return TestRunResult{Verdict: int32(ret), Packet: data[:len(frame)], Priority: out.Priority}, nil
}

// TimeRun runs the Ethernet egress classifier on frame repeat times (>= 1)
// and returns its verdict and the kernel's own timing: the average duration
// of one run, which excludes the syscall and the time the task spent
// preempted.
func (d *Datapath) TimeRun(frame []byte, repeat uint32) (verdict int32, perRun time.Duration, err error) {
	if repeat == 0 {
		repeat = 1
	}
	ret, dur, err := d.objs.HqTcEgress.Benchmark(frame, int(repeat), nil)
	if err != nil {
		return 0, 0, fmt.Errorf("time egress classifier: %w", err)
	}
	return int32(ret), dur, nil
}

// PerPacketResult is the per-packet cost of the egress classifier,
// measured with BPF_PROG_TEST_RUN on a packet that hits an existing flow
// entry and a rule that sets DSCP, classid and counts.
type PerPacketResult struct {
	Flows        int     // flow entries in the table during the run
	Repeat       uint32  // runs per measurement
	EmptyNS      float64 // an empty TC program (returns TCX_NEXT)
	ClassifierNS float64 // hostqos egress classifier
	NetNS        float64 // ClassifierNS - EmptyNS
}

// MeasurePerPacket loads a private datapath (pinned in a temporary
// directory under /sys/fs/bpf, removed afterwards), fills its flow table
// with flows entries, and measures the classifier's cost per packet on a
// flow-table hit, net of an empty program. Needs root. The test-run
// repeats reuse one skb, so after the first run the DSCP already has its
// target value: the measured path includes lookup, counting and
// skb->priority but not the DSCP write and checksum fix (a few ns).
// With police, the matching rule also has a policer (at 100 gbit, so
// every packet conforms and is charged: the full policing path).
func MeasurePerPacket(flows int, repeat uint32, police bool) (PerPacketResult, error) {
	if flows < 1 {
		return PerPacketResult{}, errors.New("measure per-packet cost: flows must be >= 1")
	}
	if repeat == 0 {
		repeat = 1_000_000
	}
	d, done, err := openScratch(max(DefaultFlowTable, flows*2))
	if err != nil {
		return PerPacketResult{}, err
	}
	defer done()
	return d.measurePerPacket(flows, repeat, police)
}

// openScratch opens a private datapath (its own pin directory under
// bpffs, flow table of flowTable entries; 0: the default) for a
// benchmark; done closes it and removes its pins.
func openScratch(flowTable int) (d *Datapath, done func(), err error) {
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	dir := filepath.Join(defaultBPFFSMount, "hostqos-bench-"+hex.EncodeToString(rnd[:]))
	d, err = Open(Options{BPFFSDir: dir, FlowTableSize: flowTable})
	if err != nil {
		_ = Remove(dir)
		return nil, nil, err
	}
	return d, func() {
		d.Close()
		_ = Remove(dir)
	}, nil
}

// measurePerPacket is MeasurePerPacket on an open datapath whose flow
// table holds flows entries (the package's tests pass their shared one).
func (d *Datapath) measurePerPacket(flows int, repeat uint32, police bool) (PerPacketResult, error) {
	// Ten rules; the packet matches the last one.
	var p Policy
	for i := 0; i < 9; i++ {
		p.Rules = append(p.Rules, Rule{Slot: uint16(i), Proto: 17, RPortFrom: uint16(1000 + i), DSCPIn: -1, DSCP: 10})
	}
	last := Rule{Slot: 9, Proto: 6, Remote: netip.MustParsePrefix("198.18.0.0/15"), DSCPIn: -1, DSCP: 46, ClassID: 0x10010}
	action := ActPass
	if police {
		last.PoliceRate, last.PoliceBurst = 100e9, 1<<30
		action = ActPolice
	}
	p.Rules = append(p.Rules, last)
	if err := d.Apply(p); err != nil {
		return PerPacketResult{}, err
	}
	src := netip.MustParseAddr("198.18.0.1")
	dst := netip.MustParseAddr("198.19.0.1")
	frame := BuildFrame(FrameSpec{Src: src, Dst: dst, Proto: 6, SPort: 40000, DPort: 443, Payload: 64})

	// Populate the table with other flows at the current generation.
	v := hostqosHqFlow{Slot: 9, Action: uint8(action), Dscp: 46, Classid: 0x10010}
	if err := d.fillFlows4(flows, v); err != nil {
		return PerPacketResult{}, err
	}

	// First run inserts the measured flow; the rest hit it.
	if _, err := d.TestRun(frame, 1); err != nil {
		return PerPacketResult{}, err
	}
	return timeNet(PerPacketResult{Flows: flows, Repeat: repeat}, frame, d.objs.HqTcEgress)
}

// fillFlows4 puts flows-1 other IPv4 TCP flows with value v (at the current
// generation) into the flow table, so that a benchmark's flow is looked up
// among flows entries.
func (d *Datapath) fillFlows4(flows int, v hostqosHqFlow) error {
	v.Gen = atomic.LoadUint32(&d.stateView().Gen)
	const chunk = 4096
	keys := make([]hostqosHqFlowKey4, 0, chunk)
	vals := make([]hostqosHqFlow, 0, chunk)
	for i := 1; i < flows; i++ {
		k := hostqosHqFlowKey4{Family: famIPv4, Proto: 6, Sport: uint16(i), Dport: 443}
		k.Saddr = binary.NativeEndian.Uint32([]byte{198, 18, byte(i >> 16), byte(i >> 8)})
		k.Daddr = binary.NativeEndian.Uint32([]byte{198, 19, byte(i), 1})
		keys = append(keys, k)
		vals = append(vals, v)
		if len(keys) == chunk || i == flows-1 {
			if _, err := d.objs.HqFlows4.BatchUpdate(keys, vals, nil); err != nil {
				return fmt.Errorf("populate flow table: %w", err)
			}
			keys, vals = keys[:0], vals[:0]
		}
	}
	return nil
}

// timeNet times prog on frame (best of 3 runs of res.Repeat repetitions)
// and an empty TC program the same way, into res.
func timeNet(res PerPacketResult, frame []byte, prog *ebpf.Program) (PerPacketResult, error) {
	repeat := res.Repeat
	best := func(prog *ebpf.Program) (float64, error) {
		var min float64
		for i := 0; i < 3; i++ {
			ret, dur, err := prog.Benchmark(frame, int(repeat), nil)
			if err != nil {
				return 0, fmt.Errorf("time %s: %w", prog, err)
			}
			// Both programs must take the pass path: a drop (say, by the
			// policer) would time another path than the one reported.
			if int32(ret) != tcxNext {
				return 0, fmt.Errorf("benchmark program %s: verdict %d, want %d (pass)", prog, int32(ret), tcxNext)
			}
			ns := float64(dur.Nanoseconds())
			if i == 0 || ns < min {
				min = ns
			}
		}
		return min, nil
	}
	empty, err := emptyTCProgram()
	if err != nil {
		return PerPacketResult{}, err
	}
	defer empty.Close()
	if res.EmptyNS, err = best(empty); err != nil {
		return PerPacketResult{}, err
	}
	if res.ClassifierNS, err = best(prog); err != nil {
		return PerPacketResult{}, err
	}
	res.NetNS = res.ClassifierNS - res.EmptyNS
	return res, nil
}

// tcxNext is the classifier's pass verdict, HQ_TC_NEXT (TCX_NEXT, -1;
// the enum's BTF is unsigned, hence the conversion).
const tcxNext = int32(int64(hostqosHqVerdictHQ_TC_NEXT) - 1<<32)

func emptyTCProgram() (*ebpf.Program, error) {
	p, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name: "hq_empty",
		Type: ebpf.SchedCLS,
		Instructions: asm.Instructions{
			asm.Mov.Imm(asm.R0, tcxNext),
			asm.Return(),
		},
		License: "Dual BSD/GPL",
	})
	if err != nil {
		return nil, fmt.Errorf("load empty TC program: %w", err)
	}
	return p, nil
}
