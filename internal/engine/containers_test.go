package engine

import (
	"errors"
	"reflect"
	"testing"

	"github.com/hostqos/hostqos/internal/datapath"
	"github.com/hostqos/hostqos/internal/derive"
	"github.com/hostqos/hostqos/internal/host/fakehost"
)

const containerConfig = `
[[link]]
name = "eth0"
egress_rate = "100mbit"

[[rule]]
name = "db"
container = "db"
maxbw = "5mbit"
`

func (env *testEnv) startContainers(t *testing.T) (*Engine, *fakehost.FakeContainerKernel) {
	t.Helper()
	ck := fakehost.NewFakeContainerKernel(env.k)
	e, err := New(env.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start(Host{Kernel: ck, Containers: ck}); err != nil {
		t.Fatal(err)
	}
	return e, ck
}

// ruleCgroups are the cgroup keys of the datapath rule in slot of rule
// name, nil when the datapath does not hold it.
func ruleCgroups(e *Engine, k *fakehost.FakeKernel, name string) []datapath.CgroupRef {
	slot := e.slots.View().Rules[name]
	for _, r := range k.Rules.Rules {
		if int(r.Slot) == slot {
			return r.Cgroups
		}
	}
	return nil
}

// TestContainersFollowTheWatcher: a container found is classified at its
// veths and selected by the rules that name it; one that is gone leaves
// nothing in the kernel; a failed push leaves what the kernel held.
func TestContainersFollowTheWatcher(t *testing.T) {
	env := newEnv(t, containerConfig)
	e, ck := env.startContainers(t)
	if got := ruleCgroups(e, env.k, "db"); got != nil {
		t.Fatalf("rule db holds %v with no container running", got)
	}
	db := derive.Container{Runtime: "podman", ID: "aaaa11112222", Name: "db", NetnsCookie: 41, Veths: []int{7}}
	web := derive.Container{Runtime: "docker", ID: "bbbb11112222", Name: "web", NetnsCookie: 42, Veths: []int{8}}
	e.SetContainers([]derive.Container{db, web})
	if want := map[uint64]uint32{41: 41, 42: 42}; !reflect.DeepEqual(ck.Netns, want) {
		t.Errorf("namespaces %v, want %v", ck.Netns, want)
	}
	if want := map[int]datapath.Identity{7: {Container: 41}, 8: {Container: 42}}; !reflect.DeepEqual(ck.OnVeth, want) {
		t.Errorf("veths %v, want %v", ck.OnVeth, want)
	}
	if got, want := ruleCgroups(e, env.k, "db"), []datapath.CgroupRef{{ID: datapath.ContainerKey(41)}}; !reflect.DeepEqual(got, want) {
		t.Errorf("rule db selects %v, want %v", got, want)
	}
	// The same set again writes nothing.
	calls := len(env.k.Calls)
	e.SetContainers([]derive.Container{db, web})
	if len(env.k.Calls) != calls {
		t.Errorf("the same containers again made calls %v", env.k.Calls[calls:])
	}

	// db stops; attaching a new container fails: nothing changes.
	cache := derive.Container{Runtime: "docker", ID: "cccc11112222", Name: "cache", NetnsCookie: 43, Veths: []int{9}}
	env.k.FailNth("AttachVeth", 1, errors.New("no such device"))
	e.SetContainers([]derive.Container{web, cache})
	if len(e.Containers()) != 2 || e.Containers()[0].Name != "db" {
		t.Errorf("a failed push changed the containers to %v", e.Containers())
	}
	if _, ok := ck.OnVeth[7]; !ok || ruleCgroups(e, env.k, "db") == nil {
		t.Errorf("a failed push removed db: veths %v, rule %v", ck.OnVeth, ruleCgroups(e, env.k, "db"))
	}
	// The next rescan tries again, and it goes through.
	e.Rescan()
	if want := map[int]datapath.Identity{8: {Container: 42}, 9: {Container: 43}}; !reflect.DeepEqual(ck.OnVeth, want) {
		t.Errorf("veths %v, want %v", ck.OnVeth, want)
	}
	if want := map[uint64]uint32{42: 42, 43: 43}; !reflect.DeepEqual(ck.Netns, want) {
		t.Errorf("namespaces %v, want %v", ck.Netns, want)
	}
	if got := ruleCgroups(e, env.k, "db"); got != nil {
		t.Errorf("rule db still selects %v after db stopped", got)
	}

	// A restart removes what an earlier run left for containers gone.
	e.Detach()
	ck.OnVeth[99] = datapath.Identity{Container: 5}
	e2, err := New(env.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := e2.Start(Host{Kernel: ck, Containers: ck}); err != nil {
		t.Fatal(err)
	}
	defer e2.Detach()
	if len(ck.OnVeth) != 0 {
		t.Errorf("veths of an earlier run's containers survived a restart that found none: %v", ck.OnVeth)
	}
}
