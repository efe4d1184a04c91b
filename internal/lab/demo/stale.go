package demo

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hostqos/hostqos/internal/cgroups"
	"github.com/hostqos/hostqos/internal/testbed"
)

// MarkerDir holds one file per running demo (<pid>.json) listing what it
// made outside its network namespaces: the daemon (pid, pins, cgroups) and
// the scratch directory. A run that was killed (SIGKILL, power loss) leaves
// its file behind; the next run's CleanStale removes what it lists.
const MarkerDir = "/run/hostqos-demo"

type marker struct {
	PID     int          `json:"pid"`
	Started string       `json:"started"`
	Scratch string       `json:"scratch"`
	Keep    bool         `json:"keep"`
	Daemons []daemonMark `json:"daemons,omitempty"`

	mu sync.Mutex
}

type daemonMark struct {
	PID      int      `json:"pid"`
	Netns    string   `json:"netns"`
	NetnsIno uint64   `json:"netns_ino"`
	BPFFS    string   `json:"bpffs"`
	Args     []string `json:"args"`
}

func (m *marker) path() string { return filepath.Join(MarkerDir, strconv.Itoa(m.PID)+".json") }

func (m *marker) save() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := os.MkdirAll(MarkerDir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", MarkerDir, err)
	}
	b, _ := json.MarshalIndent(m, "", "  ")
	tmp := m.path() + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return fmt.Errorf("write demo marker: %w", err)
	}
	if err := os.Rename(tmp, m.path()); err != nil {
		return fmt.Errorf("write demo marker: %w", err)
	}
	return nil
}

func (m *marker) addDaemon(d daemonMark) error {
	m.mu.Lock()
	m.Daemons = append(m.Daemons, d)
	m.mu.Unlock()
	return m.save()
}

func (m *marker) remove() { _ = os.Remove(m.path()) }

// CleanStale removes what demo runs whose process is gone left behind: it
// kills their hostqosd if it still runs, runs `hostqosd down` in the
// namespace if that still exists, removes the daemon's pins and cgroups and
// the scratch directory, and then the testbed namespaces of dead runs
// (testbed.CleanStale). It returns how many dead runs it cleaned.
func CleanStale(binDir string) (int, error) {
	ents, err := os.ReadDir(MarkerDir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return 0, fmt.Errorf("read %s: %w", MarkerDir, err)
	}
	var errs []error
	n := 0
	for _, e := range ents {
		name, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok {
			continue
		}
		pid, err := strconv.Atoi(name)
		if err != nil || pid <= 0 || pid == os.Getpid() || alive(pid) {
			continue
		}
		path := filepath.Join(MarkerDir, e.Name())
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		var m marker
		if err := json.Unmarshal(b, &m); err != nil {
			errs = append(errs, fmt.Errorf("read stale marker %s: %w", path, err))
			_ = os.Remove(path)
			continue
		}
		var merr []error
		for _, d := range m.Daemons {
			merr = append(merr, cleanStaleDaemon(binDir, d)...)
		}
		if m.Scratch != "" && !m.Keep && strings.Contains(filepath.Base(m.Scratch), "hostqos-demo-") {
			if err := os.RemoveAll(m.Scratch); err != nil {
				merr = append(merr, fmt.Errorf("remove stale scratch %s: %w", m.Scratch, err))
			}
		}
		if len(merr) == 0 {
			_ = os.Remove(path)
		}
		errs = append(errs, merr...)
		n++
	}
	if err := testbed.CleanStale(); err != nil {
		errs = append(errs, err)
	}
	return n, errors.Join(errs...)
}

func alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// isHostqosd reports whether pid runs a hostqosd (not a reused pid).
func isHostqosd(pid int) bool {
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	return err == nil && filepath.Base(strings.TrimSuffix(exe, " (deleted)")) == "hostqosd"
}

func cleanStaleDaemon(binDir string, d daemonMark) []error {
	var errs []error
	if d.PID > 0 && alive(d.PID) && isHostqosd(d.PID) {
		_ = syscall.Kill(d.PID, syscall.SIGTERM)
		for i := 0; i < 50 && alive(d.PID); i++ {
			time.Sleep(100 * time.Millisecond)
		}
		if alive(d.PID) {
			_ = syscall.Kill(d.PID, syscall.SIGKILL)
		}
	}
	nsPath := filepath.Join("/run/netns", d.Netns)
	if _, err := os.Stat(nsPath); err == nil && d.Netns != "" {
		down := exec.Command("nsenter", append([]string{"--net=" + nsPath, "--", filepath.Join(binDir, "hostqosd"), "down"}, d.Args...)...)
		if out, err := sh(down); err != nil {
			errs = append(errs, fmt.Errorf("hostqosd down in stale namespace %s: %v: %s", d.Netns, err, strings.TrimSpace(out)))
		}
	}
	if d.BPFFS != "" && strings.HasPrefix(d.BPFFS, "/sys/fs/bpf/hqlab-") {
		if err := os.RemoveAll(d.BPFFS); err != nil {
			errs = append(errs, fmt.Errorf("remove stale pins %s: %w", d.BPFFS, err))
		}
	}
	if d.NetnsIno != 0 {
		if root, err := cgroups.Root(); err == nil {
			if err := cgroups.RemoveTree(root, fmt.Sprintf("/hostqos/ns-%d", d.NetnsIno)); err != nil {
				errs = append(errs, err)
			}
			_ = syscall.Rmdir(filepath.Join(root, "hostqos"))
		}
	}
	return errs
}
