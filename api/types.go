// Package api defines hostqosd's HTTP/JSON API on its Unix socket: the wire
// types, the routes, and a client. The CLI and any script talk to the daemon
// only through it.
//
// Routes (all JSON):
//
//	GET    /v1/status
//	GET    /v1/links               PATCH /v1/links/{name}  PUT /v1/links/{name}      DELETE /v1/links/{name}
//	GET    /v1/classes[/{name}]    POST /v1/classes        PATCH /v1/classes/{name}   DELETE /v1/classes/{name}
//	GET    /v1/rules[/{name}]      POST /v1/rules          PATCH /v1/rules/{name}     DELETE /v1/rules/{name}
//	POST   /v1/runs                DELETE /v1/runs/{id}
//	GET    /v1/stats/{rules|classes|apps|flows}
//	GET    /v1/history/{links|classes|rules|apps|flows}?name=&since=&until=&step=&limit=
//	GET    /v1/explain?pid=&exe=&proto=&local=&lport=&remote=&rport=&dscp=
//	POST   /v1/reload              POST /v1/down
//
// Changing requests accept ?temporary=1: the change is kept until reboot or
// `hostqos down` but is not written to the persistent state. Link changes
// and reload accept ?force=1: a change that takes away the shaping
// admitted guarantees rely on is applied instead of refused. PATCH of a
// link changes the fields given; PUT gives the whole link.
// Errors come back as an ErrorBody with a 4xx/5xx status.
package api

import (
	"strconv"
	"strings"
	"time"

	"github.com/hostqos/hostqos/internal/policy"
)

// DefaultSocket is where hostqosd listens unless told otherwise.
const DefaultSocket = "/run/hostqos/hostqosd.sock"

// SocketEnv names the environment variable the CLI reads the socket path from.
const SocketEnv = "HOSTQOS_SOCKET"

// ErrorBody is the body of every error response.
type ErrorBody struct {
	Error string `json:"error"`
	// Class is what kind of refusal it is (ErrInvalid, ErrAdmission, …);
	// a daemon that does not say is read by the status code (see
	// Error.Class).
	Class string `json:"class,omitempty"`
	// Fields lists every invalid field when the request failed validation.
	Fields []*policy.FieldError `json:"fields,omitempty"`
}

// The classes of an error answer (ErrorBody.Class): what went wrong, for a
// program (the CLI's exit codes) to tell apart without reading the text.
const (
	// ErrInvalid: the request or the policy it makes is invalid, or
	// conflicts with what exists (400, 409, 413, 422); nothing changed.
	ErrInvalid = "invalid"
	// ErrAdmission: admission control refused it — guarantees (minbw,
	// reservations, per-session guarantees, real-time channels) that do
	// not fit, or a change that takes away the shaping they rely on
	// (400, 429); nothing changed.
	ErrAdmission = "admission"
	// ErrForbidden: the caller may not do this (403).
	ErrForbidden = "forbidden"
	// ErrNotFound: no such object (404).
	ErrNotFound = "not_found"
	// ErrLimit: a bound on what one user or the host may hold is reached,
	// or the daemon is busy; try again later (429, 503).
	ErrLimit = "limit"
	// ErrInternal: the daemon failed (500).
	ErrInternal = "internal"
)

// Status is the answer to GET /v1/status.
type Status struct {
	Daemon   DaemonStatus   `json:"daemon"`
	Datapath DatapathStatus `json:"datapath"`
	Links    []LinkStatus   `json:"links"`
	// AutoLinks are the links the daemon manages on its own because the
	// policy manages none (the default routes' interfaces; auto_links).
	AutoLinks []string `json:"auto_links,omitempty"`
	Counts    Counts   `json:"counts"`
	Warnings  []string `json:"warnings,omitempty"`
	// RestartNeeded lists the settings hostqosd reads only when it starts
	// (the top-level settings, [rsvp]) whose value in the config file
	// differs from the one in force: a reload read them, a restart
	// applies them. One line each: `[rsvp] enabled: false in force, true
	// in the config file`.
	RestartNeeded []string `json:"restart_needed,omitempty"`
	// Kubernetes is the node agent's state (nil: [kubernetes] is not in
	// the config file).
	Kubernetes *KubernetesStatus `json:"kubernetes,omitempty"`
}

// KubernetesStatus is the Kubernetes node agent's connection to the API
// server and its last sync (docs/kubernetes.md).
type KubernetesStatus struct {
	// Node is the node whose pods it enforces.
	Node string `json:"node"`
	// Connected: the API server answers and the agent's pod cache is
	// synced. Since is when that last changed; Error why it is not.
	Connected bool      `json:"connected"`
	Since     time.Time `json:"since,omitzero"`
	Error     string    `json:"error,omitempty"`
	// LastSync is when the pods last went to the engine; Pods are the pods
	// that asked for QoS then, Refused those of them refused (an Event on
	// each says why; each keeps what it had).
	LastSync time.Time `json:"last_sync,omitzero"`
	Pods     int       `json:"pods"`
	Refused  int       `json:"refused"`
	// Policies are the QoSPolicies and ClusterQoSPolicies that select a
	// pod of the node; PolicyError says why the agent reads none (the
	// CRDs not installed).
	Policies    int    `json:"policies"`
	PolicyError string `json:"policy_error,omitempty"`
	// Requests counts the requests the agent sent the API server since
	// it started (a watch is one).
	Requests uint64 `json:"requests"`
}

// DaemonStatus describes the running daemon.
type DaemonStatus struct {
	Version    string    `json:"version"`
	PID        int       `json:"pid"`
	Started    time.Time `json:"started"`
	Config     string    `json:"config"`
	StateDir   string    `json:"state_dir"`
	BPFFSDir   string    `json:"bpffs_dir"`
	Socket     string    `json:"socket"`
	Netns      uint64    `json:"netns_inode"`
	Adopted    bool      `json:"adopted"` // took over pinned state of an earlier run
	Generation uint64    `json:"generation"`
	// CgroupMount is the cgroup2 mount the daemon uses; CgroupMountOwn
	// says hostqosd mounted it (none was mounted, e.g. under `ip netns
	// exec`), in a place of its own next to the socket.
	CgroupMount    string `json:"cgroup_mount"`
	CgroupMountOwn bool   `json:"cgroup_mounted_by_hostqosd,omitempty"`
	// BPFFSMount is the mount point of the BPF file system holding the
	// pins; BPFFSMountOwn says hostqosd mounted it (none was mounted).
	BPFFSMount    string `json:"bpffs_mount,omitempty"`
	BPFFSMountOwn bool   `json:"bpffs_mounted_by_hostqosd,omitempty"`
	// PinsDieWithDaemon: that bpffs lives in a mount namespace of the
	// daemon's own, so the pinned datapath goes away when it exits.
	PinsDieWithDaemon bool `json:"pins_die_with_daemon,omitempty"`
	// Work counts what the daemon asked of the kernel and the file
	// systems since it started; an idle daemon asks for nothing
	// (DESIGN.md, the event-driven engine).
	Work DaemonWork `json:"work"`
}

// DaemonWork counts the daemon's costly reads since it started.
type DaemonWork struct {
	// NetlinkDumps are the netlink dumps (qdisc, class and filter lists)
	// of the shaper.
	NetlinkDumps uint64 `json:"netlink_dumps"`
	// SelectorReads are the app selectors (exe files, unit cgroups)
	// resolved against the file systems.
	SelectorReads uint64 `json:"selector_reads"`
}

// DatapathStatus reports the BPF side.
type DatapathStatus struct {
	Loaded         bool   `json:"loaded"`
	Error          string `json:"error,omitempty"`
	Packets        uint64 `json:"packets"`
	Classified     uint64 `json:"classified"`
	FlowInsertFail uint64 `json:"flow_insert_fail"`
	ParseErrors    uint64 `json:"parse_errors"`
	NoIdentity     uint64 `json:"no_identity"`
	TaggedSockets  int    `json:"tagged_existing_sockets"`
	// The receive side (TC ingress) and download limits.
	RxPackets     uint64 `json:"rx_packets"`
	RxClassified  uint64 `json:"rx_classified"`
	RxDrops       uint64 `json:"rx_drops"`
	RxParseErrors uint64 `json:"rx_parse_errors"`
	RxNoSocket    uint64 `json:"rx_no_socket"`
	RwndClamps    uint64 `json:"rwnd_clamps"`
	// What the kernel let the daemon load (docs/kernels.md): Loops is
	// the loop variant (bpf_loop, or bounded: smaller policies), Attach
	// how the classifier is attached to links (tcx or clsact), and
	// MPTCPIdentity whether MPTCP subflows take their MPTCP socket's
	// identity (bpf_skc_to_mptcp_sock, Linux 5.19).
	Loops         string `json:"loops,omitempty"`
	Attach        string `json:"attach,omitempty"`
	MPTCPIdentity bool   `json:"mptcp_identity,omitempty"`
}

// LinkStatus is a managed link as configured and as found in the kernel.
type LinkStatus struct {
	policy.Link
	Ifindex    int         `json:"ifindex"`
	Attached   bool        `json:"attached"` // egress classifier attached
	Shaping    bool        `json:"shaping"`  // HTB tree in place
	Reserved   policy.Rate `json:"reserved"`
	Reservable policy.Rate `json:"reservable_capacity"`
	// Guarantees are who holds Reserved, largest first: classes, rules,
	// reservations, the scheduled qsockets together and the real-time
	// channels admitted on the link (one budget per link).
	Guarantees []policy.Contribution `json:"guarantees,omitempty"`
	Error      string                `json:"error,omitempty"`
	// XDP: the XDP shield is on the link (docs/ddos.md); SynSeen and
	// SynDropped count the pure SYNs it saw and dropped under the
	// link's SYN limits.
	XDP        bool   `json:"xdp,omitempty"`
	SynSeen    uint64 `json:"syn_seen,omitempty"`
	SynDropped uint64 `json:"syn_dropped,omitempty"`
	// IngressLevels is how the link's ingress_rate is shared now: the
	// class priorities that received anything in the last epoch (200 ms).
	IngressLevels []IngressLevel `json:"ingress_levels,omitempty"`
	// EgressAuto and IngressAuto are the automatic rates of a link whose
	// egress_rate or ingress_rate is "auto" (docs/autorate.md).
	EgressAuto  *AutoRate `json:"egress_auto,omitempty"`
	IngressAuto *AutoRate `json:"ingress_auto,omitempty"`
}

// AutoRate is an automatic link rate: the rate in force, the capacity
// estimate (0: none yet), and the last change.
type AutoRate struct {
	InForce  uint64     `json:"rate_in_force_bps"`
	Estimate uint64     `json:"estimate_bps"`
	Changes  uint64     `json:"changes"`
	Reason   string     `json:"reason,omitempty"` // of the last change
	Changed  *time.Time `json:"changed,omitempty"`
}

// IngressLevel is one class priority of a link's ingress budget: what it
// may receive (the rate less what higher priorities received), what it
// received, and its flows, over the last epoch.
type IngressLevel struct {
	Priority int    `json:"priority"`
	Avail    uint64 `json:"avail_bps"`
	Used     uint64 `json:"used_bps"`
	Flows    uint32 `json:"flows"`
}

// Counts summarises the policy and the flow table.
type Counts struct {
	Links   int `json:"links"`
	Classes int `json:"classes"`
	Rules   int `json:"rules"`
	Flows   int `json:"flows"`
	Runs    int `json:"runs"`
}

// RuleInfo is a rule as listed by the API, with where it came from.
type RuleInfo struct {
	// Rule is nested, not embedded: policy.Rule has its own UnmarshalJSON,
	// which would swallow the other fields.
	Rule   policy.Rule `json:"rule"`
	Source string      `json:"source"` // "config", "api" or "run"
	Slot   int         `json:"slot"`
	// Resolved says what the app selectors resolved to right now, e.g.
	// "exe: 2 files", "unit: not running".
	Resolved []string `json:"resolved,omitempty"`
	// Quota and Schedule report the rule's quota usage and schedule state
	// now (nil when the rule has none).
	Quota    *QuotaStatus    `json:"quota,omitempty"`
	Schedule *ScheduleStatus `json:"schedule,omitempty"`
}

// QuotaStatus is a rule's quota in its current period.
type QuotaStatus struct {
	Quota       policy.Size `json:"quota"`
	Used        uint64      `json:"used_bytes"`
	Period      string      `json:"period"`
	Direction   string      `json:"direction"`
	Action      string      `json:"action"`
	PeriodStart time.Time   `json:"period_start"`
	NextReset   time.Time   `json:"next_reset"`
	Reached     bool        `json:"reached"`
	ReachedAt   *time.Time  `json:"reached_at,omitempty"`
}

// ScheduleStatus says whether a rule is inside its schedule now and when
// that changes next (nil: not within eight days).
type ScheduleStatus struct {
	Active     bool       `json:"active"`
	NextChange *time.Time `json:"next_change,omitempty"`
}

// ClassInfo is a class as listed by the API.
type ClassInfo struct {
	Class  policy.Class `json:"class"`
	Source string       `json:"source"`
}

// RunRequest asks the daemon to put a process (the caller itself) under a
// policy; the CLI then starts the program as its child.
type RunRequest struct {
	PID   int         `json:"pid"`
	Class string      `json:"class,omitempty"`
	DSCP  policy.DSCP `json:"dscp"`
	MaxBW policy.Rate `json:"maxbw,omitempty"`
	// MaxBWIn limits what the program receives (rule field maxbw_in).
	MaxBWIn policy.Rate `json:"maxbw_in,omitempty"`
	Cmd     string      `json:"cmd,omitempty"` // for display
}

// Run is an active `hostqos run`.
type Run struct {
	ID     string    `json:"id"`
	PID    int       `json:"pid"`
	UID    uint32    `json:"uid"`
	Cgroup string    `json:"cgroup"`
	Rule   string    `json:"rule"`
	Cmd    string    `json:"cmd,omitempty"`
	Since  time.Time `json:"since"`
}

// Counter is a cumulative counter with its current rate.
type Counter struct {
	Packets uint64  `json:"packets"`
	Bytes   uint64  `json:"bytes"`
	Drops   uint64  `json:"drops"`
	RateBps float64 `json:"rate_bps"` // bits per second over the last sample interval
	PktRate float64 `json:"rate_pps"` // packets per second
}

// Add adds o's counts and rates to c (an app's sum of its flows).
func (c *Counter) Add(o Counter) {
	c.Packets += o.Packets
	c.Bytes += o.Bytes
	c.Drops += o.Drops
	c.RateBps += o.RateBps
	c.PktRate += o.PktRate
}

// RuleStat is one row of GET /v1/stats/rules. The embedded Counter is the
// sent side (egress: drops are drop rules and policers), In the received
// side (TC ingress: drops are what a download limit dropped, UDP only).
type RuleStat struct {
	Rule  string `json:"rule"`
	Class string `json:"class"`
	Counter
	In Counter `json:"in"`
}

// ClassStat is one row of GET /v1/stats/classes: what the class's HTB leaf on
// a link carried (including traffic no rule matched), or the sum of the
// rules in the class when the link does not shape.
type ClassStat struct {
	Class      string `json:"class"`
	Link       string `json:"link"`
	Backlog    uint32 `json:"backlog_packets"`
	Overlimits uint64 `json:"overlimits"`
	Counter
	// In is what the class received on all managed links (its rules' IN,
	// and for class default what no rule matched; the receive side is
	// counted per rule, not per link, so each link's row of a class
	// repeats it). Drops: UDP beyond a download limit or a link's
	// ingress budget.
	In Counter `json:"in"`
}

// LinkStat is one row of GET /v1/stats/links: a managed link's interface
// counters (the kernel's, /proc/net/dev: every frame, hostqos's or not),
// sent (Counter) and received (In); drops are the interface's own.
type LinkStat struct {
	Link string `json:"link"`
	Counter
	In Counter `json:"in"`
}

// AppStat is one row of GET /v1/stats/apps: flows aggregated by process.
type AppStat struct {
	PID   uint32   `json:"pid"`
	Comm  string   `json:"comm"`
	Exe   string   `json:"exe,omitempty"`
	UID   uint32   `json:"uid"`
	Flows int      `json:"flows"`
	Rules []string `json:"rules,omitempty"`
	// Exited: the process has exited (its flows stay in the flow table
	// until they are evicted).
	Exited bool `json:"exited,omitempty"`
	// A container (docs/containers.md) is one app, whichever of its
	// processes sent: its name, runtime and image (PID 0).
	Container string `json:"container,omitempty"`
	Runtime   string `json:"runtime,omitempty"`
	Image     string `json:"image,omitempty"`
	Counter
	In Counter `json:"in"` // received side, as in RuleStat
}

// FlowStat is one row of GET /v1/stats/flows.
type FlowStat struct {
	Proto  string `json:"proto"`
	Local  string `json:"local"`
	Remote string `json:"remote"`
	Rule   string `json:"rule,omitempty"`
	PID    uint32 `json:"pid,omitempty"`
	Comm   string `json:"comm,omitempty"`
	Exe    string `json:"exe,omitempty"`
	UID    uint32 `json:"uid"`
	// Exited: the process that opened the flow has exited.
	Exited bool `json:"exited,omitempty"`
	// Container, Runtime and Image name the container whose flow it is
	// ("?": a container that is gone); PID is then a process of it, or 0.
	Container string  `json:"container,omitempty"`
	Runtime   string  `json:"runtime,omitempty"`
	Image     string  `json:"image,omitempty"`
	AgeSec    float64 `json:"age_s"`
	IdleSec   float64 `json:"idle_s"`
	Counter
	In Counter `json:"in"` // received side, as in RuleStat
}

// Stats is the answer to GET /v1/stats/{kind}; exactly one slice is set.
type Stats struct {
	Time     time.Time   `json:"time"`
	Interval float64     `json:"interval_s"`
	Rules    []RuleStat  `json:"rules,omitempty"`
	Classes  []ClassStat `json:"classes,omitempty"`
	Links    []LinkStat  `json:"links,omitempty"`
	Apps     []AppStat   `json:"apps,omitempty"`
	Flows    []FlowStat  `json:"flows,omitempty"`
}

// Check bounds a run request's fields (the daemon calls it after decoding):
// the class is a name, the command line at most policy.MaxRunCmdLen bytes,
// the pid not negative.
func (r *RunRequest) Check() error {
	var errs policy.Errors
	if fe := policy.CheckLen("run", "class", r.Class, policy.MaxNameLen); fe != nil {
		errs = append(errs, fe)
	}
	if fe := policy.CheckLen("run", "cmd", r.Cmd, policy.MaxRunCmdLen); fe != nil {
		fe.Fix = "the command line is kept for display only; send at most its first " + strconv.Itoa(policy.MaxRunCmdLen) + " bytes"
		errs = append(errs, fe)
	}
	if r.PID < 0 {
		errs = append(errs, &policy.FieldError{Object: "run", Field: "pid", Value: strconv.Itoa(r.PID), Literal: true, Reason: "negative", Fix: "leave it out (0) for the caller"})
	}
	if len(errs) == 0 {
		return nil
	}
	return errs
}

// DisplayCmd is the command line a run request carries for display: the
// arguments joined, cut to policy.MaxRunCmdLen bytes (at a character).
func DisplayCmd(args []string) string {
	// Invalid UTF-8 becomes U+FFFD now, as JSON would make it (3 bytes
	// each), so that the cut below is the length the daemon sees.
	s := strings.ToValidUTF8(strings.Join(args, " "), "\uFFFD")
	if len(s) > policy.MaxRunCmdLen {
		s = strings.ToValidUTF8(s[:policy.MaxRunCmdLen], "")
	}
	return s
}
