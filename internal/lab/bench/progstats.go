package bench

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// progRun is a BPF program's run-time statistics as the kernel keeps them
// (kernel.bpf_stats_enabled): total run time and number of runs.
type progRun struct {
	ns, runs uint64
}

// sub is the run time and count between before and r.
func (r progRun) sub(before progRun) progRun {
	return progRun{ns: r.ns - before.ns, runs: r.runs - before.runs}
}

// perRun is the mean run time in ns, 0 without runs.
func (r progRun) perRun() float64 {
	if r.runs == 0 {
		return 0
	}
	return float64(r.ns) / float64(r.runs)
}

// enableProgStats turns on the kernel's BPF run-time statistics for as
// long as the returned closer is open (BPF_ENABLE_STATS: a reference, so
// it restores the previous state on close, even if we die, and does not
// undo anyone else's).
func enableProgStats() (io.Closer, error) {
	c, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		return nil, fmt.Errorf("enable BPF run-time statistics: %w", err)
	}
	return c, nil
}

// pinnedProgram opens the program of the first link pinned in bpffs's
// links directory under a name starting with prefix whose program is
// called name ("hq_tc_egress"): the classifier a daemon attached to its
// managed link.
func pinnedProgram(bpffs, prefix, name string) (*ebpf.Program, error) {
	dir := filepath.Join(bpffs, "links")
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("list pinned links in %s: %w", dir, err)
	}
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), prefix) {
			continue
		}
		l, err := link.LoadPinnedLink(filepath.Join(dir, e.Name()), nil)
		if err != nil {
			continue
		}
		info, err := l.Info()
		l.Close()
		if err != nil {
			continue
		}
		p, err := ebpf.NewProgramFromID(info.Program)
		if err != nil {
			continue
		}
		if pi, err := p.Info(); err == nil && pi.Name == name {
			return p, nil
		}
		p.Close()
	}
	return nil, fmt.Errorf("find program %s linked in %s: %w", name, dir, os.ErrNotExist)
}

// progStats reads p's run-time statistics.
func progStats(p *ebpf.Program) (progRun, error) {
	if p == nil {
		return progRun{}, errors.New("read program statistics: no program")
	}
	s, err := p.Stats()
	if err != nil {
		return progRun{}, fmt.Errorf("read program statistics: %w", err)
	}
	return progRun{ns: uint64(s.Runtime.Nanoseconds()), runs: s.RunCount}, nil
}

// emptyTC is an egress classifier that does nothing (TCX_NEXT), attached
// to iface in node: the floor of the in-traffic measurement (the program
// dispatch and the kernel's own timing of it).
type emptyTC struct {
	prog *ebpf.Program
	l    link.Link
}

func (t *emptyTC) up(node interface{ Do(func() error) error }, iface string) error {
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name:    "hqb_empty_tc",
		Type:    ebpf.SchedCLS,
		License: "GPL",
		Instructions: asm.Instructions{
			asm.Mov.Imm(asm.R0, -1), // TCX_NEXT
			asm.Return(),
		},
	})
	if err != nil {
		return fmt.Errorf("load empty tc program: %w", err)
	}
	err = node.Do(func() error {
		ifi, err := net.InterfaceByName(iface)
		if err != nil {
			return err
		}
		t.l, err = link.AttachTCX(link.TCXOptions{Interface: ifi.Index, Program: prog, Attach: ebpf.AttachTCXEgress})
		return err
	})
	if err != nil {
		prog.Close()
		return fmt.Errorf("attach empty tc program to %s: %w", iface, err)
	}
	t.prog = prog
	return nil
}

func (t *emptyTC) down() error {
	if t.l != nil {
		t.l.Close()
		t.l = nil
	}
	if t.prog != nil {
		t.prog.Close()
		t.prog = nil
	}
	return nil
}
