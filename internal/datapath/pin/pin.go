// Package pin is the layout of hostqos's BPF pin directory, which the
// datapath (internal/datapath) and the XDP shield (internal/datapath/xdp)
// share: each pins its maps at the top by their names and its links under
// links/, so a dead daemon leaves them enforcing, a restarted one adopts
// them, and `hostqos down` removes them all.
//
// A link attached to an interface is pinned as links/<prefix><ifindex>
// (Links); a link attached to a cgroup by its hook's name (Open).
package pin

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

const (
	// DefaultDir is the pin directory of a daemon given none.
	DefaultDir = "/sys/fs/bpf/hostqos"
	// LinksDir is the subdirectory of the pinned links.
	LinksDir = "links"
	// defaultMount is where Prepare mounts a BPF file system when the
	// pin directory is below it and none is mounted.
	defaultMount = "/sys/fs/bpf"
)

// Prepare makes sure dir lives on a BPF file system and has its links
// subdirectory. It mounts one at /sys/fs/bpf when dir is below it and
// nothing is mounted there yet (as under `ip netns exec`, which mounts a
// fresh /sys), and returns where it mounted one ("" if it did not).
func Prepare(log *slog.Logger, dir string) (string, error) {
	mounted, err := ensureBPFFS(log, dir)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(filepath.Join(dir, LinksDir), 0o700); err != nil {
		return mounted, fmt.Errorf("create pin directory %s: %w", dir, err)
	}
	return mounted, nil
}

func ensureBPFFS(log *slog.Logger, dir string) (string, error) {
	onBPF := func() (bool, error) {
		p := dir
		for {
			var st unix.Statfs_t
			err := unix.Statfs(p, &st)
			if err == nil {
				return uint32(st.Type) == unix.BPF_FS_MAGIC, nil
			}
			if !errors.Is(err, unix.ENOENT) {
				return false, fmt.Errorf("statfs %s: %w", p, err)
			}
			parent := filepath.Dir(p)
			if parent == p {
				return false, nil
			}
			p = parent
		}
	}
	ok, err := onBPF()
	if err != nil || ok {
		return "", err
	}
	if dir != defaultMount && !strings.HasPrefix(dir, defaultMount+"/") {
		return "", fmt.Errorf("use pin directory %s: not on a BPF filesystem (mount one with `mount -t bpf bpf <dir>`)", dir)
	}
	if err := os.MkdirAll(defaultMount, 0o755); err != nil {
		return "", fmt.Errorf("create %s: %w", defaultMount, err)
	}
	if err := unix.Mount("bpf", defaultMount, "bpf", 0, "mode=0700"); err != nil {
		return "", fmt.Errorf("mount bpffs at %s: %w", defaultMount, err)
	}
	log.Info("no bpffs was mounted; mounted one for the pins", "path", defaultMount)
	return defaultMount, nil
}

// Incompatible names a failure to load an object's maps into the pin
// directory (of map name; "" for the whole object): when the pinned maps
// were made by another hostqos version, it says how to remove them.
func Incompatible(name string, err error) error {
	if errors.Is(err, ebpf.ErrMapIncompatible) {
		if name == "" {
			return fmt.Errorf("adopt pinned maps: %w (the pinned state was made by another hostqos version; run `hostqos down` to remove it)", err)
		}
		return fmt.Errorf("adopt pinned map %s: %w (the pinned state was made by another hostqos version; run `hostqos down` to remove it)", name, err)
	}
	if name == "" {
		return fmt.Errorf("load BPF objects: %w", err)
	}
	return fmt.Errorf("load map %s: %w", name, err)
}

// Open opens the link pinned at path; nil and no error when there is
// none.
func Open(path string) (link.Link, error) {
	l, err := link.LoadPinnedLink(path, nil)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("open pinned link %s: %w", path, err)
	}
	return l, nil
}

// Drop detaches and unpins l, and closes it. A link whose hook is already
// gone (its interface deleted) only needs unpinning.
func Drop(l link.Link) error {
	defer l.Close()
	if err := l.Detach(); err != nil && !errors.Is(err, unix.ENOLINK) && !errors.Is(err, ebpf.ErrNotSupported) {
		return fmt.Errorf("detach link: %w", err)
	}
	if err := l.Unpin(); err != nil {
		return fmt.Errorf("unpin link: %w", err)
	}
	return nil
}

// Links are the pinned links of one kind, one per interface:
// Dir/links/<Prefix><ifindex>.
type Links struct {
	Dir    string    // the pin directory
	Prefix string    // the pins' names before the ifindex
	Type   link.Type // the links' type (XDP, TCX)
	What   string    // the links' name in logs and errors ("XDP", "egress")
}

// Path is where ifindex's link is pinned.
func (p Links) Path(ifindex int) string {
	return filepath.Join(p.Dir, LinksDir, p.Prefix+strconv.Itoa(ifindex))
}

// Load opens ifindex's pinned link; nil and no error when there is none.
func (p Links) Load(ifindex int) (link.Link, error) { return Open(p.Path(ifindex)) }

// Pin pins l, freshly attached to ifindex; on failure it closes l.
func (p Links) Pin(l link.Link, ifindex int) error {
	path := p.Path(ifindex)
	if err := l.Pin(path); err != nil {
		l.Close()
		return fmt.Errorf("pin %s link %s: %w", p.What, path, err)
	}
	return nil
}

// Adopt opens the links of this kind that a previous run pinned. A link
// that no longer is of its type on its interface (the interface is gone:
// the link is defunct; or it was replaced) is unpinned and dropped. take
// gets every other one with its pin, to swap in the freshly loaded program
// and keep it; when take fails, Adopt closes the link and returns take's
// error.
func (p Links) Adopt(log *slog.Logger, take func(ifindex int, pin string, l link.Link) error) error {
	dir := filepath.Join(p.Dir, LinksDir)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("list pinned links in %s: %w", dir, err)
	}
	for _, e := range ents {
		name := e.Name()
		if !strings.HasPrefix(name, p.Prefix) {
			continue
		}
		ifindex, err := strconv.Atoi(strings.TrimPrefix(name, p.Prefix))
		if err != nil {
			continue
		}
		pin := filepath.Join(dir, name)
		l, err := link.LoadPinnedLink(pin, nil)
		if err != nil {
			return fmt.Errorf("open pinned link %s: %w", pin, err)
		}
		if info, err := l.Info(); err != nil || !p.on(info, ifindex) {
			log.Info("dropping stale "+p.What+" link", "ifindex", ifindex)
			_ = l.Unpin()
			l.Close()
			continue
		}
		if err := take(ifindex, pin, l); err != nil {
			l.Close()
			return err
		}
	}
	return nil
}

// on tells whether info is a link of this kind on ifindex.
func (p Links) on(info *link.Info, ifindex int) bool {
	if info.Type != p.Type {
		return false
	}
	switch {
	case info.XDP() != nil:
		return int(info.XDP().Ifindex) == ifindex
	case info.TCX() != nil:
		return int(info.TCX().Ifindex) == ifindex
	}
	return false
}
