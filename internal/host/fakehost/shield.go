package fakehost

import (
	"net/netip"

	"github.com/hostqos/hostqos/internal/datapath/xdp"
)

// FakeShieldKernel is a FakeKernel with the XDP shield (the engine's
// ShieldKernel, its Host.Shield), in memory, failing on demand like the
// FakeKernel (ops "SetBlocks", "SetProtected", "AttachXDP", "DetachXDP").
type FakeShieldKernel struct {
	*FakeKernel
	Blocks    map[netip.Prefix]uint64 // prefix → quarantine rate
	Counters  map[netip.Prefix]xdp.BlockCounters
	Protected map[xdp.Protected]bool
	XDP       map[int]xdp.SynLimits // links with the program
	Listeners map[uint16][]uint32   // port → uids listening
}

// NewFakeShieldKernel wraps a fake kernel.
func NewFakeShieldKernel(k *FakeKernel) *FakeShieldKernel {
	return &FakeShieldKernel{FakeKernel: k, Blocks: map[netip.Prefix]uint64{}, Counters: map[netip.Prefix]xdp.BlockCounters{},
		Protected: map[xdp.Protected]bool{}, XDP: map[int]xdp.SynLimits{}, Listeners: map[uint16][]uint32{}}
}

func (f *FakeShieldKernel) SetBlocks(entries []xdp.BlockEntry) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("SetBlocks", len(entries)); err != nil {
		return err
	}
	f.Blocks = map[netip.Prefix]uint64{}
	for _, e := range entries {
		f.Blocks[e.Prefix] = e.Rate
	}
	return nil
}

func (f *FakeShieldKernel) BlockCounters() ([]xdp.BlockCounters, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []xdp.BlockCounters
	for p := range f.Blocks {
		c := f.Counters[p]
		c.Prefix = p
		out = append(out, c)
	}
	return out, nil
}

func (f *FakeShieldKernel) SetProtected(list []xdp.Protected) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("SetProtected", len(list)); err != nil {
		return err
	}
	f.Protected = map[xdp.Protected]bool{}
	for _, p := range list {
		f.Protected[p] = true
	}
	return nil
}

func (f *FakeShieldKernel) AttachXDP(ifindex int, syn xdp.SynLimits) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("AttachXDP", ifindex); err != nil {
		return err
	}
	f.XDP[ifindex] = syn
	return nil
}

func (f *FakeShieldKernel) DetachXDP(ifindex int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("DetachXDP", ifindex); err != nil {
		return err
	}
	delete(f.XDP, ifindex)
	return nil
}

func (f *FakeShieldKernel) ListenerUIDs(port uint16) ([]uint32, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.Listeners[port], nil
}

func (f *FakeShieldKernel) SynCounters(ifindex int) (xdp.SynCounters, error) {
	return xdp.SynCounters{}, nil
}
