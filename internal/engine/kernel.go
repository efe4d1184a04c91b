package engine

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"

	"golang.org/x/sys/unix"

	"github.com/hostqos/hostqos/internal/apps"
	"github.com/hostqos/hostqos/internal/cgroups"
	"github.com/hostqos/hostqos/internal/datapath"
	"github.com/hostqos/hostqos/internal/datapath/xdp"
	"github.com/hostqos/hostqos/internal/shaper"
)

// Host is what the engine drives: the kernel, and the capabilities a
// kernel may lack, each nil when it does. Start takes it whole, so what a
// kernel provides is in its type: nothing is discovered by type assertion,
// and a kernel that lacks a method of a capability it is given does not
// compile.
type Host struct {
	Kernel Kernel
	// QSockets is the datapath's qsocket table; nil: qsocket requests are
	// refused and links are planned without the qsocket scheduler.
	QSockets QSockKernel
	// Shield is the XDP shield; nil when it did not load: the drop list
	// and SYN limits are refused and managed links carry no XDP program.
	Shield ShieldKernel
}

// Kernel is everything the engine asks of the kernel. SystemKernel is the
// real one (datapath, shaper, cgroups); FakeKernel records calls for unit
// tests and fails on demand. Cgroup paths are relative to CgroupRoot.
type Kernel interface {
	// ApplyRules makes the datapath's rules those of p (one generation).
	ApplyRules(p datapath.Policy) error
	// Shape builds (or updates) a link's HTB tree from a plan.
	Shape(plan shaper.Plan) error
	// Unshape removes hostqos's HTB root from a link.
	Unshape(ifindex int) error
	// Shaped reports whether hostqos's HTB root is on a link.
	Shaped(ifindex int) (bool, error)
	// ClassStats reads the counters of the HTB classes on a link.
	ClassStats(ifindex int) ([]shaper.ClassStats, error)

	// AttachLink attaches the classifier to a link; DetachLink removes it;
	// LinkAttached reports whether it is on the link.
	AttachLink(ifindex int) error
	DetachLink(ifindex int) error
	LinkAttached(ifindex int) (bool, error)
	// LookupLink finds a network interface by name. gone is true only when
	// the kernel says so positively; any other failure is err and proves
	// nothing about the interface.
	LookupLink(name string) (ifindex int, gone bool, err error)

	// RuleCounters reads the counters of the rule slots (those beyond
	// the answer's end have counted nothing); Flows walks the
	// flow table; Stats reads the datapath's global counters; Generation
	// is the number of the datapath's current policy.
	RuleCounters() ([]datapath.Counters, error)
	// RuleCounter reads one slot's counters (RuleCounters reads all).
	RuleCounter(slot int) (datapath.Counters, error)
	Flows(fn func(datapath.Flow) bool) error
	// TrackFlows walks the flow table for its one tracker (the history
	// recorder), with the tracker's memo of each flow, then reports the
	// tracked flows that left the table since (datapath.FlowReader.Track).
	TrackFlows(fn func(datapath.Flow, *datapath.FlowMemo) bool, gone func(datapath.Flow, datapath.FlowMemo)) error
	Stats() (datapath.Stats, error)
	Generation() uint32
	// LinkInLevels reads how a link's ingress budget is shared now
	// (the link's status).
	LinkInLevels(ifindex int) ([]datapath.InLevel, error)
	// LinkMTU is the MTU of an interface of the daemon's network namespace
	// (a reservation's M must fit it).
	LinkMTU(ifindex int) (int, error)
	// ReservationCounters reads the counters and sessions of the
	// reservations of the applied policy, by id; Bindings lists the sockets
	// bound to reservations; SessionRefusals returns the session refusals
	// after seq since and the seq to pass next time.
	ReservationCounters() (map[uint16]datapath.ResvCounters, error)
	Bindings() ([]datapath.Binding, error)
	SessionRefusals(since uint64) ([]datapath.Refusal, uint64, error)
	// TagExistingSockets gives an identity to the sockets of this network
	// namespace opened before the datapath was loaded, and returns how many
	// it tagged.
	TagExistingSockets() (int, error)
	// SetSendBuffer sets SO_SNDBUF of the socket with cookie cookie of
	// process pid to size and returns the value it had (doubled, as
	// getsockopt reads it); apps.ErrSocketGone when it is gone
	// (resv_sndbuf.go).
	SetSendBuffer(pid uint32, cookie uint64, size int) (old int, err error)

	// CgroupRoot is the cgroup2 mount point app selectors resolve against.
	CgroupRoot() string
	CreateCgroup(path string) error
	RemoveCgroup(path string) error
	// CgroupOf is the cgroup of a process; MovePID moves a process into
	// a cgroup; Populated reports whether a cgroup has processes.
	CgroupOf(pid int) (string, error)
	MovePID(path string, pid int) error
	Populated(path string) (bool, error)
}

// SystemKernel is the Kernel of a running hostqosd: a loaded datapath,
// netlink for HTB, and the cgroup2 file system.
type SystemKernel struct {
	DP     *datapath.Datapath
	CgRoot string
	Netns  uint64       // the network namespace whose sockets are tagged
	Log    *slog.Logger // for the shaper; nil: slog.Default()
	// Shield is the XDP program (drop list, SYN limits); nil when it did
	// not load (the rest works without it).
	Shield *xdp.Shield
	// Attach is how the classifier is attached to links: AttachTCX, or
	// AttachClsact (cls_bpf on clsact, for kernels before 6.6); "" = TCX.
	Attach string
}

func (k *SystemKernel) shaperLog() shaper.Option {
	if k.Log == nil {
		return shaper.WithLogger(slog.Default())
	}
	return shaper.WithLogger(k.Log)
}

var _ Kernel = (*SystemKernel)(nil)

func (k *SystemKernel) ApplyRules(p datapath.Policy) error { return k.DP.Apply(p) }
func (k *SystemKernel) Shape(plan shaper.Plan) error       { return shaper.Apply(plan, k.shaperLog()) }
func (k *SystemKernel) Unshape(ifindex int) error          { return shaper.Remove(ifindex, k.shaperLog()) }
func (k *SystemKernel) Shaped(ifindex int) (bool, error)   { return shaper.Owned(ifindex) }
func (k *SystemKernel) ClassStats(ifindex int) ([]shaper.ClassStats, error) {
	return shaper.Stats(ifindex)
}
func (k *SystemKernel) AttachLink(ifindex int) error              { return k.attachLink(ifindex) }
func (k *SystemKernel) DetachLink(ifindex int) error              { return k.detachLink(ifindex) }
func (k *SystemKernel) LinkAttached(ifindex int) (bool, error)    { return k.linkAttached(ifindex) }
func (k *SystemKernel) LookupLink(name string) (int, bool, error) { return LookupLink(name) }
func (k *SystemKernel) RuleCounters() ([]datapath.Counters, error) {
	return k.DP.UsedRuleCounters()
}
func (k *SystemKernel) RuleCounter(slot int) (datapath.Counters, error) {
	return k.DP.RuleCounter(slot)
}
func (k *SystemKernel) Flows(fn func(datapath.Flow) bool) error { return k.DP.Flows(fn) }

func (k *SystemKernel) LinkInLevels(ifindex int) ([]datapath.InLevel, error) {
	return k.DP.LinkInLevels(ifindex)
}
func (k *SystemKernel) TrackFlows(fn func(datapath.Flow, *datapath.FlowMemo) bool, gone func(datapath.Flow, datapath.FlowMemo)) error {
	return k.DP.TrackFlows(fn, gone)
}
func (k *SystemKernel) Stats() (datapath.Stats, error)   { return k.DP.Stats() }
func (k *SystemKernel) Generation() uint32               { return k.DP.Generation() }
func (k *SystemKernel) CgroupRoot() string               { return k.CgRoot }
func (k *SystemKernel) CreateCgroup(path string) error   { return cgroups.Create(k.CgRoot, path) }
func (k *SystemKernel) RemoveCgroup(path string) error   { return cgroups.RemoveTree(k.CgRoot, path) }
func (k *SystemKernel) CgroupOf(pid int) (string, error) { return cgroups.OfPID(pid) }
func (k *SystemKernel) MovePID(path string, pid int) error {
	return cgroups.MovePID(k.CgRoot, path, pid)
}
func (k *SystemKernel) Populated(path string) (bool, error) { return cgroups.Populated(k.CgRoot, path) }

// TagExistingSockets gives an identity to inet sockets that were opened
// before the datapath was loaded (sockets born later are tagged by the
// sock_create program). It borrows each socket with pidfd_getfd, so the
// owning process is not disturbed. Sockets of other network namespaces are
// left alone. Flows of tagged sockets are classified again.
func (k *SystemKernel) TagExistingSockets() (int, error) {
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

func (k *SystemKernel) tagOne(pidfd, fd int, id datapath.Identity) bool {
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
