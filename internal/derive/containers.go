package derive

import (
	"fmt"
	"sort"
	"strings"

	"github.com/hostqos/hostqos/internal/datapath"
	"github.com/hostqos/hostqos/internal/policy"
)

// Container is a container the daemon found on the host (internal/
// containers), as the derive needs it: what rules select it by, and where
// its traffic is seen.
type Container struct {
	Runtime, ID, Name, Image string
	Labels                   map[string]string
	// Cgroup is its cgroup2 path relative to the root ("" when it has
	// none there).
	Cgroup string
	// HostNetwork: it shares the daemon's network namespace (its sockets
	// are the host's; a rule finds them by its cgroup). Otherwise
	// NetnsCookie is its namespace's and Veths are the ifindexes of the
	// host-side ends of its veths.
	HostNetwork bool
	NetnsCookie uint64
	Veths       []int
	VethNames   []string // the names of Veths, for the views
	// PodUID is the Kubernetes pod it belongs to ("" for none).
	PodUID string
}

// classifiedAtVeth says whether the container's traffic is classified at
// the host side of its veths: it has a network namespace of its own with
// a veth into the daemon's.
func (c Container) classifiedAtVeth() bool {
	return !c.HostNetwork && c.NetnsCookie != 0 && len(c.Veths) > 0
}

// Seen says whether the container's traffic can be told from the host's:
// at its veths, or (on the host's network) by its own cgroup.
func (c Container) Seen() bool { return c.classifiedAtVeth() || (c.HostNetwork && c.Cgroup != "") }

// ContainerNumber is the number a container with a network namespace of
// its own has in the datapath (its sockets' hq_ident.ctr, its selector
// key datapath.ContainerKey): the low 32 bits of the namespace's cookie.
// Cookies count up from boot, so the number is the same in every derive
// and across daemon restarts (sockets keep it) while fewer than 2^32
// namespaces were made; never 0, which is the host's.
func ContainerNumber(cookie uint64) uint32 {
	if n := uint32(cookie); n != 0 {
		return n
	}
	return 1 << 31
}

// Containers is what the kernel must hold for the containers: the
// network namespaces whose sockets get an identity at birth (cookie ->
// number), and the host-side veths with the identity a container's
// packet takes there when its socket has none.
type Containers struct {
	Netns map[uint64]uint32
	Veths map[int]datapath.Identity
}

// planContainers is the kernel state of the containers found: every one
// with a namespace of its own is counted and classified at its veths,
// whether or not a rule selects it (its traffic is its own in the views).
func planContainers(cs []Container, d *Desired) {
	d.Containers = Containers{Netns: map[uint64]uint32{}, Veths: map[int]datapath.Identity{}}
	for _, c := range cs {
		if !c.classifiedAtVeth() {
			continue
		}
		if len(d.Containers.Netns) >= datapath.MaxContainers {
			d.Warnings = append(d.Warnings, fmt.Sprintf("more than %d containers: %s %s and later ones are counted as the host's traffic", datapath.MaxContainers, c.Runtime, c.Name))
			break
		}
		n := ContainerNumber(c.NetnsCookie)
		d.Containers.Netns[c.NetnsCookie] = n
		for _, v := range c.Veths {
			d.Containers.Veths[v] = datapath.Identity{Container: n}
		}
	}
}

// resolveContainers adds to dr the keys of the containers r selects: a
// container with a namespace of its own by its number, one on the host's
// network by its cgroup. nothing reports that r selects no container now.
func resolveContainers(res Resolver, dr *datapath.Rule, r policy.Rule, cs []Container, d *Desired, notes *[]string) (nothing bool) {
	sel := r.ContainerSelector()
	nothing = selectContainers(res, dr, r, cs, d, notes, func(c Container) bool { return sel.Matches(c.ID, c.Name, c.Image, c.Labels) })
	if nothing {
		d.Warnings = append(d.Warnings, fmt.Sprintf("rule %q: %s selects no running container; the rule matches nothing until one starts", r.Name, describeSelector(r)))
	}
	return nothing
}

// selectContainers adds to dr the keys of the containers of cs that match:
// a container with a namespace of its own by its number, one on the
// host's network by its cgroup. nothing reports that none matches now.
func selectContainers(res Resolver, dr *datapath.Rule, r policy.Rule, cs []Container, d *Desired, notes *[]string, match func(Container) bool) (nothing bool) {
	var names, unseen []string
	keys := map[uint64]bool{} // containers of one pod share a namespace
	for _, c := range cs {
		if !match(c) {
			continue
		}
		switch {
		case c.classifiedAtVeth():
			if k := datapath.ContainerKey(ContainerNumber(c.NetnsCookie)); !keys[k] {
				keys[k] = true
				dr.Cgroups = append(dr.Cgroups, datapath.CgroupRef{ID: k})
			}
		case c.HostNetwork && c.Cgroup != "":
			ref, err := res.Cgroup(c.Cgroup)
			if err != nil {
				unseen = append(unseen, c.Name)
				continue
			}
			dr.Cgroups = append(dr.Cgroups, ref)
		default:
			unseen = append(unseen, c.Name)
			continue
		}
		names = append(names, string(c.Runtime)+"/"+c.Name)
	}
	sort.Strings(names)
	if len(unseen) > 0 {
		sort.Strings(unseen)
		d.Warnings = append(d.Warnings, fmt.Sprintf("rule %q: container(s) %s share the host's network and have no cgroup of their own in the cgroup2 hierarchy, or reach the host by no veth: their traffic cannot be told from the host's", r.Name, strings.Join(unseen, ", ")))
	}
	if len(names) == 0 {
		*notes = append(*notes, "containers: none running")
		return true
	}
	const show = 8
	if len(names) > show {
		*notes = append(*notes, fmt.Sprintf("containers: %s and %d more", strings.Join(names[:show], ","), len(names)-show))
	} else {
		*notes = append(*notes, "containers: "+strings.Join(names, ","))
	}
	return false
}

// describeSelector names a rule's container selectors as the user wrote
// them.
func describeSelector(r policy.Rule) string {
	var parts []string
	if r.Container != "" {
		parts = append(parts, "container "+r.Container)
	}
	if r.Image != "" {
		parts = append(parts, "image "+r.Image)
	}
	if r.ContainerLabel != "" {
		parts = append(parts, "label "+r.ContainerLabel)
	}
	return strings.Join(parts, ", ")
}
