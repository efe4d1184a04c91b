package testutil

import (
	"fmt"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// SmallFS mounts a tmpfs of size bytes on a new temporary directory and
// returns it: a file system a test can fill (history on a full disk). It
// is unmounted at cleanup and on SIGINT or SIGTERM. It needs root; the
// mount is in the test's mount namespace, so a daemon the test starts
// sees it.
func SmallFS(tb testing.TB, size int64) string {
	tb.Helper()
	NeedRoot(tb)
	dir, err := os.MkdirTemp("", "hqtest-fs-")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.Remove(dir) })
	SmallFSAt(tb, dir, size)
	return dir
}

// SmallFSAt is SmallFS on dir (made if missing): a test's state directory
// on a small disk.
func SmallFSAt(tb testing.TB, dir string, size int64) {
	tb.Helper()
	NeedRoot(tb)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	if err := unix.Mount("hqtest", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, fmt.Sprintf("size=%d,mode=0755", size)); err != nil {
		tb.Fatalf("mount a tmpfs of %d bytes on %s: %v", size, dir, err)
	}
	remove := func() { _ = unix.Unmount(dir, unix.MNT_DETACH) }
	unregister := OnSignal(remove)
	tb.Cleanup(func() {
		unregister()
		remove()
	})
}

// Fill writes a file in dir until the file system has at most leave bytes
// free for an ordinary writer (all of it for leave 0) and returns its path.
func Fill(tb testing.TB, dir string, leave int64) string {
	tb.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		tb.Fatal(err)
	}
	free := int64(st.Bavail) * st.Bsize
	path, err := os.CreateTemp(dir, "filler-")
	if err != nil {
		tb.Fatal(err)
	}
	defer path.Close()
	buf := make([]byte, 64<<10)
	for n := free - leave; n > 0; {
		w, err := path.Write(buf[:min(int64(len(buf)), n)])
		n -= int64(w)
		if err != nil {
			break // full
		}
	}
	if err := path.Sync(); err != nil && leave > 0 {
		tb.Fatal(err)
	}
	return path.Name()
}
