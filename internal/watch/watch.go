// Package watch tells the engine when something it does not change itself
// may have changed: network interfaces and the root and clsact qdiscs and
// filters on them (netlink events, Netlink), and the directories of exe
// selectors (inotify, Dirs). Each report is a wake: the engine then
// derives again and writes what differs, so that an idle daemon neither
// polls the kernel nor re-reads files (DESIGN.md, the event-driven
// engine). A watch that loses events (a full socket buffer or queue)
// wakes too.
package watch

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// Netlink wakes on interfaces appearing, disappearing or changing, and on
// root or clsact qdiscs and filters removed, in the calling thread's
// network namespace, until ctx is done. The socket is open when it
// returns; events are read in a goroutine of its own.
func Netlink(ctx context.Context, log *slog.Logger, wake func()) error {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, unix.NETLINK_ROUTE)
	if err != nil {
		return fmt.Errorf("open netlink socket for link events: %w", err)
	}
	sa := &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: unix.RTMGRP_LINK | unix.RTMGRP_TC}
	if err := unix.Bind(fd, sa); err != nil {
		unix.Close(fd)
		return fmt.Errorf("subscribe to link and qdisc events: %w", err)
	}
	f := os.NewFile(uintptr(fd), "netlink-route-events")
	go func() {
		<-ctx.Done()
		f.Close()
	}()
	go func() {
		buf := make([]byte, 1<<16)
		for {
			n, err := f.Read(buf)
			if err != nil {
				if errors.Is(err, unix.ENOBUFS) {
					wake() // events were lost: look at everything
					continue
				}
				if ctx.Err() == nil && !errors.Is(err, os.ErrClosed) {
					log.Warn("read link events; links are checked by the audit only", "err", err)
				}
				return
			}
			if relevant(buf[:n]) {
				wake()
			}
		}
	}()
	return nil
}

// relevant reports whether a batch of route netlink messages may concern
// hostqos: any link message, and the removal of a root or clsact qdisc or
// of a filter (hostqos's qdiscs and filters put back; its own changes
// below the root are no news).
func relevant(b []byte) bool {
	msgs, err := syscall.ParseNetlinkMessage(b)
	if err != nil {
		return true
	}
	for _, m := range msgs {
		switch m.Header.Type {
		case unix.RTM_NEWLINK, unix.RTM_DELLINK, unix.RTM_DELTFILTER:
			return true
		case unix.RTM_DELQDISC:
			if len(m.Data) < sizeofTcMsg {
				return true
			}
			parent := nativeUint32(m.Data[12:16])
			if parent == tcHRoot || parent == tcHIngress {
				return true
			}
		}
	}
	return false
}

// struct tcmsg (linux/rtnetlink.h): family, padding, ifindex, handle,
// parent (at offset 12), info; and the parents of a root and of an
// ingress or clsact qdisc.
const (
	sizeofTcMsg = 20
	tcHRoot     = 0xFFFFFFFF
	tcHIngress  = 0xFFFFFFF1
)

func nativeUint32(b []byte) uint32 { return binary.NativeEndian.Uint32(b) }

// dirEvents are the changes of a directory's entries that may change
// what an exe selector resolves to.
const dirEvents = unix.IN_CREATE | unix.IN_DELETE | unix.IN_MOVED_FROM | unix.IN_MOVED_TO |
	unix.IN_ATTRIB | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF | unix.IN_ONLYDIR

// Dirs watches directories with inotify and wakes on changes of their
// entries.
type Dirs struct {
	f    *os.File
	fd   int
	wake func()
	log  *slog.Logger

	mu  sync.Mutex
	wds map[string]int // directory → watch descriptor
}

// NewDirs starts an inotify instance whose events are read until ctx is
// done.
func NewDirs(ctx context.Context, log *slog.Logger, wake func()) (*Dirs, error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("open inotify for exe selectors: %w", err)
	}
	d := &Dirs{f: os.NewFile(uintptr(fd), "inotify-exe-selectors"), fd: fd, wake: wake, log: log, wds: map[string]int{}}
	go func() {
		<-ctx.Done()
		d.f.Close()
	}()
	go d.read(ctx)
	return d, nil
}

func (d *Dirs) read(ctx context.Context) {
	buf := make([]byte, 1<<16)
	for {
		n, err := d.f.Read(buf)
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, os.ErrClosed) {
				d.log.Warn("read exe selector directory events; exe selectors are resolved again by the audit only", "err", err)
			}
			return
		}
		d.forgetRemoved(buf[:n])
		d.wake() // any event, IN_Q_OVERFLOW included
	}
}

// forgetRemoved drops the watches the kernel removed (the directory was
// removed or its file system unmounted), so that the next Watch tries
// them again.
func (d *Dirs) forgetRemoved(b []byte) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for len(b) >= unix.SizeofInotifyEvent {
		wd := int32(nativeUint32(b[0:4]))
		mask := nativeUint32(b[4:8])
		size := int(nativeUint32(b[12:16]))
		if mask&unix.IN_IGNORED != 0 {
			for dir, w := range d.wds {
				if int32(w) == wd {
					delete(d.wds, dir)
				}
			}
		}
		if len(b) < unix.SizeofInotifyEvent+size {
			return
		}
		b = b[unix.SizeofInotifyEvent+size:]
	}
}

// Watch makes dirs the watched set; it returns the directories it could
// not watch (missing, not permitted, out of watches). A directory newly
// watched wakes once: what changed in it before the watch is looked at.
func (d *Dirs) Watch(dirs []string) map[string]bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	want := make(map[string]bool, len(dirs))
	for _, dir := range dirs {
		want[dir] = true
	}
	for dir, wd := range d.wds {
		if !want[dir] {
			_, _ = unix.InotifyRmWatch(d.fd, uint32(wd))
			delete(d.wds, dir)
		}
	}
	var unwatched map[string]bool
	added := false
	for _, dir := range dirs {
		if _, ok := d.wds[dir]; ok {
			continue
		}
		wd, err := unix.InotifyAddWatch(d.fd, dir, dirEvents)
		if err != nil {
			if unwatched == nil {
				unwatched = map[string]bool{}
			}
			unwatched[dir] = true
			continue
		}
		d.wds[dir], added = wd, true
	}
	if added {
		d.wake()
	}
	return unwatched
}
