package derive

import (
	"reflect"
	"strings"
	"testing"

	"github.com/hostqos/hostqos/internal/datapath"
	"github.com/hostqos/hostqos/internal/policy"
)

// testContainers: two containers with namespaces of their own (db with
// two veths), one on the host's network with a cgroup, one on the host's
// network without one.
var testContainers = []Container{
	{Runtime: "podman", ID: "aaaa11112222333344445555", Name: "db", Image: "docker.io/library/postgres:16",
		Labels: map[string]string{"tier": "db"}, NetnsCookie: 0x100000007, Veths: []int{10, 11}},
	{Runtime: "docker", ID: "bbbb11112222333344445555", Name: "web-1", Image: "docker.io/library/nginx:1.27",
		Labels: map[string]string{"tier": "web"}, NetnsCookie: 9, Veths: []int{12}},
	{Runtime: "docker", ID: "cccc11112222333344445555", Name: "web-host", Image: "docker.io/library/nginx:1.27",
		HostNetwork: true, Cgroup: "/system.slice/db.service"},
	{Runtime: "docker", ID: "dddd11112222333344445555", Name: "web-v1", Image: "docker.io/library/nginx:1.27",
		HostNetwork: true},
}

func TestDeriveContainers(t *testing.T) {
	p := basePolicy(policy.Link{Name: "eth0", EgressRate: 100e6})
	db := udpRule("db")
	db.Container, db.MaxBW = "db", 5e6
	web := udpRule("web")
	web.Image = "nginx"
	byID := udpRule("by-id")
	byID.Container = "bbbb11112222"
	label := udpRule("label")
	label.ContainerLabel = "tier=db"
	none := udpRule("none")
	none.Container = "cache-*"
	p.Rules = []policy.Rule{db, web, byID, label, none}
	in := testInput(p, nil)
	in.Containers = testContainers
	d, err := Derive(in)
	if err != nil {
		t.Fatal(err)
	}
	key := func(cookie uint64) datapath.CgroupRef {
		return datapath.CgroupRef{ID: datapath.ContainerKey(ContainerNumber(cookie))}
	}
	for name, want := range map[string][]datapath.CgroupRef{
		"db":    {key(0x100000007)},
		"web":   {key(9), {ID: 77, Level: 2}}, // web-host by its cgroup; web-v1 cannot be told apart
		"by-id": {key(9)},
		"label": {key(0x100000007)},
	} {
		if got := rule(t, in, d, name).Cgroups; !reflect.DeepEqual(got, want) {
			t.Errorf("rule %s: cgroups %v, want %v", name, got, want)
		}
	}
	for _, r := range d.Datapath.Rules {
		if int(r.Slot) == in.Slots.Rules["none"] {
			t.Errorf("a rule that selects no running container is in the datapath: %+v", r)
		}
	}
	w := strings.Join(d.Warnings, "\n")
	if !strings.Contains(w, `rule "none": container cache-* selects no running container`) || !strings.Contains(w, "web-v1") {
		t.Errorf("warnings %q", w)
	}
	if got := strings.Join(d.Resolved["web"], ","); got != "containers: docker/web-1,docker/web-host" {
		t.Errorf("resolved %q", got)
	}
	// The kernel knows every container with a namespace of its own,
	// selected or not; those on the host's network are the host's.
	n7 := ContainerNumber(0x100000007)
	want := Containers{
		Netns: map[uint64]uint32{0x100000007: n7, 9: 9},
		Veths: map[int]datapath.Identity{10: {Container: n7}, 11: {Container: n7}, 12: {Container: 9}},
	}
	if !reflect.DeepEqual(d.Containers, want) {
		t.Errorf("containers %+v, want %+v", d.Containers, want)
	}
	if n7 != 7 || ContainerNumber(1<<32) == 0 {
		t.Errorf("container numbers: %d, %d", n7, ContainerNumber(1<<32))
	}
	// A container's rule gets its HTB leaf on the managed link as any
	// rule (the datapath hands the class on from the veth).
	if len(d.Rules) != 1 || d.Rules[0].MaxBW != 5e6 {
		t.Errorf("shaper rules %+v", d.Rules)
	}
}
