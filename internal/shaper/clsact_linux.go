//go:build linux

package shaper

import (
	"errors"
	"fmt"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Direction is a TC hook of a link: egress or ingress.
type Direction int

const (
	Egress Direction = iota
	Ingress
)

func (d Direction) String() string {
	if d == Ingress {
		return "ingress"
	}
	return "egress"
}

func (d Direction) parent() uint32 {
	if d == Ingress {
		return netlink.HANDLE_MIN_INGRESS
	}
	return netlink.HANDLE_MIN_EGRESS
}

// hostqos's cls_bpf filter on a clsact hook: priority 1 (first, as the
// TCX program is at the head of its chain), a handle of its own, and a
// name starting "hostqos" (tc filter show lists it).
const (
	bpfFilterPrio   = 1
	bpfFilterHandle = 0x4851 // "HQ"
	bpfFilterName   = "hostqos"
)

func ourFilter(ifindex int, dir Direction, fd int) *netlink.BpfFilter {
	return &netlink.BpfFilter{
		FilterAttrs: netlink.FilterAttrs{
			LinkIndex: ifindex,
			Parent:    dir.parent(),
			Handle:    bpfFilterHandle,
			Protocol:  unix.ETH_P_ALL,
			Priority:  bpfFilterPrio,
		},
		Fd:           fd,
		Name:         bpfFilterName,
		DirectAction: true,
	}
}

func clsact(ifindex int) *netlink.GenericQdisc {
	return &netlink.GenericQdisc{
		QdiscAttrs: netlink.QdiscAttrs{
			LinkIndex: ifindex,
			Handle:    netlink.MakeHandle(0xffff, 0),
			Parent:    netlink.HANDLE_CLSACT,
		},
		QdiscType: "clsact",
	}
}

// AttachBPF puts the BPF program fd on a link's clsact hook dir as a
// cls_bpf filter in direct-action mode, for kernels without TCX: it adds
// the clsact qdisc when the link has none (created reports that), and adds
// hostqos's filter or, when it is there already (a restarted daemon),
// replaces its program in place, so traffic is never unclassified.
// Foreign filters and a foreign clsact are left as they are.
func AttachBPF(ifindex int, dir Direction, fd int) (created bool, err error) {
	err = netlink.QdiscAdd(clsact(ifindex))
	switch {
	case err == nil:
		created = true
	case errors.Is(err, unix.EEXIST):
	default:
		return false, fmt.Errorf("add clsact qdisc to ifindex %d: %w", ifindex, err)
	}
	if err := netlink.FilterReplace(ourFilter(ifindex, dir, fd)); err != nil {
		if created {
			_ = netlink.QdiscDel(clsact(ifindex))
		}
		return false, fmt.Errorf("attach cls_bpf %s filter to ifindex %d: %w", dir, ifindex, err)
	}
	return created, nil
}

// BPFProgram returns the id of the program of hostqos's cls_bpf filter on
// a link's hook dir; found is false when there is none.
func BPFProgram(ifindex int, dir Direction) (id int, found bool, err error) {
	link, err := netlink.LinkByIndex(ifindex)
	if err != nil {
		return 0, false, fmt.Errorf("look up ifindex %d: %w", ifindex, err)
	}
	fs, err := retryDump(func() ([]netlink.Filter, error) { return netlink.FilterList(link, dir.parent()) })
	if err != nil {
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
			return 0, false, nil // no clsact
		}
		return 0, false, fmt.Errorf("list %s filters of ifindex %d: %w", dir, ifindex, err)
	}
	for _, f := range fs {
		b, ok := f.(*netlink.BpfFilter)
		if ok && isOurFilter(b) {
			return b.Id, true, nil
		}
	}
	return 0, false, nil
}

func isOurFilter(b *netlink.BpfFilter) bool {
	a := b.Attrs()
	return a.Handle == bpfFilterHandle && a.Priority == bpfFilterPrio && len(b.Name) >= len(bpfFilterName) && b.Name[:len(bpfFilterName)] == bpfFilterName
}

// DetachBPF removes hostqos's cls_bpf filter from a link's hook dir (none
// there is no error), and then the clsact qdisc when removeClsact is set
// (hostqos added it) and no filter is left on either hook.
func DetachBPF(ifindex int, dir Direction, removeClsact bool) error {
	err := netlink.FilterDel(ourFilter(ifindex, dir, 0))
	if err != nil && !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENODEV) {
		return fmt.Errorf("remove cls_bpf %s filter from ifindex %d: %w", dir, ifindex, err)
	}
	if !removeClsact {
		return nil
	}
	link, err := netlink.LinkByIndex(ifindex)
	if err != nil {
		return nil // the link is gone, and its qdiscs with it
	}
	for _, d := range []Direction{Egress, Ingress} {
		fs, err := retryDump(func() ([]netlink.Filter, error) { return netlink.FilterList(link, d.parent()) })
		if err != nil {
			if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
				return nil // no clsact any more
			}
			return fmt.Errorf("list %s filters of ifindex %d: %w", d, ifindex, err)
		}
		if len(fs) > 0 {
			return nil // someone else's filters: the clsact stays
		}
	}
	if err := netlink.QdiscDel(clsact(ifindex)); err != nil && !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("remove clsact qdisc of ifindex %d: %w", ifindex, err)
	}
	return nil
}
