package datapath

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf"
)

// Running the classifiers on a frame with BPF_PROG_TEST_RUN, for tests and
// for the lab's per-packet benchmarks (internal/lab/dpbench): a verdict
// and the rewritten frame (TestRun), the kernel's own timing (TimeRun),
// and a flow table filled with synthetic flows to time a lookup among
// many (FillFlows4).

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

// EgressProgram is the Ethernet egress classifier (hq_tc_egress) itself,
// for the lab's benchmarks that run it from a program of their own (a
// tail call); the datapath keeps owning it (Clone it to keep it longer).
func (d *Datapath) EgressProgram() *ebpf.Program { return d.objs.HqTcEgress }

// TestRunIngress runs the Ethernet ingress classifier on frame once and
// returns its verdict and the frame after the program ran.
func (d *Datapath) TestRunIngress(frame []byte) (TestRunResult, error) {
	var out skBuff
	data := make([]byte, len(frame)+256)
	ret, err := d.objs.HqTcIngress.Run(&ebpf.RunOptions{
		Data:       frame,
		DataOut:    data,
		Context:    skBuff{},
		ContextOut: &out,
		Repeat:     1,
	})
	if err != nil {
		return TestRunResult{}, fmt.Errorf("test-run ingress classifier: %w", err)
	}
	return TestRunResult{Verdict: int32(ret), Packet: data[:len(frame)], Priority: out.Priority}, nil
}

// TimeRunIngress is TimeRun for the Ethernet ingress classifier.
func (d *Datapath) TimeRunIngress(frame []byte, repeat uint32) (verdict int32, perRun time.Duration, err error) {
	if repeat == 0 {
		repeat = 1
	}
	ret, dur, err := d.objs.HqTcIngress.Benchmark(frame, int(repeat), nil)
	if err != nil {
		return 0, 0, fmt.Errorf("time ingress classifier: %w", err)
	}
	return int32(ret), dur, nil
}

// VerdictNext is the classifiers' pass verdict (TestRunResult.Verdict,
// TimeRun): TCX_NEXT, hand the packet on.
const VerdictNext = tcxNext

// tcxNext is the classifier's pass verdict, HQ_TC_NEXT (TCX_NEXT, -1;
// the enum's BTF is unsigned, hence the conversion).
const tcxNext = int32(int64(hostqosHqVerdictHQ_TC_NEXT) - 1<<32)

// FlowFill is how FillFlows4 caches its flows: as matched by the rule of
// counter slot Slot, with that rule's action, DSCP and HTB class.
type FlowFill struct {
	Slot    uint16
	Action  Action
	DSCP    int8
	ClassID uint32
}

// FillFlows4 puts n synthetic IPv4 TCP flows into the flow table (i = 1…n:
// 198.18.(i>>16).(i>>8):i → 198.19.i.1:443, ports and bytes wrapping),
// cached at the current policy generation as f says, so that a benchmark
// times its own flow's lookup among n others. They have no counter slot
// and no socket; a policy change makes them stale like any flow.
func (d *Datapath) FillFlows4(n int, f FlowFill) error {
	v := hostqosHqFlow{Slot: f.Slot, Action: uint8(f.Action), Dscp: f.DSCP, Classid: f.ClassID}
	v.Gen = atomic.LoadUint32(&d.stateView().Gen)
	const chunk = 4096
	keys := make([]hostqosHqFlowKey4, 0, chunk)
	vals := make([]hostqosHqFlow, 0, chunk)
	for i := 1; i <= n; i++ {
		k := hostqosHqFlowKey4{Family: famIPv4, Proto: 6, Sport: uint16(i), Dport: 443}
		k.Saddr = binary.NativeEndian.Uint32([]byte{198, 18, byte(i >> 16), byte(i >> 8)})
		k.Daddr = binary.NativeEndian.Uint32([]byte{198, 19, byte(i), 1})
		keys = append(keys, k)
		vals = append(vals, v)
		if len(keys) == chunk || i == n {
			if _, err := d.objs.HqFlows4.BatchUpdate(keys, vals, nil); err != nil {
				return fmt.Errorf("fill flow table with %d flows: %w", n, err)
			}
			keys, vals = keys[:0], vals[:0]
		}
	}
	return nil
}
