package containers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Timing of the watcher's scans.
const (
	settle      = 5 * time.Millisecond  // events within it make one scan
	pendingScan = 25 * time.Millisecond // period while a new container settles
	maxWatches  = 4096                  // inotify watches on cgroup directories
)

// Watcher keeps the set of containers current: it scans on cgroup
// directories appearing and disappearing (inotify on the parents the
// runtimes use), on links of the daemon's namespace changing (netlink), on
// entries of the netns directory, and every Interval as a backstop.
type Watcher struct {
	s       *scanner
	log     *slog.Logger
	changed chan struct{}

	mu   sync.Mutex
	gen  uint64
	list []Container

	// inotify state, used by Run's goroutine only.
	ino     *os.File
	inoFD   int
	watches map[string]int // path -> watch descriptor
	byWD    map[int]string
	full    bool // more directories than maxWatches: logged once
}

// NewWatcher makes a watcher and scans once (Snapshot answers at once).
func NewWatcher(cfg Config, log *slog.Logger) (*Watcher, error) {
	s, err := newScanner(cfg.withDefaults(), log)
	if err != nil {
		return nil, err
	}
	return newWatcher(s, log), nil
}

func newWatcher(s *scanner, log *slog.Logger) *Watcher {
	w := &Watcher{s: s, log: log, changed: make(chan struct{}, 1), watches: map[string]int{}, byWD: map[int]string{}}
	s.scan(true)
	w.gen, w.list = 1, s.list()
	return w
}

// Snapshot is the current set, sorted by runtime and id (a copy), and its
// generation, which changes whenever the set or a field of it changes.
func (w *Watcher) Snapshot() (uint64, []Container) {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]Container, len(w.list))
	for i, c := range w.list {
		out[i] = c.clone()
	}
	return w.gen, out
}

// Changed is signalled (coalesced) after the set changed.
func (w *Watcher) Changed() <-chan struct{} { return w.changed }

func (w *Watcher) publish() {
	list := w.s.list()
	w.mu.Lock()
	w.gen++
	w.list = list
	w.mu.Unlock()
	select {
	case w.changed <- struct{}{}:
	default:
	}
}

// Run keeps the set current until ctx ends. It must run in the daemon's
// network namespace (the goroutine's thread is).
func (w *Watcher) Run(ctx context.Context) error {
	defer w.s.close()
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return fmt.Errorf("watch cgroups: %w", err)
	}
	w.ino, w.inoFD = os.NewFile(uintptr(fd), "inotify"), fd
	defer w.ino.Close()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	events := make(chan struct{}, 1)
	poke := func() {
		select {
		case events <- struct{}{}:
		default:
		}
	}
	go w.readInotify(poke)

	// Link events of the daemon's namespace. The subscription ends on a
	// receive error (its buffer overran): then every namespace is
	// re-read and it is made again.
	var links chan netlink.LinkUpdate
	subscribe := func() error {
		ch := make(chan netlink.LinkUpdate, 256)
		if err := netlink.LinkSubscribeWithOptions(ch, ctx.Done(), netlink.LinkSubscribeOptions{
			ErrorCallback: func(err error) { w.log.Debug("link events", "error", err) },
		}); err != nil {
			return fmt.Errorf("watch links: %w", err)
		}
		links = ch
		return nil
	}
	if err := subscribe(); err != nil {
		return err
	}
	dirtyAll := func() {
		for _, info := range w.s.ns {
			info.dirty = true
		}
	}

	w.updateWatches()
	backstop := time.NewTicker(w.s.cfg.Interval)
	defer backstop.Stop()
	// One timer for the next scan, armed at the earliest time asked: a
	// stream of events cannot push the scan back.
	var timer *time.Timer
	var timerC <-chan time.Time
	var due time.Time // zero: not armed
	schedule := func(d time.Duration) {
		at := time.Now().Add(d)
		if !due.IsZero() && !at.Before(due) {
			return
		}
		due = at
		if timer == nil {
			timer = time.NewTimer(d)
			timerC = timer.C
			return
		}
		timer.Reset(d)
	}
	rescan := func(refresh bool) {
		changed, pending := w.s.scan(refresh)
		w.updateWatches()
		if changed {
			w.publish()
		}
		if pending {
			schedule(pendingScan)
		}
	}
	rescan(false)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-events:
			schedule(settle)
		case u, ok := <-links:
			if !ok {
				links = nil
				if ctx.Err() != nil {
					return nil
				}
				if err := subscribe(); err != nil {
					w.log.Warn("link events lost; retrying every interval", "error", err)
				}
				dirtyAll()
				schedule(settle)
				continue
			}
			w.s.linkChanged(int(u.Index), u.Attrs().NetNsID)
			schedule(settle)
		case <-timerC:
			due = time.Time{}
			rescan(false)
		case <-backstop.C:
			if links == nil {
				_ = subscribe()
			}
			dirtyAll()
			due = time.Time{}
			if timer != nil {
				timer.Stop()
			}
			rescan(true)
		}
	}
}

// readInotify reads events until the inotify file is closed; every event
// pokes the loop.
func (w *Watcher) readInotify(poke func()) {
	buf := make([]byte, 64<<10)
	for {
		n, err := w.ino.Read(buf)
		if err != nil {
			if !errors.Is(err, os.ErrClosed) {
				w.log.Debug("cgroup events", "error", err)
			}
			return
		}
		if n > 0 {
			poke()
		}
	}
}

// updateWatches watches the cgroup directories and the netns directory the
// last scan visited (adding new ones; the kernel drops those removed).
func (w *Watcher) updateWatches() {
	want := make([]string, 0, len(w.s.dirs)+1)
	for d := range w.s.dirs {
		want = append(want, d)
	}
	if len(w.s.cfg.NetnsNames) > 0 {
		want = append(want, w.s.cfg.NetnsDir)
	}
	for _, d := range want {
		if _, ok := w.watches[d]; ok {
			continue
		}
		if len(w.watches) >= maxWatches {
			if !w.full {
				w.full = true
				w.log.Warn("too many cgroup directories to watch: the rest are rescanned every interval",
					"max_watches", maxWatches, "interval", w.s.cfg.Interval)
			}
			break
		}
		wd, err := unix.InotifyAddWatch(w.inoFD, d, unix.IN_CREATE|unix.IN_DELETE|unix.IN_MOVED_FROM|unix.IN_MOVED_TO|unix.IN_ONLYDIR)
		if err != nil {
			continue // gone meanwhile
		}
		if old, ok := w.byWD[wd]; ok {
			delete(w.watches, old) // same directory, new path (moved)
		}
		w.watches[d], w.byWD[wd] = wd, d
	}
	// Directories gone from the walk: stop watching them.
	for d, wd := range w.watches {
		if !w.s.dirs[d] && !(len(w.s.cfg.NetnsNames) > 0 && d == w.s.cfg.NetnsDir) {
			_, _ = unix.InotifyRmWatch(w.inoFD, uint32(wd))
			delete(w.watches, d)
			delete(w.byWD, wd)
		}
	}
}
