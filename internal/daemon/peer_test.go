package daemon

import (
	"os"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

// TestPeerGroups: the groups of a socket's peer come from the connection
// (SO_PEERGROUPS), the same the peer process has.
func TestPeerGroups(t *testing.T) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fds[0])
	defer unix.Close(fds[1])
	got, err := peerGroups(fds[0])
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.Getgroups()
	if err != nil {
		t.Fatal(err)
	}
	g := make([]int, len(got))
	for i, x := range got {
		g[i] = int(x)
	}
	slices.Sort(g)
	slices.Sort(want)
	if !slices.Equal(g, want) {
		t.Errorf("peer groups %v, want the process's %v", g, want)
	}
}
