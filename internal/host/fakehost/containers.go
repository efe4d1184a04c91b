package fakehost

import (
	"maps"
	"slices"

	"github.com/hostqos/hostqos/internal/datapath"
)

// FakeContainerKernel is a FakeKernel with the datapath's container side
// (the engine's ContainerKernel, its Host.Containers), in memory, failing
// on demand like the FakeKernel (ops "SetContainerNetns", "AttachVeth",
// "DetachVeth").
type FakeContainerKernel struct {
	*FakeKernel
	Netns  map[uint64]uint32
	OnVeth map[int]datapath.Identity // veths with the classifiers
}

// NewFakeContainerKernel wraps a fake kernel.
func NewFakeContainerKernel(k *FakeKernel) *FakeContainerKernel {
	return &FakeContainerKernel{FakeKernel: k, Netns: map[uint64]uint32{}, OnVeth: map[int]datapath.Identity{}}
}

func (f *FakeContainerKernel) SetContainerNetns(m map[uint64]uint32) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("SetContainerNetns", len(m)); err != nil {
		return err
	}
	f.Netns = maps.Clone(m)
	return nil
}

func (f *FakeContainerKernel) AttachVeth(ifindex int, id datapath.Identity) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("AttachVeth", ifindex); err != nil {
		return err
	}
	f.OnVeth[ifindex] = id
	return nil
}

func (f *FakeContainerKernel) DetachVeth(ifindex int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("DetachVeth", ifindex); err != nil {
		return err
	}
	delete(f.OnVeth, ifindex)
	return nil
}

func (f *FakeContainerKernel) Veths() ([]int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Sorted(maps.Keys(f.OnVeth)), nil
}
