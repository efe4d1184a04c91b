package engine

import (
	"errors"
	"fmt"
	"net"

	"github.com/hostqos/hostqos/internal/datapath"
	"github.com/hostqos/hostqos/internal/shaper"
)

// How the classifier is attached to a link (SystemKernel.Attach, hostqosd
// --attach): TCX links (Linux 6.6 and later), or a cls_bpf filter in
// direct-action mode on a clsact qdisc (any kernel hostqos supports).
const (
	AttachAuto   = "auto"
	AttachTCX    = "tcx"
	AttachClsact = "clsact"
)

// ResolveAttach turns the --attach flag into the mode to use: auto is TCX
// where the kernel has it, clsact otherwise; tcx on a kernel without it is
// an error.
func ResolveAttach(flag string) (string, error) {
	switch flag {
	case AttachAuto, "":
		if datapath.HaveTCX() {
			return AttachTCX, nil
		}
		return AttachClsact, nil
	case AttachTCX:
		if !datapath.HaveTCX() {
			return "", errors.New("flag --attach = tcx: this kernel has no TCX (Linux 6.6 or later); use --attach clsact or auto")
		}
		return AttachTCX, nil
	case AttachClsact:
		return AttachClsact, nil
	}
	return "", fmt.Errorf("flag --attach = %q: want auto, tcx or clsact", flag)
}

func (k *SystemKernel) attachLink(ifindex int) error {
	if k.Attach != AttachClsact {
		return k.DP.AttachLink(ifindex)
	}
	fd, _, err := k.DP.EgressProgramFD(ifindex)
	if err != nil {
		return err
	}
	created, err := shaper.AttachBPF(ifindex, shaper.Egress, fd)
	if err != nil {
		return err
	}
	if created {
		return k.DP.MarkClsactCreated(ifindex)
	}
	return nil
}

func (k *SystemKernel) linkAttached(ifindex int) (bool, error) {
	if k.Attach != AttachClsact {
		return k.DP.LinkAttached(ifindex)
	}
	_, want, err := k.DP.EgressProgramFD(ifindex)
	if err != nil {
		return false, err
	}
	id, found, err := shaper.BPFProgram(ifindex, shaper.Egress)
	if err != nil {
		return false, err
	}
	// Another program in our filter (a previous daemon's) counts as not
	// attached: the next apply replaces it in place.
	return found && id == want, nil
}

func (k *SystemKernel) detachLink(ifindex int) error {
	if k.Attach != AttachClsact {
		return k.DP.DetachLink(ifindex)
	}
	if err := shaper.DetachBPF(ifindex, shaper.Egress, k.DP.ClsactCreated(ifindex)); err != nil {
		return err
	}
	k.DP.ForgetClsact(ifindex)
	return nil
}

// removeClsactFilters removes hostqos's cls_bpf filters from every
// interface, and the clsact qdiscs hostqos added where they are empty
// then (hostqos down, whichever attach mode the daemon ran in).
func removeClsactFilters(bpffsDir string, ifs []net.Interface) error {
	var errs []error
	for _, ifi := range ifs {
		if _, found, err := shaper.BPFProgram(ifi.Index, shaper.Egress); err != nil || !found {
			if !datapath.ClsactCreatedIn(bpffsDir, ifi.Index) {
				continue
			}
		}
		if err := shaper.DetachBPF(ifi.Index, shaper.Egress, datapath.ClsactCreatedIn(bpffsDir, ifi.Index)); err != nil {
			errs = append(errs, err) // the shaper names the link
		}
	}
	return errors.Join(errs...)
}
