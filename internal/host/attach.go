package host

import (
	"errors"
	"fmt"
	"net"

	"github.com/hostqos/hostqos/internal/datapath"
	"github.com/hostqos/hostqos/internal/shaper"
)

// How the classifier is attached to a link (System.Attach, hostqosd
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

// clsactHooks are the directions the classifier is attached to, with the
// datapath's program for each.
func (k *System) clsactHooks() []struct {
	dir  shaper.Direction
	prog func(int) (int, int, error)
} {
	return []struct {
		dir  shaper.Direction
		prog func(int) (int, int, error)
	}{{shaper.Egress, k.DP.EgressProgramFD}, {shaper.Ingress, k.DP.IngressProgramFD}}
}

func (k *System) attachLink(ifindex int) error {
	if k.Attach != AttachClsact {
		return k.DP.AttachLink(ifindex)
	}
	for _, h := range k.clsactHooks() {
		fd, _, err := h.prog(ifindex)
		if err != nil {
			return err
		}
		if err := k.attachFilter(ifindex, h.dir, fd); err != nil {
			return err
		}
	}
	return nil
}

// attachFilter puts program fd as hostqos's cls_bpf filter on one hook of
// ifindex's clsact, recording that hostqos added the clsact when it did.
func (k *System) attachFilter(ifindex int, dir shaper.Direction, fd int) error {
	created, err := shaper.AttachBPF(ifindex, dir, fd)
	if err != nil {
		return err
	}
	if created {
		return k.DP.MarkClsactCreated(ifindex)
	}
	return nil
}

func (k *System) linkAttached(ifindex int) (bool, error) {
	if k.Attach != AttachClsact {
		return k.DP.LinkAttached(ifindex)
	}
	for _, h := range k.clsactHooks() {
		_, want, err := h.prog(ifindex)
		if err != nil {
			return false, err
		}
		id, found, err := shaper.BPFProgram(ifindex, h.dir)
		if err != nil {
			return false, err
		}
		// Another program in our filter (a previous daemon's) counts as
		// not attached: the next apply replaces it in place.
		if !found || id != want {
			return false, nil
		}
	}
	return true, nil
}

func (k *System) detachLink(ifindex int) error {
	if k.Attach != AttachClsact {
		return k.DP.DetachLink(ifindex)
	}
	if err := detachClsact(ifindex, k.DP.ClsactCreated(ifindex)); err != nil {
		return err
	}
	k.DP.ForgetClsact(ifindex)
	return nil
}

// detachClsact removes hostqos's filters from both hooks of a link, then
// the clsact qdisc when hostqos added it and it is empty.
func detachClsact(ifindex int, created bool) error {
	if err := shaper.DetachBPF(ifindex, shaper.Egress, false); err != nil {
		return err
	}
	return shaper.DetachBPF(ifindex, shaper.Ingress, created)
}

// removeClsactFilters removes hostqos's cls_bpf filters from every
// interface, and the clsact qdiscs hostqos added where they are empty
// then (hostqos down, whichever attach mode the daemon ran in).
func removeClsactFilters(bpffsDir string, ifs []net.Interface) error {
	var errs []error
	for _, ifi := range ifs {
		_, out, _ := shaper.BPFProgram(ifi.Index, shaper.Egress)
		_, in, _ := shaper.BPFProgram(ifi.Index, shaper.Ingress)
		created := datapath.ClsactCreatedIn(bpffsDir, ifi.Index)
		if !out && !in && !created {
			continue
		}
		if err := detachClsact(ifi.Index, created); err != nil {
			errs = append(errs, err) // the shaper names the link
		}
	}
	return errors.Join(errs...)
}
