package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
)

// maxUnitExposure is the highest `systemd-analyze security` exposure the
// packaged unit may have.
const maxUnitExposure = 4.0

var exposureRE = regexp.MustCompile(`Overall exposure level for [^:]+: ([0-9]+\.[0-9]+)`)

// TestServiceUnitExposure rates packaging/hostqosd.service with systemd's
// own tool, offline (no running systemd needed), and requires an exposure
// of 4.0 or less. scripts/install-deps.sh installs systemd-analyze; where
// it is missing the test skips, except as root (CI), where it fails.
func TestServiceUnitExposure(t *testing.T) {
	tool, err := exec.LookPath("systemd-analyze")
	if err != nil {
		if os.Geteuid() == 0 {
			t.Fatal("systemd-analyze not found; run scripts/install-deps.sh (it installs systemd)")
		}
		t.Skip("systemd-analyze not found (scripts/install-deps.sh installs it)")
	}
	unit, err := filepath.Abs("../../packaging/hostqosd.service")
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(tool, "security", "--offline=yes", "--no-pager", unit).CombinedOutput()
	if err != nil {
		t.Fatalf("systemd-analyze security --offline=yes %s: %v\n%s", unit, err, out)
	}
	m := exposureRE.FindSubmatch(out)
	if m == nil {
		t.Fatalf("no overall exposure in the output of systemd-analyze security:\n%s", out)
	}
	exposure, err := strconv.ParseFloat(string(m[1]), 64)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("exposure %.1f (at most %.1f)", exposure, maxUnitExposure)
	if exposure > maxUnitExposure {
		t.Errorf("packaging/hostqosd.service: exposure %.1f, want at most %.1f; its findings:\n%s", exposure, maxUnitExposure, out)
	}
}
