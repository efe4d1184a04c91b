package dpbench

import (
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"golang.org/x/sys/unix"

	"github.com/hostqos/hostqos/internal/datapath"
	"github.com/hostqos/hostqos/internal/lab/xdpgen"
)

// VethResult is the per-packet cost of a container's packet on its path
// (hq_veth_in at the host side of its veth, then the managed link's
// classifier, which only hands on the class hq_veth_in chose) beside a
// host process's (hq_tc_egress on the managed link), under one policy.
// Times are the kernel's (BPF_PROG_TEST_RUN), in ns.
type VethResult struct {
	Flows  int    // flow entries in the table during the runs
	Repeat uint32 // runs per hit measurement
	Firsts int    // distinct new flows per first-packet measurement

	EmptyNS float64 // an empty TC program
	// Flow hits (the steady state of a flow), Repeat runs on one frame.
	HostHitNS, VethHitNS float64
	// Single runs: on an existing flow (the baseline of a first packet)
	// and on a new flow (rule evaluation and flow insert), averaged over
	// Firsts frames.
	HostSingleNS, VethSingleNS float64
	HostFirstNS, VethFirstNS   float64
	// The managed link's classifier on a packet hq_veth_in classified
	// (skb->tc_index set): FastPathNS, reached by a tail call from a
	// program that sets tc_index, and TailEmptyNS, the same into an empty
	// program. FastPathNS - TailEmptyNS is the path's cost net of empty.
	FastPathNS, TailEmptyNS float64
}

// Policy of the veth measurements: nine rules no frame matches, then the
// container's (container 7, TCP to 198.19.0.0/16 → EF, class 0x101 of
// hostqos's HTB tree) and the host's (the same without the container).
const (
	vethContainer = 7
	vethSlotCtr   = 9
	vethSlotHost  = 10
	vethMinor     = 0x101
	fastMinor     = 0x202 // the class the tail-call wrapper hands on
	loIfindex     = 1     // a test-run's skb is on the loopback device
)

func vethPolicy() datapath.Policy {
	var p datapath.Policy
	for i := 0; i < 9; i++ {
		p.Rules = append(p.Rules, datapath.Rule{Slot: uint16(i), Proto: 17, RPortFrom: uint16(1000 + i), DSCPIn: -1, DSCP: 10})
	}
	class := uint32(datapath.HTBMajor)<<16 | vethMinor
	dst := netip.MustParsePrefix("198.19.0.0/16")
	p.Rules = append(p.Rules,
		datapath.Rule{Slot: vethSlotCtr, Cgroups: []datapath.CgroupRef{{ID: datapath.ContainerKey(vethContainer)}},
			Proto: 6, Remote: dst, DSCPIn: -1, DSCP: 46, ClassID: class},
		datapath.Rule{Slot: vethSlotHost, Proto: 6, Remote: dst, DSCPIn: -1, DSCP: 46, ClassID: class})
	return p
}

// vethFrame is a 64-byte-payload TCP frame 198.18.a.b:sport → 198.19.0.1:443
// (flows FillFlows4 never makes: its sources are 198.18.0.x).
func vethFrame(a, b byte, sport uint16) []byte {
	return xdpgen.BuildFrame(xdpgen.FrameSpec{Src: netip.AddrFrom4([4]byte{198, 18, a, b}), Dst: netip.MustParseAddr("198.19.0.1"),
		Proto: 6, SPort: sport, DPort: 443, Payload: 64})
}

// MeasureVeth loads a private datapath (OpenScratch) whose flow table
// holds flows entries and measures a container's and a host process's
// packet on it (Veth).
func MeasureVeth(flows int, repeat uint32, firsts int) (VethResult, error) {
	if flows < 1 || firsts < 1 {
		return VethResult{}, errors.New("measure veth per-packet cost: flows and firsts must be >= 1")
	}
	s, err := OpenScratch(max(datapath.DefaultFlowTable, 2*(flows+2*firsts)))
	if err != nil {
		return VethResult{}, err
	}
	defer s.Close()
	return Veth(s.DP, flows, repeat, firsts)
}

// Veth measures, under vethPolicy, among flows flow entries: hq_veth_in
// and hq_tc_egress on a flow hit (repeat runs, best of 3) and on firsts
// new flows (single runs, beside single runs on a hit), and the managed
// link's classifier on a packet classified at a veth. The test-run's
// skb is on the loopback device, so the veth measured is ifindex 1, given
// container 7's identity. It replaces d's policy and checks that each
// program took the path it is timed for (rule counters, the class handed
// on).
func Veth(d *datapath.Datapath, flows int, repeat uint32, firsts int) (VethResult, error) {
	if repeat == 0 {
		repeat = 1_000_000
	}
	res := VethResult{Flows: flows, Repeat: repeat, Firsts: firsts}
	if err := d.Apply(vethPolicy()); err != nil {
		return res, err
	}
	if err := d.SetVethIdentity(loIfindex, datapath.Identity{Container: vethContainer}); err != nil {
		return res, err
	}
	class := uint32(datapath.HTBMajor)<<16 | vethMinor
	if err := d.FillFlows4(flows-1, datapath.FlowFill{Slot: vethSlotHost, DSCP: 46, ClassID: class}); err != nil {
		return res, err
	}
	host, err := egressProgram(d)
	if err != nil {
		return res, err
	}
	defer host.Close()
	veth, err := vethInProgram(d)
	if err != nil {
		return res, err
	}
	defer veth.Close()
	hostRun, vethRun := programTimer(host), programTimer(veth)

	// Hits: one flow each (the first run inserts it).
	hostFrame, vethFrame0 := vethFrame(1, 1, 40000), vethFrame(1, 2, 40000)
	before, err := d.RuleCounters()
	if err != nil {
		return res, err
	}
	if _, _, err := hostRun(hostFrame, 1); err != nil {
		return res, err
	}
	if _, _, err := vethRun(vethFrame0, 1); err != nil {
		return res, err
	}
	if res.EmptyNS, err = emptyNS(hostFrame, repeat); err != nil {
		return res, err
	}
	if res.HostHitNS, err = bestOf3("hq_tc_egress", hostRun, hostFrame, repeat); err != nil {
		return res, err
	}
	if res.VethHitNS, err = bestOf3("hq_veth_in", vethRun, vethFrame0, repeat); err != nil {
		return res, err
	}
	after, err := d.RuleCounters()
	if err != nil {
		return res, err
	}
	hits := func(slot int) uint64 { return after[slot].Packets - before[slot].Packets }
	if want := 1 + 3*uint64(repeat); hits(vethSlotCtr) != want || hits(vethSlotHost) != want {
		return res, fmt.Errorf("measure veth per-packet cost: the container's rule counted %d packets and the host's %d, want %d each (each program on its own rule)",
			hits(vethSlotCtr), hits(vethSlotHost), want)
	}

	// First packets: distinct new flows, single runs, beside single runs
	// on the hit.
	single := func(run timeFunc, frame func(i int) []byte) (float64, error) {
		var total time.Duration
		for i := 0; i < firsts; i++ {
			v, dur, err := run(frame(i), 1)
			if err != nil {
				return 0, err
			}
			if v != datapath.VerdictNext {
				return 0, fmt.Errorf("measure veth per-packet cost: verdict %d, want %d (pass)", v, datapath.VerdictNext)
			}
			total += dur
		}
		return float64(total.Nanoseconds()) / float64(firsts), nil
	}
	// Sources 198.18.100+.x for the host's new flows, 198.18.150+.x for
	// the container's (firsts <= 50*256).
	newFlow := func(base int) func(i int) []byte {
		return func(i int) []byte { return vethFrame(byte(base+i>>8), byte(i), uint16(30000+i%20000)) }
	}
	if firsts > 50*256 {
		return res, errors.New("measure veth per-packet cost: at most 12800 first packets")
	}
	if res.HostSingleNS, err = single(hostRun, func(int) []byte { return hostFrame }); err != nil {
		return res, err
	}
	if res.HostFirstNS, err = single(hostRun, newFlow(100)); err != nil {
		return res, err
	}
	if res.VethSingleNS, err = single(vethRun, func(int) []byte { return vethFrame0 }); err != nil {
		return res, err
	}
	if res.VethFirstNS, err = single(vethRun, newFlow(150)); err != nil {
		return res, err
	}

	// The managed link's classifier on a packet classified at a veth.
	if res.FastPathNS, res.TailEmptyNS, err = fastPath(host, hostFrame, repeat); err != nil {
		return res, err
	}
	return res, nil
}

// egressProgram is the datapath's Ethernet egress classifier (a copy of
// its descriptor).
func egressProgram(d *datapath.Datapath) (*ebpf.Program, error) {
	p, err := d.EgressProgram().Clone()
	if err != nil {
		return nil, fmt.Errorf("open hq_tc_egress: %w", err)
	}
	return p, nil
}

// vethInProgram is the classifier of a container's packets (its own
// descriptor).
func vethInProgram(d *datapath.Datapath) (*ebpf.Program, error) {
	fd, _, _, _, err := d.VethProgramFDs()
	if err != nil {
		return nil, err
	}
	return programFromFD(fd, "hq_veth_in")
}

func programFromFD(fd int, what string) (*ebpf.Program, error) {
	dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("duplicate the descriptor of %s: %w", what, err)
	}
	p, err := ebpf.NewProgramFromFD(dup)
	if err != nil {
		unix.Close(dup)
		return nil, fmt.Errorf("open %s: %w", what, err)
	}
	return p, nil
}

func emptyNS(frame []byte, repeat uint32) (float64, error) {
	empty, err := emptyTCProgram()
	if err != nil {
		return 0, err
	}
	defer empty.Close()
	return bestOf3("the empty TC program", programTimer(empty), frame, repeat)
}

// fastPath times target on a packet whose skb->tc_index says it was
// classified at a container's veth: a program sets tc_index and tail-calls
// target, and the same into an empty program is the baseline. A test-run
// cannot set tc_index itself (its context refuses the field), and the
// repeats reuse one skb. It checks that target handed on the class of
// tc_index (skb->priority), which only that path does.
func fastPath(target *ebpf.Program, frame []byte, repeat uint32) (fast, base float64, err error) {
	empty, err := emptyTCProgram()
	if err != nil {
		return 0, 0, err
	}
	defer empty.Close()
	for i, callee := range []*ebpf.Program{target, empty} {
		wrapper, progs, err := tailCaller(callee)
		if err != nil {
			return 0, 0, err
		}
		ns, err := func() (float64, error) {
			defer wrapper.Close()
			defer progs.Close()
			if i == 0 {
				var out [48]uint32 // struct __sk_buff
				if _, err := wrapper.Run(&ebpf.RunOptions{Data: frame, ContextOut: &out}); err != nil {
					return 0, fmt.Errorf("test-run the managed link's classifier on a classified packet: %w", err)
				}
				if got, want := out[8], uint32(datapath.HTBMajor)<<16|fastMinor; got != want {
					return 0, fmt.Errorf("the managed link's classifier on a packet classified at a veth: skb->priority %#x, want %#x (the class of its tc_index)", got, want)
				}
			}
			return bestOf3("the tc_index path", programTimer(wrapper), frame, repeat)
		}()
		if err != nil {
			return 0, 0, err
		}
		if i == 0 {
			fast = ns
		} else {
			base = ns
		}
	}
	return fast, base, nil
}

// tailCaller is a TC program that sets skb->tc_index to fastMinor (a
// packet classified at a container's veth, handing class fastMinor on)
// and tail-calls callee (through the program array
// it returns, which the caller closes).
func tailCaller(callee *ebpf.Program) (*ebpf.Program, *ebpf.Map, error) {
	progs, err := ebpf.NewMap(&ebpf.MapSpec{Name: "hq_bench_tail", Type: ebpf.ProgramArray, KeySize: 4, ValueSize: 4, MaxEntries: 1})
	if err != nil {
		return nil, nil, fmt.Errorf("create program array: %w", err)
	}
	if err := progs.Put(uint32(0), callee); err != nil {
		progs.Close()
		return nil, nil, fmt.Errorf("put %v into the program array: %w", callee, err)
	}
	const tcIndexOff = 44 // offsetof(struct __sk_buff, tc_index)
	p, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name: "hq_bench_tci",
		Type: ebpf.SchedCLS,
		Instructions: asm.Instructions{
			asm.Mov.Imm32(asm.R2, fastMinor),
			asm.StoreMem(asm.R1, tcIndexOff, asm.R2, asm.Word),
			asm.LoadMapPtr(asm.R2, progs.FD()),
			asm.Mov.Imm(asm.R3, 0),
			asm.FnTailCall.Call(),
			asm.Mov.Imm(asm.R0, datapath.VerdictNext),
			asm.Return(),
		},
		License: "Dual BSD/GPL",
	})
	if err != nil {
		progs.Close()
		return nil, nil, fmt.Errorf("load the tc_index program: %w", err)
	}
	return p, progs, nil
}
