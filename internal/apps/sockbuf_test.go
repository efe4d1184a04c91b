package apps

import (
	"errors"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// SetSendBuffer finds the socket by its cookie among the process's
// descriptors, returns its old SO_SNDBUF and sets the new one; a cookie
// the process does not hold is ErrSocketGone and changes nothing.
func TestSetSendBuffer(t *testing.T) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	other, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(other)
	cookie, err := unix.GetsockoptUint64(fd, unix.SOL_SOCKET, unix.SO_COOKIE)
	if err != nil {
		t.Fatal(err)
	}
	before, _ := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF)
	otherBefore, _ := unix.GetsockoptInt(other, unix.SOL_SOCKET, unix.SO_SNDBUF)
	old, err := SetSendBuffer(os.Getpid(), cookie, 20000)
	if err != nil {
		t.Fatal(err)
	}
	if old != before {
		t.Errorf("old send buffer %d, want %d", old, before)
	}
	if now, _ := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF); now != 40000 {
		t.Errorf("send buffer %d after setting 20000, want 40000 (the kernel doubles it)", now)
	}
	if now, _ := unix.GetsockoptInt(other, unix.SOL_SOCKET, unix.SO_SNDBUF); now != otherBefore {
		t.Errorf("another socket's send buffer changed: %d, was %d", now, otherBefore)
	}
	if _, err := SetSendBuffer(os.Getpid(), cookie+1<<40, 20000); !errors.Is(err, ErrSocketGone) {
		t.Errorf("unknown cookie: %v, want ErrSocketGone", err)
	}
}
