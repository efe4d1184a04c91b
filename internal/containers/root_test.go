package containers

import (
	"context"
	"fmt"
	"log/slog"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hostqos/hostqos/internal/datapath"

	"github.com/hostqos/hostqos/internal/testutil"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// tlog is a logger writing to the test's log.
func tlog(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(b)))
	return len(b), nil
}

// startWatcher runs a watcher inside ns (as the daemon would run in its
// namespace) until the test ends.
func startWatcher(t *testing.T, ns *testutil.NetNS, cfg Config) *Watcher {
	t.Helper()
	var w *Watcher
	ns.MustDo(t, func() error {
		var err error
		w, err = NewWatcher(cfg, tlog(t))
		return err
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ns.Do(func() error { return w.Run(ctx) }) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("watcher in %s: %v", ns.NetnsName, err)
		}
	})
	return w
}

// waitFor waits (at most 10 s: a loaded machine) until ok holds of the
// watcher's set, and returns when it first did.
func waitFor(t *testing.T, w *Watcher, what string, ok func([]Container) bool) time.Time {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		if _, l := w.Snapshot(); ok(l) {
			return time.Now()
		}
		select {
		case <-w.Changed():
		case <-time.After(100 * time.Millisecond): // another waiter may have taken the signal
		case <-deadline:
			_, l := w.Snapshot()
			t.Fatalf("%s: not seen within 10 s; the watcher has %+v", what, l)
		}
	}
}

func find(l []Container, rt Runtime, id string) (Container, bool) {
	i := slices.IndexFunc(l, func(c Container) bool { return c.Runtime == rt && c.ID == id })
	if i < 0 {
		return Container{}, false
	}
	return l[i], true
}

// cookieOf is the netns cookie of the namespace at path.
func cookieOf(t *testing.T, path string) uint64 {
	t.Helper()
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	var c uint64
	if err := enter(fd, func() error {
		var err error
		c, err = datapath.NetnsCookie()
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return c
}

func sameNetns(t *testing.T, pid int, path string) bool {
	t.Helper()
	a, err1 := statNS(fmt.Sprintf("/proc/%d/ns/net", pid))
	b, err2 := statNS(path)
	return err1 == nil && err2 == nil && a == b
}

// TestBareNetns: named namespaces declared containers are found by the
// daemon whose namespace their veth leads to, and only by it, with their
// veth and cookie; a new one appears and a deleted one goes.
func TestBareNetns(t *testing.T) {
	p1 := testutil.NewPairNamed(t, "d1", "x")
	p2 := testutil.NewPairNamed(t, "d2", "y")
	dyn := "hqct-" + testutil.RandHex(4) + "-"
	cfg := Config{NetnsNames: []string{p1.B.NetnsName, p2.B.NetnsName, dyn + "*"}, Interval: time.Hour}
	w1 := startWatcher(t, p1.A, cfg)
	w2 := startWatcher(t, p2.A, cfg)

	check := func(w *Watcher, p *testutil.Pair) {
		t.Helper()
		_, l := w.Snapshot()
		if len(l) != 1 {
			t.Fatalf("daemon in %s: found %+v, want only %s", p.A.NetnsName, l, p.B.NetnsName)
		}
		c := l[0]
		want := Container{Runtime: Netns, ID: p.B.NetnsName, Name: p.B.NetnsName, PID: c.PID,
			NetnsCookie: cookieOf(t, "/run/netns/"+p.B.NetnsName), Veths: []Veth{{p.IndexA, p.IfA}}}
		if !c.equal(want) {
			t.Errorf("daemon in %s:\n got %+v\nwant %+v", p.A.NetnsName, c, want)
		}
		if c.PID != 0 && !sameNetns(t, c.PID, "/run/netns/"+p.B.NetnsName) {
			t.Errorf("pid %d is not in %s", c.PID, p.B.NetnsName)
		}
	}
	check(w1, p1)
	check(w2, p2)
	var scanned []Container
	p1.A.MustDo(t, func() error {
		var err error
		scanned, err = Scan(cfg)
		return err
	})
	if _, l := w1.Snapshot(); !slices.EqualFunc(scanned, l, Container.equal) {
		t.Errorf("Scan %+v, watcher %+v", scanned, l)
	}

	// A new one, with a veth into d1's namespace.
	name := dyn + "z"
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", name).Run() })
	fd, err := unix.Open("/run/netns/"+name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = p1.A.Handle().LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "hqz"}, PeerName: "eth0", PeerNamespace: netlink.NsFd(fd)})
	unix.Close(fd)
	if err != nil {
		t.Fatalf("add veth: %v", err)
	}
	hqz := p1.A.Ifindex(t, "hqz")
	seen := waitFor(t, w1, "new bare netns", func(l []Container) bool {
		c, ok := find(l, Netns, name)
		return ok && slices.Equal(c.Veths, []Veth{{hqz, "hqz"}})
	})
	t.Logf("new bare netns found %v after its veth was made", seen.Sub(start).Round(time.Millisecond))
	if _, l := w2.Snapshot(); len(l) != 1 {
		t.Errorf("the other daemon found %+v", l)
	}
	start = time.Now()
	if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns del: %v: %s", err, out)
	}
	gone := waitFor(t, w1, "deleted bare netns", func(l []Container) bool { _, ok := find(l, Netns, name); return !ok })
	t.Logf("deleted bare netns gone %v after ip netns del", gone.Sub(start).Round(time.Millisecond))
	check(w1, p1)
}
