package daemon

import (
	"net"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// TestConnKeepsFewFDs: an API connection keeps at most maxConnFDs of the
// descriptors it receives, in order, closes the others at once, and closes
// what it kept when it closes.
func TestConnKeepsFewFDs(t *testing.T) {
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(pair[0])
	f := os.NewFile(uintptr(pair[1]), "api")
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	ac := &apiConn{Conn: c}
	var sent []int
	for i := 0; i < maxConnFDs+2; i++ {
		fd, err := unix.Open("/dev/null", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(fd)
		sent = append(sent, fd)
	}
	if err := unix.Sendmsg(pair[0], []byte("GET / HTTP/1.1\r\n"), unix.UnixRights(sent[:3]...), nil, 0); err != nil {
		t.Fatal(err)
	}
	if err := unix.Sendmsg(pair[0], []byte("x"), unix.UnixRights(sent[3:]...), nil, 0); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	for got := 0; got < 17; {
		n, err := ac.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		got += n
	}
	var kept []int
	for fd := ac.fds.pop(); fd >= 0; fd = ac.fds.pop() {
		kept = append(kept, fd)
	}
	if len(kept) != maxConnFDs {
		t.Fatalf("kept %d descriptors, want %d", len(kept), maxConnFDs)
	}
	for _, fd := range kept {
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFCHR {
			t.Errorf("kept fd %d: %v", fd, err)
		}
		unix.Close(fd)
	}
	// Received later, then closed with the connection.
	if err := unix.Sendmsg(pair[0], []byte("y"), unix.UnixRights(sent[0]), nil, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := ac.Read(buf); err != nil {
		t.Fatal(err)
	}
	ac.fds.mu.Lock()
	held := append([]int(nil), ac.fds.fds...)
	ac.fds.mu.Unlock()
	ac.Close()
	if len(held) != 1 {
		t.Fatalf("held %v", held)
	}
	if err := unix.Fstat(held[0], new(unix.Stat_t)); err != unix.EBADF {
		t.Errorf("descriptor %d still open after the connection closed: %v", held[0], err)
	}
}
