package host

import (
	"errors"
	"net"

	"github.com/hostqos/hostqos/internal/datapath"
	"github.com/hostqos/hostqos/internal/shaper"
)

// The datapath's side of containers (engine.ContainerKernel): the
// namespaces whose sockets get an identity, and the classifiers on the
// host side of their veths, by TCX or, in clsact mode, cls_bpf filters
// (the veth's ingress takes what the container sends).

func (k *System) SetContainerNetns(m map[uint64]uint32) error { return k.DP.SetContainerNetns(m) }

func (k *System) AttachVeth(ifindex int, id datapath.Identity) error {
	if err := k.DP.SetVethIdentity(ifindex, id); err != nil {
		return err
	}
	if k.Attach != AttachClsact {
		return k.DP.AttachVeth(ifindex)
	}
	inFD, _, outFD, _, err := k.DP.VethProgramFDs()
	if err != nil {
		return err
	}
	if err := k.attachFilter(ifindex, shaper.Ingress, inFD); err != nil {
		return err
	}
	return k.attachFilter(ifindex, shaper.Egress, outFD)
}

func (k *System) DetachVeth(ifindex int) error {
	var errs []error
	if k.Attach == AttachClsact {
		if _, err := net.InterfaceByIndex(ifindex); err == nil { // gone: its filters went with it
			errs = append(errs, detachClsact(ifindex, k.DP.ClsactCreated(ifindex)))
		}
		k.DP.ForgetClsact(ifindex)
	}
	return errors.Join(append(errs, k.DP.DetachVeth(ifindex))...)
}

func (k *System) Veths() ([]int, error) { return k.DP.Veths() }
