package demo

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/hostqos/hostqos/internal/lab"
)

// MarkerDir holds one file per running demo (<pid>.json) listing its
// scratch directory. A run that was killed (SIGKILL, power loss) leaves its
// file behind; the next run's CleanStale removes the directory. Daemons and
// namespaces are recorded and cleaned by the lab and testbed packages.
const MarkerDir = "/run/hostqos-demo"

type marker struct {
	PID     int    `json:"pid"`
	Started string `json:"started"`
	Scratch string `json:"scratch"`
	Keep    bool   `json:"keep"`

	mu sync.Mutex
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

func (m *marker) remove() { _ = os.Remove(m.path()) }

// CleanStale removes what demo runs whose process is gone left behind: their
// scratch directories, then (lab.CleanStale) their daemons, pins, cgroups
// and testbed namespaces. It returns how many dead runs it cleaned.
func CleanStale() (int, error) {
	n, err := lab.CleanMarkers(MarkerDir, func(m *marker) int { return m.PID }, func(m *marker) error {
		if m.Scratch != "" && !m.Keep && strings.Contains(filepath.Base(m.Scratch), "hostqos-demo-") {
			if err := os.RemoveAll(m.Scratch); err != nil {
				return fmt.Errorf("remove stale scratch %s: %w", m.Scratch, err)
			}
		}
		return nil
	})
	if _, lerr := lab.CleanStale(); lerr != nil {
		err = errors.Join(err, lerr)
	}
	return n, err
}
