package datapath

import (
	"github.com/hostqos/hostqos/internal/cgroups"
	"os"
	"strings"
	"testing"
)

// Pure Go tests: no root needed.

func TestCompileAppBitmaps(t *testing.T) {
	uid := uint32(1000)
	exe := FileID{Dev: 8<<20 | 1, Ino: 42}
	c, err := compile(Policy{Rules: []Rule{
		{Slot: 7, Proto: 6, DSCPIn: -1, DSCP: 1},                          // no app selector
		{Slot: 3, Exes: []FileID{exe}, Comm: "curl", DSCPIn: -1, DSCP: 2}, // app bit 0
		{Slot: 9, UID: &uid, Exes: []FileID{exe}, DSCPIn: -1, DSCP: -1},   // app bit 1
	}})
	if err != nil {
		t.Fatal(err)
	}
	if c.rules[0].HasApp != 0 || c.rules[1].AppBit != 0 || c.rules[2].AppBit != 1 {
		t.Errorf("app bits: %+v", c.rules)
	}
	if c.exe[exe][0] != 0b11 || c.comm["curl"][0] != 0b01 || c.uid[1000][0] != 0b10 {
		t.Errorf("bitmaps exe %v comm %v uid %v", c.exe[exe], c.comm["curl"], c.uid[1000])
	}
	if c.rExe[0] != 0b11 || c.rComm[0] != 0b01 || c.rUID[0] != 0b10 || c.rCg[0] != 0 {
		t.Errorf("selector-type bitmaps %v %v %v %v", c.rExe, c.rComm, c.rUID, c.rCg)
	}
	if c.rules[0].LportLo != 0 || c.rules[0].LportHi != 65535 {
		t.Errorf("any port range: %d-%d", c.rules[0].LportLo, c.rules[0].LportHi)
	}
}

func TestPrefixWords(t *testing.T) {
	var a, m [4]uint32
	fam, _ := prefixWords(pfx("198.18.0.0/15"), &a, &m)
	if fam != famIPv4 || addrFromWords(famIPv4, &a) != addr("198.18.0.0") || addrFromWords(famIPv4, &m) != addr("255.254.0.0") || a[1]|m[1] != 0 {
		t.Errorf("v4: fam %d addr %v mask %v", fam, a, m)
	}
	fam, _ = prefixWords(pfx("2001:db8:8000::/33"), &a, &m)
	if fam != famIPv6 || addrFromWords(famIPv6, &a) != addr("2001:db8:8000::") || addrFromWords(famIPv6, &m) != addr("ffff:ffff:8000::") {
		t.Errorf("v6: fam %d addr %v mask %v", fam, a, m)
	}
	fam, _ = prefixWords(pfx("::ffff:198.18.1.0/120"), &a, &m)
	if fam != famIPv4 || addrFromWords(famIPv4, &m) != addr("255.255.255.0") {
		t.Errorf("v4-mapped: fam %d mask %v", fam, m)
	}
}

func TestIdentityForSelf(t *testing.T) {
	root, err := cgroups.Root()
	if err != nil {
		t.Skip(err)
	}
	id, err := IdentityForPID(os.Getpid(), root)
	if err != nil {
		t.Fatal(err)
	}
	exe, _ := os.Executable()
	want, err := FileIDOf(exe)
	if err != nil {
		t.Fatal(err)
	}
	comm, _ := os.ReadFile("/proc/self/comm")
	if id.Exe != want || id.Comm != strings.TrimSpace(string(comm)) || id.UID != uint32(os.Getuid()) || len(id.Cgroups) == 0 {
		t.Errorf("identity %+v (exe want %+v)", id, want)
	}
}
