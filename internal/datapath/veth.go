package datapath

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync/atomic"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/hostqos/hostqos/internal/datapath/pin"
)

// Containers. A container with a network namespace of its own reaches the
// managed links through a veth whose host side is in the daemon's
// namespace; its packets are forwarded (and often NATed) there, with no
// socket. The datapath classifies them at the host side of the veth:
// hq_veth_in on its TCX ingress (what the container sends: classified,
// counted, policed and marked there; the HTB class goes on to the managed
// link in skb->tc_index) and hq_veth_out on its TCX egress (what it
// receives: counted and download-limited there). Sockets made in the
// container's namespace get an identity at birth once the namespace is
// in hq_cnetns; a packet without one takes the veth's (hq_veth).

// MaxContainers bounds the containers the datapath knows at once (network
// namespaces, veths).
const MaxContainers = int(hostqosHqLimitsHQ_MAX_CONTAINERS)

// ContainerKeyBit is set in the cgroup selector key of a container (its
// number, Identity.Container, in the low bits): rules select a container
// as one more cgroup of its sockets.
const ContainerKeyBit = uint64(1) << hostqosHqLimitsHQ_CTR_KEY_SHIFT

// ContainerKey is the cgroup selector key (CgroupRef.ID) of container n.
func ContainerKey(n uint32) uint64 { return ContainerKeyBit | uint64(n) }

// tciNoClass is the skb->tc_index of a container's packet with no HTB
// class of hostqos's to hand on (every other value is the class's minor).
const tciNoClass = uint16(hostqosHqLimitsHQ_TCI_NOCLASS)

// HTBMajor is the major number the datapath gives a container's HTB class
// on the managed link (the shaper's root handle).
const HTBMajor = uint16(hostqosHqLimitsHQ_HTB_MAJOR)

const (
	tcxVethInPrefix  = "tcx_veth_in_"
	tcxVethOutPrefix = "tcx_veth_out_"
)

func (d *Datapath) vethInLinks() pin.Links {
	return pin.Links{Dir: d.dir, Prefix: tcxVethInPrefix, Type: link.TCXType, What: "container veth ingress"}
}

func (d *Datapath) vethOutLinks() pin.Links {
	return pin.Links{Dir: d.dir, Prefix: tcxVethOutPrefix, Type: link.TCXType, What: "container veth egress"}
}

// vethHooks are the two hooks of a container's veth: its TCX ingress
// (what the container sends) and egress (what it receives).
func (d *Datapath) vethHooks() [2]struct {
	links pin.Links
	tcx   map[int]link.Link
	at    ebpf.AttachType
	out   bool
} {
	return [2]struct {
		links pin.Links
		tcx   map[int]link.Link
		at    ebpf.AttachType
		out   bool
	}{
		{d.vethInLinks(), d.tcxVethIn, ebpf.AttachTCXIngress, false},
		{d.vethOutLinks(), d.tcxVethOut, ebpf.AttachTCXEgress, true},
	}
}

// vethProgram is the classifier for one hook of a container's veth.
func (d *Datapath) vethProgram(out bool) (*ebpf.Program, error) {
	in, o, err := d.loadVeth()
	if out {
		return o, err
	}
	return in, err
}

// VethProgramFDs are the veth classifiers' descriptors and program ids
// (in: the veth's ingress, out: its egress), for attaching them with
// clsact on kernels without TCX.
func (d *Datapath) VethProgramFDs() (inFD, inID, outFD, outID int, err error) {
	in, out, err := d.loadVeth()
	if err != nil {
		return 0, 0, 0, 0, err
	}
	if inFD, inID, err = programFD(in, "container veth ingress"); err != nil {
		return 0, 0, 0, 0, err
	}
	if outFD, outID, err = programFD(out, "container veth egress"); err != nil {
		return 0, 0, 0, 0, err
	}
	return inFD, inID, outFD, outID, nil
}

// SetVethIdentity records the identity a container's packets take at the
// host side of its veth ifindex when their socket has none of the
// container's (id.Container must be the container's number).
func (d *Datapath) SetVethIdentity(ifindex int, id Identity) error {
	d.ctrMu.Lock()
	defer d.ctrMu.Unlock()
	if err := d.readVethsLocked(); err != nil {
		return err
	}
	v := identToBPF(id)
	if err := d.objs.HqVeth.Put(uint32(ifindex), &v); err != nil {
		return fmt.Errorf("write container identity of veth %d: %w", ifindex, err)
	}
	d.veths[uint32(ifindex)] = true
	d.countVethsLocked()
	return nil
}

// readVethsLocked reads hq_veth's keys once (an earlier run's included).
func (d *Datapath) readVethsLocked() error {
	if d.veths != nil {
		return nil
	}
	var (
		k uint32
		v hostqosHqIdent
	)
	veths := map[uint32]bool{}
	it := d.objs.HqVeth.Iterate()
	for it.Next(&k, &v) {
		veths[k] = true
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("read container veths: %w", err)
	}
	d.veths = veths
	return nil
}

// countVethsLocked tells the ingress classifier whether any container's
// veth is known (hq_state.veths): only then does a new flow's first
// received packet ask the FIB whether it is routed on to a container.
func (d *Datapath) countVethsLocked() {
	atomic.StoreUint32(&d.stateView().Veths, uint32(len(d.veths)))
}

// AttachVeth attaches the container classifiers to both TCX hooks of the
// host-side veth ifindex (idempotent), at the head of each chain.
func (d *Datapath) AttachVeth(ifindex int) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, h := range d.vethHooks() {
		if l, ok := h.tcx[ifindex]; ok {
			live, err := onHookDir(ifindex, l, h.at)
			if err != nil || live {
				continue
			}
			delete(h.tcx, ifindex)
			_ = pin.Drop(l)
		}
		prog, err := d.vethProgram(h.out)
		if err != nil {
			return err
		}
		l, err := link.AttachTCX(link.TCXOptions{Interface: ifindex, Program: prog, Attach: h.at, Anchor: link.Head()})
		if err != nil {
			return fmt.Errorf("attach %s classifier to ifindex %d: %w", h.links.What, ifindex, err)
		}
		if err := h.links.Pin(l, ifindex); err != nil {
			return err
		}
		h.tcx[ifindex] = l
	}
	return nil
}

// VethAttached reports whether both container classifiers are on the
// TCX hooks of ifindex, as the kernel sees it now.
func (d *Datapath) VethAttached(ifindex int) (bool, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, h := range d.vethHooks() {
		l, ok := h.tcx[ifindex]
		if !ok {
			return false, nil
		}
		if live, err := onHookDir(ifindex, l, h.at); err != nil || !live {
			return false, err
		}
	}
	return true, nil
}

// DetachVeth removes the container classifiers from ifindex (a veth that
// is gone has nothing left to remove but the pins) and forgets its
// identity.
func (d *Datapath) DetachVeth(ifindex int) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	var errs []error
	for _, h := range d.vethHooks() {
		l, ok := h.tcx[ifindex]
		if !ok {
			var err error
			if l, err = h.links.Load(ifindex); err != nil {
				errs = append(errs, err)
				continue
			}
			if l == nil {
				continue
			}
		}
		delete(h.tcx, ifindex)
		errs = append(errs, pin.Drop(l))
	}
	d.ctrMu.Lock()
	defer d.ctrMu.Unlock()
	if err := d.objs.HqVeth.Delete(uint32(ifindex)); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		errs = append(errs, fmt.Errorf("forget container identity of veth %d: %w", ifindex, err))
		d.veths = nil // unknown: read again
	} else if d.veths != nil {
		delete(d.veths, uint32(ifindex))
		d.countVethsLocked()
	}
	return errors.Join(errs...)
}

// Veths lists the veths with container classifiers or an identity (what
// a previous run set up included, for the reconcile to keep or remove).
func (d *Datapath) Veths() ([]int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	seen := map[int]bool{}
	for _, h := range d.vethHooks() {
		for i := range h.tcx {
			seen[i] = true
		}
	}
	d.ctrMu.Lock()
	defer d.ctrMu.Unlock()
	if err := d.readVethsLocked(); err != nil {
		return nil, err
	}
	for k := range d.veths {
		seen[int(k)] = true
	}
	return slices.Sorted(maps.Keys(seen)), nil
}

// SetContainerNetns makes hq_cnetns hold exactly want (netns cookie ->
// container number): sockets made in those namespaces get an identity
// from then on.
func (d *Datapath) SetContainerNetns(want map[uint64]uint32) error {
	if len(want) > MaxContainers {
		return fmt.Errorf("write container namespaces: %d, at most %d", len(want), MaxContainers)
	}
	d.ctrMu.Lock()
	defer d.ctrMu.Unlock()
	m := d.objs.HqCnetns
	if d.cnetns == nil { // what an earlier run left, read once
		have := map[uint64]uint32{}
		var (
			k uint64
			v uint32
		)
		it := m.Iterate()
		for it.Next(&k, &v) {
			have[k] = v
		}
		if err := it.Err(); err != nil {
			return fmt.Errorf("read container namespaces: %w", err)
		}
		d.cnetns = have
	}
	for k, v := range d.cnetns {
		if w, ok := want[k]; ok && w == v {
			continue
		}
		if err := m.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			d.cnetns = nil // unknown: read again
			return fmt.Errorf("forget container namespace %d: %w", k, err)
		}
		delete(d.cnetns, k)
	}
	for k, v := range want {
		if have, ok := d.cnetns[k]; ok && have == v {
			continue
		}
		if err := m.Put(k, v); err != nil {
			d.cnetns = nil
			return fmt.Errorf("write container namespace %d: %w", k, err)
		}
		d.cnetns[k] = v
	}
	return nil
}

// PreloadVeth verifies and loads the container classifiers now, so that
// the first container found does not wait for the verifier (a few
// hundred milliseconds) before its rules hold.
func (d *Datapath) PreloadVeth() error {
	_, _, err := d.loadVeth()
	return err
}
