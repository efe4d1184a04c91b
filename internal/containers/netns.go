package containers

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"

	"github.com/hostqos/hostqos/internal/datapath"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// nsKey identifies a network namespace: the device and inode of its nsfs
// file.
type nsKey struct{ dev, ino uint64 }

func statNS(path string) (nsKey, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return nsKey{}, err
	}
	return nsKey{uint64(st.Dev), st.Ino}, nil
}

// nsInfo is what a container's network namespace shows of it.
type nsInfo struct {
	cookie uint64
	veths  []Veth // host-side ends of its veths into the daemon's namespace
	// nsid is the namespace's id in the daemon's namespace (-1 none yet):
	// the link-netnsid the daemon's side of its veths carries.
	nsid  int
	dirty bool // a link changed that may be one of its veths
}

// selfNS is the daemon's network namespace.
type selfNS struct {
	key nsKey
	fd  int
	h   *netlink.Handle
}

// openSelf opens the calling thread's network namespace: the daemon's.
func openSelf() (*selfNS, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	fd, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open own network namespace: %w", err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("stat own network namespace: %w", err)
	}
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("open netlink in own network namespace: %w", err)
	}
	return &selfNS{key: nsKey{uint64(st.Dev), st.Ino}, fd: fd, h: h}, nil
}

func (s *selfNS) close() {
	s.h.Close()
	unix.Close(s.fd)
}

// enter runs fn on a locked OS thread inside the network namespace nsfd
// and returns there. If the thread cannot go back, it is not unlocked: it
// ends with its goroutine instead of serving others from the wrong
// namespace.
func enter(nsfd int, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("open current network namespace: %w", err)
			return
		}
		defer unix.Close(orig)
		if err := unix.Setns(nsfd, unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("enter network namespace: %w", err)
			return
		}
		ferr := fn()
		if err := unix.Setns(orig, unix.CLONE_NEWNET); err != nil {
			errc <- errors.Join(ferr, fmt.Errorf("return to own network namespace: %w", err))
			return // still locked: the thread exits with this goroutine
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// inspect reads the network namespace at path (a /proc/PID/ns/net or a
// /run/netns entry): its cookie, and its veths whose peer is in the
// daemon's namespace.
func (s *selfNS) inspect(path string) (nsInfo, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nsInfo{}, fmt.Errorf("open network namespace %s: %w", path, err)
	}
	defer unix.Close(fd)
	info := nsInfo{nsid: -1}
	var h *netlink.Handle
	err = enter(fd, func() error {
		var err error
		if info.cookie, err = datapath.NetnsCookie(); err != nil {
			return err
		}
		h, err = netlink.NewHandle(unix.NETLINK_ROUTE)
		if err != nil {
			return fmt.Errorf("open netlink: %w", err)
		}
		return nil
	})
	if err != nil {
		if h != nil {
			h.Close()
		}
		return nsInfo{}, fmt.Errorf("inspect network namespace %s: %w", path, err)
	}
	defer h.Close()
	links, err := h.LinkList()
	if err != nil {
		return nsInfo{}, fmt.Errorf("list links of network namespace %s: %w", path, err)
	}
	// The daemon's namespace as the container's sees it (assigned by the
	// kernel when a link there names it), and the reverse.
	ours, err := h.GetNetNsIdByFd(s.fd)
	if err != nil {
		return nsInfo{}, fmt.Errorf("read netns id of own namespace in %s: %w", path, err)
	}
	if info.nsid, err = s.h.GetNetNsIdByFd(fd); err != nil {
		return nsInfo{}, fmt.Errorf("read netns id of %s: %w", path, err)
	}
	if ours < 0 || info.nsid < 0 {
		return info, nil // no link between the two namespaces
	}
	for _, l := range links {
		a := l.Attrs()
		if l.Type() != "veth" || a.NetNsID != ours || a.ParentIndex <= 0 {
			continue
		}
		peer, err := s.h.LinkByIndex(a.ParentIndex)
		if err != nil || peer.Type() != "veth" || peer.Attrs().NetNsID != info.nsid || peer.Attrs().ParentIndex != a.Index {
			continue // gone meanwhile, or not this veth's peer
		}
		if len(info.veths) < maxVeths {
			info.veths = append(info.veths, Veth{Ifindex: peer.Attrs().Index, Name: peer.Attrs().Name})
		}
	}
	slices.SortFunc(info.veths, func(a, b Veth) int { return a.Ifindex - b.Ifindex })
	return info, nil
}

// pidsByNetns maps network namespaces to a process in each, from a walk
// of procRoot (bounded).
func pidsByNetns(procRoot string) map[nsKey]int {
	out := map[nsKey]int{}
	entries, err := os.ReadDir(procRoot)
	if err != nil {
		return out
	}
	n := 0
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 0 {
			continue
		}
		if n++; n > 1<<17 {
			break
		}
		if k, err := statNS(filepath.Join(procRoot, e.Name(), "ns", "net")); err == nil {
			if _, ok := out[k]; !ok {
				out[k] = pid
			}
		}
	}
	return out
}
