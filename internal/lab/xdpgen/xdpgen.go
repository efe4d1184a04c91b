// Package xdpgen builds test frames (BuildFrame) and sends them with the
// kernel's own XDP packet generator: the frames and traffic of the
// datapath's BPF test-runs and of the lab's benchmarks (internal/lab/bench).
// It is tooling, not product: hostqosd does not link it.
//
// The generator is BPF_PROG_TEST_RUN of an XDP program that answers
// XDP_TX, in live-frame mode (BPF_F_TEST_XDP_LIVE_FRAMES, Linux ≥ 5.18).
// The kernel builds each frame from the template in a page pool and, since
// a test run has no driver to bounce it, turns XDP_TX into a redirect out
// of the context's ingress device: on a veth, the frame lands in the
// peer's receive ring as an XDP frame, with no socket, no skb and no qdisc
// on the way. It is the fastest generator this kernel offers without
// pktgen.
package xdpgen

import (
	"fmt"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// xdpActDrop, xdpActPass and xdpActTX are enum xdp_action values
// (uapi/linux/bpf.h).
const (
	xdpActDrop = 1
	xdpActPass = 2
	xdpActTX   = 3
)

// xdpMD is struct xdp_md as BPF_PROG_TEST_RUN takes it.
type xdpMD struct {
	Data, DataEnd, DataMeta, IngressIfindex, RxQueueIndex, EgressIfindex uint32
}

// Generator transmits copies of one frame out of a device, or (an
// injector) hands them to a device's receive path.
type Generator struct {
	prog     *ebpf.Program
	ifindex  int
	borrowed bool // prog belongs to someone else (Borrow)
}

// NewGenerator loads the generator for the device ifindex (in the calling
// thread's network namespace, where Send must run too). A veth's peer
// accepts XDP frames only in NAPI mode: with an XDP program of its own (see
// AttachPass) or GRO enabled.
func NewGenerator(ifindex int) (*Generator, error) {
	prog, err := returnProgram("hq_xdp_gen", xdpActTX)
	if err != nil {
		return nil, fmt.Errorf("load XDP generator: %w", err)
	}
	return &Generator{prog: prog, ifindex: ifindex}, nil
}

// NewInjector loads a generator whose frames enter ifindex's own receive
// path, as if its driver had received them: the kernel runs an XDP program
// that passes each one (the driver's XDP hook), builds an skb and hands it
// to the stack, where tc and nftables ingress hooks and sockets see it.
// Frames cross no veth and no ring, so the only cost on the way is the
// generator's own and what the receive path does.
func NewInjector(ifindex int) (*Generator, error) {
	prog, err := returnProgram("hq_xdp_inject", xdpActPass)
	if err != nil {
		return nil, fmt.Errorf("load XDP injector: %w", err)
	}
	return &Generator{prog: prog, ifindex: ifindex}, nil
}

// NewSink loads a generator whose frames reach ifindex's receive path and
// are dropped at once by an XDP_DROP program in the driver's place: the
// injector's own cost, the ceiling of what it can show.
func NewSink(ifindex int) (*Generator, error) {
	prog, err := returnProgram("hq_xdp_sink", xdpActDrop)
	if err != nil {
		return nil, fmt.Errorf("load XDP sink: %w", err)
	}
	return &Generator{prog: prog, ifindex: ifindex}, nil
}

// Borrow is an injector that runs prog, an XDP program someone else owns
// (the XDP shield's, xdp.Shield.XDPProgram), on live frames as if
// ifindex's driver had received them: what prog drops is counted as when
// it is attached, what it passes enters the stack. Close leaves prog
// loaded.
func Borrow(prog *ebpf.Program, ifindex int) *Generator {
	return &Generator{prog: prog, ifindex: ifindex, borrowed: true}
}

// Send transmits frame (Ethernet header first) n times, in batches of
// batch frames (0 = the kernel's 64), and returns how long the kernel took.
func (g *Generator) Send(frame []byte, n, batch uint32) (time.Duration, error) {
	ctx := xdpMD{IngressIfindex: uint32(g.ifindex), DataEnd: uint32(len(frame))}
	start := time.Now()
	_, err := g.prog.Run(&ebpf.RunOptions{
		Data:      frame,
		Context:   ctx,
		Repeat:    n,
		Flags:     unix.BPF_F_TEST_XDP_LIVE_FRAMES,
		BatchSize: batch,
	})
	el := time.Since(start)
	if err != nil {
		return el, fmt.Errorf("send %d frames with live-frame test runs on ifindex %d: %w", n, g.ifindex, err)
	}
	return el, nil
}

// Close unloads the generator (a borrowed program stays loaded).
func (g *Generator) Close() error {
	if g.borrowed {
		return nil
	}
	return g.prog.Close()
}

// AttachPass attaches an XDP program that passes everything to ifindex
// (native mode) and returns its detacher: it puts a veth into NAPI mode,
// so it accepts the generator's frames, at the cost of one trivial program
// run per packet.
func AttachPass(ifindex int) (func() error, error) {
	return attachReturn(ifindex, "hq_xdp_pass", xdpActPass)
}

// AttachDrop attaches an XDP program that drops everything to ifindex
// (native mode) and returns its detacher: the cheapest possible drop, the
// ceiling of what a generator into ifindex can show.
func AttachDrop(ifindex int) (func() error, error) {
	return attachReturn(ifindex, "hq_xdp_drop", xdpActDrop)
}

func attachReturn(ifindex int, name string, verdict int32) (func() error, error) {
	prog, err := returnProgram(name, verdict)
	if err != nil {
		return nil, fmt.Errorf("load XDP program %s: %w", name, err)
	}
	l, err := link.AttachXDP(link.XDPOptions{Program: prog, Interface: ifindex, Flags: link.XDPDriverMode})
	if err != nil {
		prog.Close()
		return nil, fmt.Errorf("attach XDP program %s to ifindex %d: %w", name, ifindex, err)
	}
	return func() error {
		err := l.Close()
		prog.Close()
		return err
	}, nil
}

// returnProgram is an XDP program that returns verdict.
func returnProgram(name string, verdict int32) (*ebpf.Program, error) {
	return ebpf.NewProgram(&ebpf.ProgramSpec{
		Name: name,
		Type: ebpf.XDP,
		Instructions: asm.Instructions{
			asm.Mov.Imm(asm.R0, verdict),
			asm.Return(),
		},
		License: "GPL",
	})
}
