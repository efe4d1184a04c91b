// Package containers finds the containers whose traffic passes through the
// daemon's network namespace — Docker, Podman and containerd/CRI
// containers, and named network namespaces an admin declares as containers
// — and keeps that set current as they start and stop.
//
// The kernel is read first: a runtime's container is a cgroup directory
// named after its id (docker-<id>.scope, /docker/<id>, libpod-<id>,
// cri-containerd-<id>.scope, /k8s.io/<id>, ...) in the cgroup v2 tree or, on
// hybrid hosts where a runtime has none there, in a v1 hierarchy; a process
// listed in its cgroup.procs gives its network namespace. A container
// belongs to this daemon when it shares the daemon's network namespace or
// has a veth whose peer is an interface of it. Names, images and labels come
// from the runtime's API over its Unix socket when it answers, else from
// what the runtime leaves on disk, else the name is the short id.
package containers

import (
	"cmp"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"
)

// Runtime is the kind of a container.
type Runtime string

// The runtimes.
const (
	Docker     Runtime = "docker"
	Podman     Runtime = "podman"
	Containerd Runtime = "containerd"
	Netns      Runtime = "netns" // a named network namespace declared a container
)

// Veth is the host-side end of a container's veth, in the daemon's network
// namespace.
type Veth struct {
	Ifindex int    `json:"ifindex"`
	Name    string `json:"name"`
}

// Container is one container found.
type Container struct {
	Runtime     Runtime           `json:"runtime"`
	ID          string            `json:"id"` // full id; a bare netns: its name
	Name        string            `json:"name"`
	Image       string            `json:"image,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Cgroup      string            `json:"cgroup,omitempty"`       // cgroup2 path relative to the cgroup2 root; "" when it has none there
	PID         int               `json:"pid,omitempty"`          // one process of it (0: none, e.g. an empty bare netns)
	HostNetwork bool              `json:"host_network,omitempty"` // shares the daemon's network namespace
	NetnsCookie uint64            `json:"netns_cookie,omitempty"` // SO_NETNS_COOKIE of its network namespace (0 with HostNetwork)
	Veths       []Veth            `json:"veths,omitempty"`
	// PodUID is the Kubernetes pod the container belongs to, from its
	// cgroup path as kubelet names it ("" for none).
	PodUID string `json:"pod_uid,omitempty"`
}

// ShortID is the first 12 characters of a runtime's id (the id itself for
// shorter ones), the name of a container whose runtime did not say.
func ShortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

func (c Container) clone() Container {
	c.Labels = maps.Clone(c.Labels)
	c.Veths = slices.Clone(c.Veths)
	return c
}

func (c Container) equal(o Container) bool {
	return c.Runtime == o.Runtime && c.ID == o.ID && c.Name == o.Name && c.Image == o.Image &&
		c.Cgroup == o.Cgroup && c.PID == o.PID && c.HostNetwork == o.HostNetwork &&
		c.NetnsCookie == o.NetnsCookie && maps.Equal(c.Labels, o.Labels) && slices.Equal(c.Veths, o.Veths) &&
		c.PodUID == o.PodUID
}

func compareContainers(a, b Container) int {
	return cmp.Or(cmp.Compare(a.Runtime, b.Runtime), cmp.Compare(a.ID, b.ID))
}

// Limits on what a host's users and runtimes can make this package hold.
const (
	MaxContainers  = 4096    // containers tracked; more are counted and logged, not tracked
	maxCandidates  = 16384   // container cgroups looked at (of all network namespaces)
	MaxLabels      = 64      // labels kept per container (the first in key order)
	MaxLabelKey    = 128     // bytes of a label key; longer labels are dropped
	MaxLabelValue  = 256     // bytes of a label value; longer ones are dropped
	MaxNameLen     = 253     // bytes of a name or image; longer ones are cut
	maxVeths       = 64      // veths kept per container
	maxAPIResponse = 8 << 20 // bytes of a runtime API answer
	maxFileRead    = 4 << 20 // bytes of a runtime's JSON file on disk
	maxCgroupDirs  = 65536   // cgroup directories a walk visits
	maxCgroupDepth = 8       // levels below a cgroup root a walk descends
	apiTimeout     = 2 * time.Second
)

// Config says where to look.
type Config struct {
	CgroupRoot string   // the cgroup2 mount ("" = find it)
	CgroupV1   string   // the v1 hierarchy root, e.g. /sys/fs/cgroup ("" = detect; "-" = none)
	ProcRoot   string   // "/proc"
	NetnsDir   string   // "/run/netns"
	NetnsNames []string // globs of NetnsDir entries that count as bare-netns containers (default none)
	// DockerSocket and PodmanSocket are the runtimes' API sockets
	// (defaults /run/docker.sock and /var/run/docker.sock,
	// /run/podman/podman.sock; "-" = do not ask).
	DockerSocket, PodmanSocket string
	// DockerRoot, PodmanStorage and ContainerdState are where the runtimes
	// keep what is read when their API does not answer (defaults
	// /var/lib/docker, /var/lib/containers/storage, /run/containerd).
	DockerRoot, PodmanStorage, ContainerdState string
	Interval                                   time.Duration // backstop rescan period (default 10 s)
}

func (c Config) withDefaults() Config {
	def := func(s *string, v string) {
		if *s == "" {
			*s = v
		}
	}
	def(&c.ProcRoot, "/proc")
	def(&c.NetnsDir, "/run/netns")
	def(&c.PodmanSocket, "/run/podman/podman.sock")
	def(&c.DockerRoot, "/var/lib/docker")
	def(&c.PodmanStorage, "/var/lib/containers/storage")
	def(&c.ContainerdState, "/run/containerd")
	if c.Interval <= 0 {
		c.Interval = 10 * time.Second
	}
	return c
}

// Scan finds the containers once.
func Scan(cfg Config) ([]Container, error) {
	s, err := newScanner(cfg.withDefaults(), slog.New(slog.DiscardHandler))
	if err != nil {
		return nil, err
	}
	defer s.close()
	s.scan(true)
	return s.list(), nil
}

// checkGlobs validates the NetnsNames patterns.
func checkGlobs(globs []string) error {
	for i, g := range globs {
		if _, err := matchGlob(g, ""); err != nil {
			return fmt.Errorf("netns name pattern %d %q: %w (use shell globs such as ctr-*)", i, g, err)
		}
	}
	return nil
}
