package rtchan

import (
	"fmt"
	"net"
	"runtime"

	"golang.org/x/sys/unix"
)

// socketBeside opens a UDP socket in the network namespace of conn, bound
// to conn's local address on another port. A program may have made conn
// inside another namespace (a container's, a test's) from a thread it
// has since left: the new socket is made there too, from a thread that
// enters that namespace for the call and returns.
func socketBeside(conn *net.UDPConn) (*net.UDPConn, error) {
	la, _ := conn.LocalAddr().(*net.UDPAddr)
	network, laddr := "udp", &net.UDPAddr{}
	if la != nil {
		laddr.IP, laddr.Zone = la.IP, la.Zone
		if la.IP.To4() != nil {
			network = "udp4"
		} else if la.IP != nil {
			network = "udp6"
		}
	}
	raw, err := conn.SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("read socket: %w", err)
	}
	nsfd, ierr := -1, error(nil)
	if err := raw.Control(func(fd uintptr) { nsfd, ierr = unix.IoctlRetInt(int(fd), unix.SIOCGSKNS) }); err != nil {
		ierr = err
	}
	if ierr != nil {
		return net.ListenUDP(network, laddr) // no namespace to find: this one
	}
	defer unix.Close(nsfd)
	var there, here unix.Stat_t
	if err := unix.Fstat(nsfd, &there); err != nil {
		return nil, fmt.Errorf("read the socket's network namespace: %w", err)
	}
	if err := unix.Stat("/proc/thread-self/ns/net", &here); err == nil && here.Ino == there.Ino && here.Dev == there.Dev {
		return net.ListenUDP(network, laddr)
	}
	runtime.LockOSThread()
	back, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("open this thread's network namespace: %w", err)
	}
	defer unix.Close(back)
	if err := unix.Setns(nsfd, unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("enter the socket's network namespace: %w", err)
	}
	c, lerr := net.ListenUDP(network, laddr)
	if err := unix.Setns(back, unix.CLONE_NEWNET); err != nil {
		// The thread stays locked: it dies with this goroutine rather
		// than run others in the wrong namespace.
		if c != nil {
			c.Close()
		}
		return nil, fmt.Errorf("return to this thread's network namespace: %w", err)
	}
	runtime.UnlockOSThread()
	return c, lerr
}
