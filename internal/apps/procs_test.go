package apps

import (
	"os"
	"strings"
	"testing"
)

func TestParseIdentity(t *testing.T) {
	setuid := "Name:\tsleep\nState:\tS (sleeping)\nTgid:\t42\nUid:\t65534\t0\t0\t0\nGid:\t65534\t65534\t65534\t65534\n"
	id, err := parseIdentity(setuid)
	if err != nil {
		t.Fatal(err)
	}
	if id.UIDs != [4]uint32{65534, 0, 0, 0} || id.State != 'S' || id.Gone() {
		t.Errorf("identity = %+v", id)
	}
	if id.AllUIDs(65534) || id.AllUIDs(0) {
		t.Error("a setuid process (real 65534, effective 0) counted as one user")
	}
	plain, err := parseIdentity("State:\tR (running)\nUid:\t1000\t1000\t1000\t1000\n")
	if err != nil || !plain.AllUIDs(1000) {
		t.Errorf("plain process: %+v, %v", plain, err)
	}
	zombie, err := parseIdentity("State:\tZ (zombie)\nUid:\t1000\t1000\t1000\t1000\n")
	if err != nil || !zombie.Gone() {
		t.Errorf("zombie: %+v, %v", zombie, err)
	}
	for _, bad := range []string{"", "State:\tS (sleeping)\n", "State:\tS\nUid:\t1 2 3\n", "State:\tS\nUid:\t1 2 3 x\n"} {
		if _, err := parseIdentity(bad); err == nil {
			t.Errorf("parseIdentity(%q) accepted", bad)
		}
	}
}

func TestIdentityOfSelf(t *testing.T) {
	id, err := IdentityOf(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if !id.AllUIDs(uint32(os.Getuid())) || id.Gone() {
		t.Errorf("own identity = %+v", id)
	}
}

func TestProcessOfSelf(t *testing.T) {
	p, err := ProcessOf(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	comm, _ := os.ReadFile("/proc/self/comm")
	cg, _ := os.ReadFile("/proc/self/cgroup")
	if p.PID != os.Getpid() || p.UID != uint32(os.Getuid()) || p.Comm+"\n" != string(comm) ||
		p.Cgroup == "" || !strings.Contains(string(cg), "0::"+p.Cgroup+"\n") {
		t.Errorf("own process = %+v (comm %q, cgroup %q)", p, comm, cg)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if target, err := os.Readlink(p.ExeLink); err != nil || target != exe {
		t.Errorf("ExeLink %s -> %q, %v; want %s", p.ExeLink, target, err, exe)
	}
	if _, err := ProcessOf(1 << 30); err == nil {
		t.Error("a pid that does not exist gave no error")
	}
}
