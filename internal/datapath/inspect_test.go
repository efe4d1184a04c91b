package datapath

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestInspectNotASocket: descriptors an application may pass for a qsocket
// that are no socket — an O_PATH descriptor of a Unix socket file, a
// regular file — are ENOTSOCK, and the error names no descriptor number
// of the daemon. Needs no root: InspectSocket stops before the maps.
func TestInspectNotASocket(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "s")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	file := filepath.Join(dir, "f")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		what  string
		path  string
		flags int
	}{
		{"an O_PATH descriptor of a Unix socket file", sock, unix.O_PATH},
		{"a regular file", file, unix.O_RDONLY},
		{"an O_PATH descriptor of a regular file", file, unix.O_PATH},
	} {
		fd, err := unix.Open(c.path, c.flags|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		_, err = (&Datapath{}).InspectSocket(fd)
		unix.Close(fd)
		if !errors.Is(err, unix.ENOTSOCK) {
			t.Errorf("%s: %v, want ENOTSOCK", c.what, err)
		}
		if err != nil && strings.Contains(err.Error(), " "+strconv.Itoa(fd)) {
			t.Errorf("%s: the error names the daemon's descriptor %d: %v", c.what, fd, err)
		}
	}
}
