package engine

import (
	"github.com/hostqos/hostqos/internal/datapath"
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
	// Containers is the datapath's side of containers; nil: containers
	// found are listed but their traffic is not told from the host's.
	Containers ContainerKernel
}

// Kernel is everything the engine asks of the kernel. host.System is the
// real one (datapath, shaper, cgroups; package internal/host);
// fakehost.FakeKernel (internal/host/fakehost) records calls for unit tests
// and fails on demand. Cgroup paths are relative to CgroupRoot.
type Kernel interface {
	// ApplyRules makes the datapath's rules those of p (one generation).
	ApplyRules(p datapath.Policy) error
	// Shape builds (or updates) a link's HTB tree from a plan; was, if
	// not nil, is the plan the link's tree was last made from (only the
	// difference is written, without reading the tree).
	Shape(plan shaper.Plan, was *shaper.Plan) error
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
	// BindOpenSockets binds the open sockets that the applied policy puts
	// under a reservation and that are not bound yet.
	BindOpenSockets(protos ...uint8) error
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
