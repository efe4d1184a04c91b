package daemon

import (
	"strings"
	"testing"
)

func TestOwnCgroupDirIsPerSocket(t *testing.T) {
	if got := ownCgroupDir(Config{Socket: "/run/hostqos/hostqosd.sock"}); got != "/run/hostqos/cgroup2" {
		t.Errorf("default socket: %s", got)
	}
	if got := ownCgroupDir(Config{Socket: "/tmp/x/run/hostqosd.sock"}); got != "/tmp/x/run/cgroup2" {
		t.Errorf("lab socket: %s", got)
	}
}

func TestMountWarnings(t *testing.T) {
	d := &Daemon{cfg: Config{BPFFSDir: "/sys/fs/bpf/hostqos"}, cgRoot: "/run/hostqos/cgroup2", cgOwn: true, bpffsOwn: "/sys/fs/bpf", pinsDie: true}
	w := strings.Join(d.mountWarnings(), "\n")
	for _, want := range []string{"hostqosd mounted one at /run/hostqos/cgroup2", "mounted one at /sys/fs/bpf", "/sys/fs/bpf/hostqos", "go away when the daemon exits"} {
		if !strings.Contains(w, want) {
			t.Errorf("warnings lack %q:\n%s", want, w)
		}
	}
	if w := (&Daemon{cgRoot: "/sys/fs/cgroup"}).mountWarnings(); len(w) != 0 {
		t.Errorf("warnings without own mounts: %q", w)
	}
}
