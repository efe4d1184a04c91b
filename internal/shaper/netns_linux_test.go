package shaper

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// Test helpers: private network namespaces named hqsh-<random>, veth pairs
// inside them, and running code on a thread that has entered one.

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces, qdiscs)")
	}
}

func randSuffix() string {
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

func sh(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// newNetns creates a network namespace removed at the end of the test.
func newNetns(t *testing.T) string {
	t.Helper()
	name := "hqsh-" + randSuffix()
	sh(t, "ip", "netns", "add", name)
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
			t.Errorf("deleting netns %s: %v\n%s", name, err, out)
		}
	})
	sh(t, "ip", "-n", name, "link", "set", "lo", "up")
	return name
}

// newVeth creates a veth pair hq0/hq1 inside a fresh namespace and returns
// the namespace and the ifindex of hq0 there.
func newVeth(t *testing.T) (string, int) {
	t.Helper()
	ns := newNetns(t)
	sh(t, "ip", "-n", ns, "link", "add", "hq0", "type", "veth", "peer", "name", "hq1")
	sh(t, "ip", "-n", ns, "link", "set", "hq0", "up")
	sh(t, "ip", "-n", ns, "link", "set", "hq1", "up")
	return ns, ifindexIn(t, ns, "hq0")
}

func ifindexIn(t *testing.T, ns, dev string) int {
	t.Helper()
	var idx int
	mustIn(t, ns, func() error {
		ifi, err := net.InterfaceByName(dev)
		if err != nil {
			return err
		}
		idx = ifi.Index
		return nil
	})
	return idx
}

// inNetns runs fn on a locked OS thread that has entered namespace ns. The
// thread is never unlocked, so the runtime discards it when fn returns;
// sockets fn creates stay in ns.
func inNetns(ns string, fn func() error) error {
	ch := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		fd, err := unix.Open("/run/netns/"+ns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			ch <- fmt.Errorf("opening netns %s: %w", ns, err)
			return
		}
		err = unix.Setns(fd, unix.CLONE_NEWNET)
		unix.Close(fd)
		if err != nil {
			ch <- fmt.Errorf("entering netns %s: %w", ns, err)
			return
		}
		ch <- fn()
	}()
	return <-ch
}

func mustIn(t *testing.T, ns string, fn func() error) {
	t.Helper()
	if err := inNetns(ns, fn); err != nil {
		t.Fatal(err)
	}
}
