package datapath

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/hostqos/hostqos/internal/cgroups"
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

func TestParseInotifyFdinfo(t *testing.T) {
	info := "pos:\t0\nflags:\t02004000\nmnt_id:\t16\nino:\t1057\n" +
		"inotify wd:3 ino:101 sdev:2900029 mask:400 ignored_mask:0 fhandle-bytes:8 fhandle-type:1 f_handle:0101000000000000\n" +
		"inotify wd:a ino:ffffffffffff sdev:fe00000 mask:400 ignored_mask:0\n"
	id, ok := parseInotifyFdinfo(info, 3)
	// sdev is the kernel's dev_t: 0x29<<20 | 0x29 is 41:41.
	if want := (FileID{Dev: 41<<20 | 41, Ino: 0x101}); !ok || id != want {
		t.Errorf("wd 3: %+v %v, want %+v", id, ok, want)
	}
	id, ok = parseInotifyFdinfo(info, 10)
	if want := (FileID{Dev: 254 << 20, Ino: 0xffffffffffff}); !ok || id != want {
		t.Errorf("wd 10: %+v %v, want %+v", id, ok, want)
	}
	if _, ok := parseInotifyFdinfo(info, 4); ok {
		t.Error("wd 4 found, want none")
	}
	if _, ok := parseInotifyFdinfo("inotify wd:5 mask:400\n", 5); ok {
		t.Error("a line without ino and sdev was accepted")
	}
}

// TestFileIDOf: on a file system whose stat(2) device is the superblock's
// (as for the test's temp dir here), the kernel identity agrees with
// stat; a missing file is fs.ErrNotExist.
func TestFileIDOf(t *testing.T) {
	p := t.TempDir() + "/f"
	if err := os.WriteFile(p, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	id, err := FileIDOf(p)
	if err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Stat(p, &st); err != nil {
		t.Fatal(err)
	}
	if id.Ino != st.Ino {
		t.Errorf("ino %d, stat says %d", id.Ino, st.Ino)
	}
	if mt, err := FileIDFromMountTable(p); err != nil || mt != id {
		t.Errorf("kernel identity %+v, from the mount table %+v (%v)", id, mt, err)
	}
	if _, err := FileIDOf(p + "-missing"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: %v, want fs.ErrNotExist", err)
	}
}

// TestIterFailedKeepsIteratorOnTransientErrors: a dump that failed for want
// of descriptors or memory falls back to batch lookups for that read only;
// a kernel that cannot run the iterator switches to batch lookups for good.
func TestIterFailedKeepsIteratorOnTransientErrors(t *testing.T) {
	d := &Datapath{log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	for _, err := range []error{unix.EMFILE, fmt.Errorf("create iterator: %w", unix.ENFILE), unix.ENOMEM} {
		d.iterFailed(err)
		if d.noIter.Load() {
			t.Fatalf("%v: iterator given up for good", err)
		}
	}
	d.iterFailed(fmt.Errorf("create iterator: %w", unix.EINVAL))
	if !d.noIter.Load() {
		t.Error("EINVAL: iterator kept")
	}
}
