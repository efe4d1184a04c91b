// Package dpbench measures the datapath's classifiers per packet with
// BPF_PROG_TEST_RUN on a private datapath (its own pin directory under
// bpffs), and holds the policies those measurements time: the tooling of
// the lab's datapath, ingress, resv-cost and scale benchmarks
// (internal/lab/bench), kept out of the datapath package. Everything here
// needs root.
package dpbench

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/hostqos/hostqos/internal/datapath"
	"github.com/hostqos/hostqos/internal/lab/xdpgen"
)

// Scratch is a private datapath for in-process test-runs, pinned in its
// own directory under bpffs.
type Scratch struct {
	DP  *datapath.Datapath
	dir string
}

// OpenScratch loads a private datapath whose flow table holds flowTable
// entries (0: the default).
func OpenScratch(flowTable int) (*Scratch, error) {
	var b [6]byte
	_, _ = rand.Read(b[:])
	dir := filepath.Join(filepath.Dir(datapath.DefaultBPFFSDir), "hqbench-"+hex.EncodeToString(b[:]))
	dp, err := datapath.Open(datapath.Options{BPFFSDir: dir, FlowTableSize: flowTable})
	if err != nil {
		_ = datapath.Remove(dir)
		return nil, fmt.Errorf("load a private datapath: %w", err)
	}
	return &Scratch{DP: dp, dir: dir}, nil
}

// Close unloads the datapath and removes its pins.
func (s *Scratch) Close() {
	s.DP.Close()
	_ = datapath.Remove(s.dir)
}

// PerPacketResult is the per-packet cost of a classifier, measured with
// BPF_PROG_TEST_RUN on a packet that hits an existing flow entry and a
// rule that sets DSCP, classid and counts.
type PerPacketResult struct {
	Flows        int     // flow entries in the table during the run
	Repeat       uint32  // runs per measurement
	EmptyNS      float64 // an empty TC program (returns TCX_NEXT)
	ClassifierNS float64 // hostqos classifier
	NetNS        float64 // ClassifierNS - EmptyNS
}

// MeasurePerPacket loads a private datapath (OpenScratch, closed
// afterwards) with a flow table for flows entries and measures the egress
// classifier on it (PerPacket).
func MeasurePerPacket(flows int, repeat uint32, police bool) (PerPacketResult, error) {
	return onScratch(flows, func(d *datapath.Datapath) (PerPacketResult, error) { return PerPacket(d, flows, repeat, police) })
}

// MeasureIngressPerPacket is MeasurePerPacket for the ingress classifier
// (IngressPerPacket).
func MeasureIngressPerPacket(flows int, repeat uint32, limit bool) (PerPacketResult, error) {
	return onScratch(flows, func(d *datapath.Datapath) (PerPacketResult, error) { return IngressPerPacket(d, flows, repeat, limit) })
}

func onScratch(flows int, measure func(*datapath.Datapath) (PerPacketResult, error)) (PerPacketResult, error) {
	if flows < 1 {
		return PerPacketResult{}, errors.New("measure per-packet cost: flows must be >= 1")
	}
	s, err := OpenScratch(max(datapath.DefaultFlowTable, flows*2))
	if err != nil {
		return PerPacketResult{}, err
	}
	defer s.Close()
	return measure(s.DP)
}

// PerPacket fills d's flow table with flows entries and measures the
// egress classifier's cost per packet on a flow-table hit, net of an empty
// program (repeat runs per measurement, 0: a million). The test-run
// repeats reuse one skb, so after the first run the DSCP already has its
// target value: the measured path includes lookup, counting and
// skb->priority but not the DSCP write and checksum fix (a few ns). With
// police, the matching rule also has a policer (at 100 gbit, so every
// packet conforms and is charged: the full policing path). It replaces
// d's policy.
func PerPacket(d *datapath.Datapath, flows int, repeat uint32, police bool) (PerPacketResult, error) {
	return perPacket(d, flows, repeat, police, false)
}

// MeasurePerPacketFQ is MeasurePerPacket with flow queueing on (the
// matching rule's class a class's general leaf, which the classifier turns
// into a sparse leaf or a flow bucket per packet: bpf/fq.h).
func MeasurePerPacketFQ(flows int, repeat uint32) (PerPacketResult, error) {
	return onScratch(flows, func(d *datapath.Datapath) (PerPacketResult, error) { return perPacket(d, flows, repeat, false, true) })
}

func perPacket(d *datapath.Datapath, flows int, repeat uint32, police, fq bool) (PerPacketResult, error) {
	if flows < 1 {
		return PerPacketResult{}, errors.New("measure per-packet cost: flows must be >= 1")
	}
	if repeat == 0 {
		repeat = 1_000_000
	}
	// Ten rules; the packet matches the last one.
	var p datapath.Policy
	for i := 0; i < 9; i++ {
		p.Rules = append(p.Rules, datapath.Rule{Slot: uint16(i), Proto: 17, RPortFrom: uint16(1000 + i), DSCPIn: -1, DSCP: 10})
	}
	last := datapath.Rule{Slot: 9, Proto: 6, Remote: netip.MustParsePrefix("198.18.0.0/15"), DSCPIn: -1, DSCP: 46, ClassID: 0x10010}
	action := datapath.ActPass
	if police {
		last.PoliceRate, last.PoliceBurst = 100e9, 1<<30
		action = datapath.ActPolice
	}
	if fq {
		// Class 1's general leaf; the default class is class 0.
		last.ClassID = uint32(datapath.HTBMajor)<<16 | 0x41
		p.FlowQueueDefault = 0x40
	}
	p.Rules = append(p.Rules, last)
	if err := d.Apply(p); err != nil {
		return PerPacketResult{}, err
	}
	src := netip.MustParseAddr("198.18.0.1")
	dst := netip.MustParseAddr("198.19.0.1")
	frame := xdpgen.BuildFrame(xdpgen.FrameSpec{Src: src, Dst: dst, Proto: 6, SPort: 40000, DPort: 443, Payload: 64})

	// Populate the table with other flows at the current generation.
	if err := d.FillFlows4(flows-1, datapath.FlowFill{Slot: 9, Action: action, DSCP: 46, ClassID: last.ClassID}); err != nil {
		return PerPacketResult{}, err
	}
	// First run inserts the measured flow; the rest hit it.
	if _, err := d.TestRun(frame, 1); err != nil {
		return PerPacketResult{}, err
	}
	return timeNet(PerPacketResult{Flows: flows, Repeat: repeat}, frame, d.TimeRun)
}

// IngressPerPacket is PerPacket for the TC ingress classifier: a received
// frame (198.19.0.1:443 → 198.18.0.1:40000) whose flow is in the table
// among flows entries, matching the last of ten rules (counted on the
// receive side). With limit, that rule also has a download limit
// (maxbw_in at 100 gbit: the estimator's accounting on every packet, as
// for TCP under a limit).
func IngressPerPacket(d *datapath.Datapath, flows int, repeat uint32, limit bool) (PerPacketResult, error) {
	if flows < 1 {
		return PerPacketResult{}, errors.New("measure ingress per-packet cost: flows must be >= 1")
	}
	if repeat == 0 {
		repeat = 1_000_000
	}
	var p datapath.Policy
	for i := 0; i < 9; i++ {
		p.Rules = append(p.Rules, datapath.Rule{Slot: uint16(i), Proto: 17, RPortFrom: uint16(1000 + i), DSCPIn: -1, DSCP: 10})
	}
	last := datapath.Rule{Slot: 9, Proto: 6, Remote: netip.MustParsePrefix("198.19.0.0/16"), DSCPIn: -1, DSCP: 46, ClassID: 0x10010}
	if limit {
		last.MaxBWIn = 100e9
	}
	p.Rules = append(p.Rules, last)
	if err := d.Apply(p); err != nil {
		return PerPacketResult{}, err
	}
	if err := d.FillFlows4(flows-1, datapath.FlowFill{Slot: 9, DSCP: 46, ClassID: 0x10010}); err != nil {
		return PerPacketResult{}, err
	}
	frame := xdpgen.BuildFrame(xdpgen.FrameSpec{Src: netip.MustParseAddr("198.19.0.1"), Dst: netip.MustParseAddr("198.18.0.1"),
		Proto: 6, SPort: 443, DPort: 40000, Payload: 64})
	// The first run inserts the measured flow; the rest hit it.
	if _, err := d.TestRunIngress(frame); err != nil {
		return PerPacketResult{}, err
	}
	return timeNet(PerPacketResult{Flows: flows, Repeat: repeat}, frame, d.TimeRunIngress)
}

// timeFunc runs a program on frame repeat times and returns its verdict
// and the kernel's average time per run (datapath.Datapath.TimeRun).
type timeFunc func(frame []byte, repeat uint32) (int32, time.Duration, error)

// timeNet times run on frame (best of 3 runs of res.Repeat repetitions)
// and an empty TC program the same way, into res.
func timeNet(res PerPacketResult, frame []byte, run timeFunc) (PerPacketResult, error) {
	empty, err := emptyTCProgram()
	if err != nil {
		return PerPacketResult{}, err
	}
	defer empty.Close()
	if res.EmptyNS, err = bestOf3("the empty TC program", programTimer(empty), frame, res.Repeat); err != nil {
		return PerPacketResult{}, err
	}
	if res.ClassifierNS, err = bestOf3("the classifier", run, frame, res.Repeat); err != nil {
		return PerPacketResult{}, err
	}
	res.NetNS = res.ClassifierNS - res.EmptyNS
	return res, nil
}

// bestOf3 is the least of three kernel-timed averages of run on frame.
// Every run must take the pass path: a drop (say, by the policer) would
// time another path than the one reported.
func bestOf3(what string, run timeFunc, frame []byte, repeat uint32) (float64, error) {
	var least float64
	for i := 0; i < 3; i++ {
		verdict, dur, err := run(frame, repeat)
		if err != nil {
			return 0, err
		}
		if verdict != datapath.VerdictNext {
			return 0, fmt.Errorf("benchmark %s: verdict %d, want %d (pass)", what, verdict, datapath.VerdictNext)
		}
		if ns := float64(dur.Nanoseconds()); i == 0 || ns < least {
			least = ns
		}
	}
	return least, nil
}

// programTimer times prog the way datapath.Datapath.TimeRun times the
// classifier.
func programTimer(prog *ebpf.Program) timeFunc {
	return func(frame []byte, repeat uint32) (int32, time.Duration, error) {
		ret, dur, err := prog.Benchmark(frame, int(repeat), nil)
		if err != nil {
			return 0, 0, fmt.Errorf("time %s: %w", prog, err)
		}
		return int32(ret), dur, nil
	}
}

// emptyTCProgram is a TC program that passes everything: the baseline a
// classifier's cost is given net of.
func emptyTCProgram() (*ebpf.Program, error) {
	p, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name: "hq_empty",
		Type: ebpf.SchedCLS,
		Instructions: asm.Instructions{
			asm.Mov.Imm(asm.R0, datapath.VerdictNext),
			asm.Return(),
		},
		License: "Dual BSD/GPL",
	})
	if err != nil {
		return nil, fmt.Errorf("load empty TC program: %w", err)
	}
	return p, nil
}
