package lab

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hostqos/hostqos/internal/cgroups"
	"github.com/hostqos/hostqos/internal/testbed"
)

// MarkerDir holds one file per daemon a lab run started (<daemon pid>.json):
// who started it and what it made outside its namespace (pins, cgroups).
// A run that was killed (SIGKILL, a test binary timing out) leaves its files
// behind; the next run's CleanStale removes what they list.
const MarkerDir = "/run/hostqos-lab"

// daemonMarker describes one daemon started by a lab run.
type daemonMarker struct {
	Owner    int      `json:"owner"` // pid of the process that started it
	PID      int      `json:"pid"`
	Netns    string   `json:"netns"`
	NetnsIno uint64   `json:"netns_ino"`
	BPFFS    string   `json:"bpffs"`
	BinDir   string   `json:"bin_dir"`
	Args     []string `json:"args"`
}

func markerPath(pid int) string { return filepath.Join(MarkerDir, strconv.Itoa(pid)+".json") }

// mark records a started daemon.
func (d *Daemon) mark() error {
	var st syscall.Stat_t
	_ = syscall.Stat("/run/netns/"+d.Node.NetnsName, &st)
	m := daemonMarker{Owner: os.Getpid(), PID: d.PID(), Netns: d.Node.NetnsName, NetnsIno: st.Ino,
		BPFFS: d.BPFFS, BinDir: d.BinDir, Args: d.Args()}
	if err := os.MkdirAll(MarkerDir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", MarkerDir, err)
	}
	b, _ := json.MarshalIndent(m, "", "  ")
	tmp := markerPath(m.PID) + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return fmt.Errorf("write daemon marker: %w", err)
	}
	if err := os.Rename(tmp, markerPath(m.PID)); err != nil {
		return fmt.Errorf("write daemon marker: %w", err)
	}
	return nil
}

// unmark forgets a daemon that was stopped properly.
func unmark(pid int) { _ = os.Remove(markerPath(pid)) }

// CleanStale removes what lab runs that died left behind: it stops their
// daemons (still running in namespaces nobody will clean), runs
// `hostqosd down` where the namespace still exists, removes their pins and
// cgroups, and then the testbed namespaces of dead runs. It returns how many
// daemons it cleaned up.
func CleanStale() (int, error) {
	n, err := CleanMarkers(MarkerDir, func(m daemonMarker) int { return m.Owner }, func(m daemonMarker) error {
		return errors.Join(cleanDaemon(m)...)
	})
	if terr := testbed.CleanStale(); terr != nil {
		err = errors.Join(err, terr)
	}
	return n, err
}

// CleanMarkers goes through the marker files (*.json, each a T) in dir and,
// for each whose owner process is gone, calls clean and removes the file
// once clean succeeded. Unreadable markers are removed. It returns how many
// markers it cleaned.
func CleanMarkers[T any](dir string, owner func(T) int, clean func(T) error) (int, error) {
	ents, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return 0, fmt.Errorf("read %s: %w", dir, err)
	}
	var errs []error
	n := 0
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		path := filepath.Join(dir, e.Name())
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		var m T
		if err := json.Unmarshal(b, &m); err != nil {
			errs = append(errs, fmt.Errorf("read stale marker %s: %w", path, err))
			_ = os.Remove(path)
			continue
		}
		if o := owner(m); o == os.Getpid() || Alive(o) {
			continue
		}
		if err := clean(m); err != nil {
			errs = append(errs, err)
			continue
		}
		_ = os.Remove(path)
		n++
	}
	return n, errors.Join(errs...)
}

// Alive reports whether a process exists (also one we may not signal).
func Alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// isHostqosd reports whether pid runs a hostqosd (not a reused pid).
func isHostqosd(pid int) bool {
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	return err == nil && filepath.Base(strings.TrimSuffix(exe, " (deleted)")) == "hostqosd"
}

func cleanDaemon(m daemonMarker) []error {
	var errs []error
	if Alive(m.PID) && isHostqosd(m.PID) {
		_ = syscall.Kill(m.PID, syscall.SIGTERM)
		for i := 0; i < 50 && Alive(m.PID); i++ {
			time.Sleep(100 * time.Millisecond)
		}
		if Alive(m.PID) {
			_ = syscall.Kill(m.PID, syscall.SIGKILL)
		}
	}
	nsPath := filepath.Join("/run/netns", m.Netns)
	bin := filepath.Join(m.BinDir, "hostqosd")
	if _, err := os.Stat(nsPath); err == nil && m.Netns != "" {
		if _, err := os.Stat(bin); err == nil {
			down := exec.Command("nsenter", append([]string{"--net=" + nsPath, "--", bin, "down"}, m.Args...)...)
			if out, err := down.CombinedOutput(); err != nil {
				errs = append(errs, fmt.Errorf("hostqosd down in stale namespace %s: %v: %s", m.Netns, err, strings.TrimSpace(string(out))))
			}
		}
	}
	if strings.HasPrefix(m.BPFFS, "/sys/fs/bpf/hqlab-") {
		if err := os.RemoveAll(m.BPFFS); err != nil {
			errs = append(errs, fmt.Errorf("remove stale pins %s: %w", m.BPFFS, err))
		}
	}
	if m.NetnsIno != 0 {
		if root, err := cgroups.Root(); err == nil {
			if err := cgroups.RemoveNetnsDir(root, m.NetnsIno); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errs
}
