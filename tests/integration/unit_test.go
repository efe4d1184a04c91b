package integration

import (
	"bufio"
	"os"
	"strings"
	"testing"
)

// unitCapabilities reads the capability bounding set of the packaged
// systemd unit, as setpriv spells it (+net_admin,+bpf,...).
func unitCapabilities(t *testing.T) []string {
	t.Helper()
	f, err := os.Open("../../packaging/hostqosd.service")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var caps []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		v, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "CapabilityBoundingSet=")
		if !ok {
			continue
		}
		for _, c := range strings.Fields(v) {
			caps = append(caps, "+"+strings.ToLower(strings.TrimPrefix(c, "CAP_")))
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(caps) == 0 {
		t.Fatal("packaging/hostqosd.service sets no CapabilityBoundingSet")
	}
	return caps
}

// TestDaemonWithUnitCapabilities: hostqosd started with
// only the capabilities the systemd unit leaves it (bounding set, nothing
// inheritable or ambient) and no_new_privs, as the unit starts it, still
// does what needs each of them: unit, user and command selectors (cgroup
// search, BTF reads of the executable), and an ordinary user's `hostqos
// run` under an admin's cgroup rules (pidfd_getfd on another user's
// sockets, /proc of their processes, cgroup moves). The other sandboxing
// of the unit (read-only file system, seccomp filter) needs systemd as
// PID 1, which the test machine does not have; docs/security.md says how
// it was checked.
func TestDaemonWithUnitCapabilities(t *testing.T) {
	parallel(t)
	wrap := []string{"setpriv", "--bounding-set", "-all," + strings.Join(unitCapabilities(t), ","),
		"--inh-caps", "-all", "--no-new-privs", "--"}
	for _, tc := range []struct {
		name string
		test func(t *testing.T, e *env)
	}{{"selectors", appSelectors}, {"user-run", userRunStaysUnderAdminCgroupRule}} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.d.Wrap = wrap
			e.startDaemon()
			if st := e.status(); len(st.Warnings) > 0 {
				t.Errorf("status warnings with the unit's capabilities:\n%s", strings.Join(st.Warnings, "\n"))
			}
			tc.test(t, e)
		})
	}
}
