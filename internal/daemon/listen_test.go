package daemon

import (
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestListenWithRename: the API socket appears at its path with mode 0666
// whatever the umask, which stays as it was, and no private directory is
// left behind; the socket answers.
func TestListenWithRename(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "hostqosd.sock")
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	ln, err := listenWithRename(path, 0o666)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if now := syscall.Umask(0o077); now != 0o077 {
		t.Errorf("umask changed to %o", now)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o666 {
		t.Errorf("socket mode %v, want a socket with 0666", fi.Mode())
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("left in the socket dir: %v", ents)
	}
	go func() {
		if c, err := ln.Accept(); err == nil {
			c.Close()
		}
	}()
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatalf("dial the renamed socket: %v", err)
	}
	c.Close()
}
