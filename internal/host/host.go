// Package host is the kernel adapter of a running hostqosd: what the
// engine asks of the kernel (engine.Kernel, and the capabilities
// engine.QSockKernel and engine.ShieldKernel), done with the loaded
// datapath, the shaper's netlink, the cgroup2 file system and the other
// kernel interfaces hostqos touches (interface lookups, the sockets of
// other processes, listening sockets). The engine defines the interfaces
// and reaches the kernel only through them; this package implements them
// and imports no engine. Its fakes, for the engine's unit tests, are in
// host/fakehost.
package host

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/hostqos/hostqos/internal/apps"
	"github.com/hostqos/hostqos/internal/cgroups"
	"github.com/hostqos/hostqos/internal/datapath"
	"github.com/hostqos/hostqos/internal/shaper"
)

// System is the kernel of a running hostqosd: a loaded datapath, netlink
// for HTB, and the cgroup2 file system. It is the engine's Kernel and its
// QSockKernel; the XDP shield is a capability of its own (Shield).
type System struct {
	DP     *datapath.Datapath
	CgRoot string
	Netns  uint64       // the network namespace whose sockets are tagged
	Log    *slog.Logger // for the shaper; nil: slog.Default()
	// Attach is how the classifier is attached to links: AttachTCX, or
	// AttachClsact (cls_bpf on clsact, for kernels before 6.6); "" = TCX.
	Attach string
}

func (k *System) shaperLog() shaper.Option {
	if k.Log == nil {
		return shaper.WithLogger(slog.Default())
	}
	return shaper.WithLogger(k.Log)
}

func (k *System) ApplyRules(p datapath.Policy) error { return k.DP.Apply(p) }
func (k *System) Shape(plan shaper.Plan, was *shaper.Plan) error {
	if was != nil {
		return shaper.ApplyFrom(*was, plan, k.shaperLog())
	}
	return shaper.Apply(plan, k.shaperLog())
}
func (k *System) Unshape(ifindex int) error        { return shaper.Remove(ifindex, k.shaperLog()) }
func (k *System) Shaped(ifindex int) (bool, error) { return shaper.Owned(ifindex) }
func (k *System) ClassStats(ifindex int) ([]shaper.ClassStats, error) {
	return shaper.Stats(ifindex)
}
func (k *System) AttachLink(ifindex int) error              { return k.attachLink(ifindex) }
func (k *System) DetachLink(ifindex int) error              { return k.detachLink(ifindex) }
func (k *System) LinkAttached(ifindex int) (bool, error)    { return k.linkAttached(ifindex) }
func (k *System) LookupLink(name string) (int, bool, error) { return LookupLink(name) }

// DefaultRouteLinks are the interfaces of the default routes (the
// zero-configuration start's choice).
func (k *System) DefaultRouteLinks() ([]string, error) { return shaper.DefaultRouteLinks() }
func (k *System) RuleCounters() ([]datapath.Counters, error) {
	return k.DP.UsedRuleCounters()
}
func (k *System) RuleCounter(slot int) (datapath.Counters, error) {
	return k.DP.RuleCounter(slot)
}
func (k *System) Flows(fn func(datapath.Flow) bool) error { return k.DP.Flows(fn) }
func (k *System) LinkInLevels(ifindex int) ([]datapath.InLevel, error) {
	return k.DP.LinkInLevels(ifindex)
}
func (k *System) TrackFlows(fn func(datapath.Flow, *datapath.FlowMemo) bool, gone func(datapath.Flow, datapath.FlowMemo)) error {
	return k.DP.TrackFlows(fn, gone)
}
func (k *System) Stats() (datapath.Stats, error)   { return k.DP.Stats() }
func (k *System) Generation() uint32               { return k.DP.Generation() }
func (k *System) CgroupRoot() string               { return k.CgRoot }
func (k *System) CreateCgroup(path string) error   { return cgroups.Create(k.CgRoot, path) }
func (k *System) RemoveCgroup(path string) error   { return cgroups.RemoveTree(k.CgRoot, path) }
func (k *System) CgroupOf(pid int) (string, error) { return cgroups.OfPID(pid) }
func (k *System) MovePID(path string, pid int) error {
	return cgroups.MovePID(k.CgRoot, path, pid)
}
func (k *System) Populated(path string) (bool, error) { return cgroups.Populated(k.CgRoot, path) }

// The reservations' readers.
func (k *System) ReservationCounters() (map[uint16]datapath.ResvCounters, error) {
	return k.DP.ReservationCounters()
}
func (k *System) Bindings() ([]datapath.Binding, error) { return k.DP.Bindings() }
func (k *System) BindOpenSockets(protos ...uint8) error { return k.DP.BindOpenSockets(protos...) }
func (k *System) SessionRefusals(since uint64) ([]datapath.Refusal, uint64, error) {
	return k.DP.SessionRefusals(since)
}

// LinkMTU is the MTU of an interface of the daemon's network namespace
// (one link request; net.InterfaceByIndex would list every interface).
func (k *System) LinkMTU(ifindex int) (int, error) {
	l, err := netlink.LinkByIndex(ifindex)
	if err != nil {
		return 0, fmt.Errorf("read MTU of interface %d: %w", ifindex, err)
	}
	return l.Attrs().MTU, nil
}

// SetSendBuffer sets the send buffer of a socket of another process.
func (k *System) SetSendBuffer(pid uint32, cookie uint64, size int) (int, error) {
	return apps.SetSendBuffer(int(pid), cookie, size)
}

// TagExistingSockets gives an identity to inet sockets that were opened
// before the datapath was loaded (sockets born later are tagged by the
// sock_create program). It borrows each socket with pidfd_getfd, so the
// owning process is not disturbed. Sockets of other network namespaces are
// left alone. Flows of tagged sockets are classified again.
func (k *System) TagExistingSockets() (int, error) {
	pids, err := apps.PIDs()
	if err != nil {
		return 0, err
	}
	self := os.Getpid()
	tagged := 0
	for _, pid := range pids {
		if pid == self {
			continue
		}
		if ns, err := apps.NetnsOf(pid); err != nil || ns != k.Netns {
			continue
		}
		fds, err := apps.SocketFDs(pid)
		if err != nil || len(fds) == 0 {
			continue
		}
		id, err := datapath.IdentityForPID(pid, k.CgRoot)
		if err != nil {
			continue
		}
		pidfd, err := unix.PidfdOpen(pid, 0)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			if k.tagOne(pidfd, fd, id) {
				tagged++
			}
		}
		unix.Close(pidfd)
	}
	if tagged > 0 {
		// Flows of these sockets were classified without an identity.
		k.DP.Reevaluate()
	}
	return tagged, nil
}

func (k *System) tagOne(pidfd, fd int, id datapath.Identity) bool {
	local, err := unix.PidfdGetfd(pidfd, fd, 0)
	if err != nil {
		return false
	}
	defer unix.Close(local)
	dom, err := unix.GetsockoptInt(local, unix.SOL_SOCKET, unix.SO_DOMAIN)
	if err != nil || (dom != unix.AF_INET && dom != unix.AF_INET6) {
		return false
	}
	ok, err := k.DP.TagSocket(local, id)
	return err == nil && ok
}

// LookupLink asks the kernel for the ifindex of name (SIOCGIFINDEX in the
// calling thread's network namespace). Unlike net.InterfaceByName, whose
// every failure looks alike, it tells "no such interface" (gone) from
// "could not ask" (err).
func LookupLink(name string) (ifindex int, gone bool, err error) {
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return 0, true, nil // longer than IFNAMSIZ: no interface can have it
	}
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, false, fmt.Errorf("look up interface %s: open socket: %w", name, err)
	}
	defer unix.Close(fd)
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFINDEX, ifr); err != nil {
		if errors.Is(err, unix.ENODEV) {
			return 0, true, nil
		}
		return 0, false, fmt.Errorf("look up interface %s: %w", name, err)
	}
	return int(ifr.Uint32()), false, nil
}

// RemoveKernelState removes what hostqos made in the kernel of this
// network namespace without a running engine: every HTB root of hostqos's
// on any interface, and the pinned programs and maps under bpffsDir.
func RemoveKernelState(bpffsDir string) error {
	ifs, err := net.Interfaces()
	if err != nil {
		return fmt.Errorf("list interfaces: %w", err)
	}
	var errs []error
	if err := removeClsactFilters(bpffsDir, ifs); err != nil {
		errs = append(errs, err)
	}
	for _, ifi := range ifs {
		if owned, _ := shaper.Owned(ifi.Index); owned {
			if err := shaper.Remove(ifi.Index); err != nil {
				errs = append(errs, err) // the shaper names the link
			}
		}
	}
	if err := datapath.Remove(bpffsDir); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
