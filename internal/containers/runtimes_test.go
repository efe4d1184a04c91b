package containers

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/hostqos/hostqos/internal/containers/containertest"
	"github.com/hostqos/hostqos/internal/testutil"
)

// TestRealRuntimes runs a Podman and a Docker container (at the same time)
// whose network is a namespace the test made, and checks what a daemon in
// the "host" namespace at the other end of their veths finds: runtime, id,
// name, image, labels, cgroup, a process, netns cookie, host-side veth; and
// that their removal is seen. Offline: the image is imported from busybox.
func TestRealRuntimes(t *testing.T) {
	containertest.NeedRuntimes(t, "podman", "runc", "dockerd", "docker")
	containertest.StartDocker(t)
	img := containertest.Image(t, "all")
	p := testutil.NewPairNamed(t, "host", "pod")
	w := startWatcher(t, p.A, Config{})
	if _, l := w.Snapshot(); len(l) != 0 {
		t.Fatalf("a fresh namespace has containers: %+v", l)
	}

	checkFields := func(t *testing.T, c *containertest.Container, rt Runtime, labels map[string]string, netns string, veths []Veth) {
		t.Helper()
		_, l := w.Snapshot()
		got, ok := find(l, rt, c.ID)
		if !ok {
			t.Fatalf("%s container %s gone", rt, c.Name)
		}
		want := Container{Runtime: rt, ID: c.ID, Name: c.Name, Image: img, Labels: got.Labels,
			Cgroup: c.Cgroup2(t), PID: got.PID, NetnsCookie: cookieOf(t, netns), Veths: veths}
		if !got.equal(want) {
			t.Errorf("%s container:\n got %+v\nwant %+v", rt, got, want)
		}
		for k, v := range labels {
			if got.Labels[k] != v {
				t.Errorf("%s container label %s = %q, want %q (labels %v)", rt, k, got.Labels[k], v, got.Labels)
			}
		}
		if !sameNetns(t, got.PID, netns) {
			t.Errorf("%s container: pid %d is not in its network namespace", rt, got.PID)
		}
		t.Logf("%s: cgroup %s", rt, got.Cgroup)
	}
	removed := func(t *testing.T, c *containertest.Container, rt Runtime) {
		t.Helper()
		start := time.Now()
		c.Remove(t)
		done := time.Now()
		gone := waitFor(t, w, "removal", func(l []Container) bool { _, ok := find(l, rt, c.ID); return !ok })
		t.Logf("%s: removal seen %v after rm started (rm took %v)", rt,
			gone.Sub(start).Round(time.Millisecond), done.Sub(start).Round(time.Millisecond))
	}

	t.Run("podman", func(t *testing.T) {
		t.Parallel()
		labels := map[string]string{"app": "web", "tier": "front"}
		name := containertest.Name("hqct-pod")
		found := make(chan time.Time, 1)
		go func() { // when the watcher first has it, named: watching from before the run
			for range 100 {
				if _, l := w.Snapshot(); slices.ContainsFunc(l, func(c Container) bool { return c.Name == name }) {
					found <- time.Now()
					return
				}
				select {
				case <-w.Changed():
				case <-time.After(100 * time.Millisecond):
				}
			}
		}()
		c := containertest.RunPodman(t, containertest.Options{Image: img, Name: name,
			Labels: labels, Netns: "/run/netns/" + p.B.NetnsName})
		waitFor(t, w, "podman container", func(l []Container) bool {
			got, ok := find(l, Podman, c.ID)
			return ok && got.Name == c.Name && hasLabels(got.Labels, labels)
		})
		seen := <-found
		t.Logf("podman: found with its name %v after `podman run` started; the command took %v",
			seen.Sub(c.Started).Round(time.Millisecond), c.Ran.Sub(c.Started).Round(time.Millisecond))
		checkFields(t, c, Podman, labels, "/run/netns/"+p.B.NetnsName, []Veth{{p.IndexA, p.IfA}})
		// The v1 hierarchy alone finds it too (hosts where a runtime has
		// no v2 cgroup): then without a cgroup2 path.
		var v1 []Container
		p.A.MustDo(t, func() error {
			var err error
			v1, err = Scan(Config{CgroupRoot: "-"})
			return err
		})
		if got, ok := find(v1, Podman, c.ID); !ok || got.Cgroup != "" || got.Name != c.Name || !sameNetns(t, got.PID, "/run/netns/"+p.B.NetnsName) {
			t.Errorf("scan of the v1 hierarchy only: %+v, want the container without a cgroup2 path", v1)
		}
		removed(t, c, Podman)
	})
	t.Run("docker", func(t *testing.T) {
		t.Parallel()
		labels := map[string]string{"app": "db"}
		c := containertest.RunDocker(t, containertest.Options{Image: img, Name: containertest.Name("hqct-dock"), Labels: labels})
		// Without a veth into the daemon's namespace it is not its container.
		var l []Container
		p.A.MustDo(t, func() error {
			var err error
			l, err = Scan(Config{})
			return err
		})
		if _, ok := find(l, Docker, c.ID); ok {
			t.Errorf("a --network none container was found before it had a veth: %+v", l)
		}
		host := "hqd" + testutil.RandHex(3)
		start := time.Now()
		idx := c.AddVeth(t, p.A.Handle(), host, "eth0")
		seen := waitFor(t, w, "docker container", func(l []Container) bool {
			got, ok := find(l, Docker, c.ID)
			return ok && got.Name == c.Name && slices.Equal(got.Veths, []Veth{{idx, host}})
		})
		t.Logf("docker: found %v after its veth was made, %v after `docker run` started",
			seen.Sub(start).Round(time.Millisecond), seen.Sub(c.Started).Round(time.Millisecond))
		checkFields(t, c, Docker, labels, fmt.Sprintf("/proc/%d/ns/net", c.PID), []Veth{{idx, host}})
		removed(t, c, Docker)
	})
}

func hasLabels(have, want map[string]string) bool {
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}
