package engine

import (
	"fmt"
	"maps"
	"reflect"
	"slices"

	"github.com/hostqos/hostqos/internal/datapath"
	"github.com/hostqos/hostqos/internal/derive"
)

// Containers (docs/containers.md). The daemon's watcher finds the
// containers on the host and hands every change to SetContainers; they are
// one more input of the derive: container selectors pick from them, and
// every container with a network namespace of its own is classified and
// counted at the host side of its veths (derive.Containers), which the
// reconcile sets up and removes through ContainerKernel.

// ContainerKernel is the datapath's side of containers (host.System;
// fakehost.FakeContainerKernel in unit tests).
type ContainerKernel interface {
	// SetContainerNetns makes the namespaces whose sockets get an
	// identity at birth exactly these (cookie -> container number).
	SetContainerNetns(map[uint64]uint32) error
	// AttachVeth records id for the host-side veth ifindex and attaches
	// the container classifiers to it (idempotent).
	AttachVeth(ifindex int, id datapath.Identity) error
	// DetachVeth removes them (a veth that is gone leaves only pins and
	// its identity to remove).
	DetachVeth(ifindex int) error
	// Veths are the veths the kernel holds classifiers or an identity
	// for (an earlier run's included).
	Veths() ([]int, error)
}

// SetContainers makes cs the containers found on the host and applies
// what that changes (rules that select containers, veths to classify at).
// A failed sync is logged: the kernel keeps what it held, and the next
// change or rescan tries again.
func (e *Engine) SetContainers(cs []derive.Container) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.ctrWant = slices.Clone(cs)
	if reflect.DeepEqual(e.containers, cs) {
		return
	}
	cs = slices.Clone(cs)
	if e.k == nil {
		e.containers = cs
		return
	}
	if err := e.syncLocked("containers", syncChange{containers: &cs}); err != nil {
		e.log.Warn("apply the containers found; the next rescan tries again", "err", err)
	}
}

// containerRetryLocked is a rescan's change: the containers last reported
// when a push of them failed, else none.
func (e *Engine) containerRetryLocked() syncChange {
	if e.ctrWant == nil || reflect.DeepEqual(e.ctrWant, e.containers) {
		return syncChange{}
	}
	want := slices.Clone(e.ctrWant)
	return syncChange{containers: &want}
}

// Containers are the containers found on the host now.
func (e *Engine) Containers() []derive.Container {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.containers)
}

// reconcileContainersLocked makes the datapath know d's containers'
// namespaces and classify at their veths, and nothing more: veths of
// containers that are gone lose their classifiers and identity.
func (e *Engine) reconcileContainersLocked(d *derive.Desired) error {
	if e.ck == nil {
		return nil
	}
	want := d.Containers
	if e.pushed.cnetns == nil || !maps.Equal(*e.pushed.cnetns, want.Netns) {
		e.pushed.cnetns = nil
		if err := e.ck.SetContainerNetns(want.Netns); err != nil {
			return fmt.Errorf("set container namespaces: %w", err)
		}
		ns := maps.Clone(want.Netns)
		e.pushed.cnetns = &ns
	}
	if e.pushed.veths == nil {
		// Unknown (start, repair): what the kernel holds, to remove what
		// is no longer wanted.
		have, err := e.ck.Veths()
		if err != nil {
			return fmt.Errorf("list container veths: %w", err)
		}
		e.pushed.veths = map[int]datapath.Identity{}
		for _, v := range have {
			e.pushed.veths[v] = datapath.Identity{Container: ^uint32(0)} // written again if wanted
		}
	}
	for ifindex, id := range want.Veths {
		if have, ok := e.pushed.veths[ifindex]; ok && reflect.DeepEqual(have, id) {
			continue
		}
		e.pushed.veths[ifindex] = datapath.Identity{Container: ^uint32(0)}
		if err := e.ck.AttachVeth(ifindex, id); err != nil {
			return fmt.Errorf("container veth %d: %w", ifindex, err)
		}
		e.pushed.veths[ifindex] = id
	}
	for ifindex := range e.pushed.veths {
		if _, ok := want.Veths[ifindex]; ok {
			continue
		}
		if err := e.ck.DetachVeth(ifindex); err != nil {
			e.log.Warn("remove the classifiers of a container's veth", "ifindex", ifindex, "err", err)
			continue
		}
		delete(e.pushed.veths, ifindex)
	}
	return nil
}
