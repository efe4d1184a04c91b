package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/datapath"
	"github.com/hostqos/hostqos/internal/lab"
	"github.com/hostqos/hostqos/internal/testutil"
)

// TestExeRuleMarksOnEveryFilesystem: an exe rule marks a program from its
// first packet wherever the program lies: btrfs (top level, a subvolume
// reached through the top level, the subvolume mounted on its own), ext4,
// tmpfs, overlayfs with the lower layer on ext4 and the upper on tmpfs (a
// file of each layer; stat(2) reports per-layer pseudo devices there) and
// a bind mount. On btrfs and that overlayfs stat(2)'s device is not the
// superblock's, which the kernel (and the datapath) uses: before exe
// identities were asked from the kernel these rules never matched.
func TestExeRuleMarksOnEveryFilesystem(t *testing.T) {
	parallel(t)
	e := newEnv(t)
	for _, fs := range []string{"btrfs", "ext4", "overlay", "tmpfs"} {
		if !kernelHasFS(t, fs) {
			t.Skipf("the kernel has no %s file system", fs)
		}
	}
	m := &mounter{t: t}
	root := filepath.Join(e.dir, "fs")

	// btrfs on a loop device: top level, a subvolume, the subvolume alone.
	btrfsDev := m.loopImage(filepath.Join(e.dir, "btrfs.img"), 256<<20, "mkfs.btrfs", "-q")
	btrfs := m.mount(filepath.Join(root, "btrfs"), btrfsDev, "btrfs", "")
	m.run("btrfs", "subvolume", "create", filepath.Join(btrfs, "sv"))
	btrfsSub := m.mount(filepath.Join(root, "btrfs-sv"), btrfsDev, "btrfs", "subvol=sv")
	// ext4 on a loop device; a directory of it bind-mounted elsewhere.
	ext4Dev := m.loopImage(filepath.Join(e.dir, "ext4.img"), 256<<20, "mkfs.ext4", "-q", "-F")
	ext4 := m.mount(filepath.Join(root, "ext4"), ext4Dev, "ext4", "")
	for _, d := range []string{"bindsrc", "lower"} {
		if err := os.Mkdir(filepath.Join(ext4, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	bind := m.bind(filepath.Join(ext4, "bindsrc"), filepath.Join(root, "bind"))
	tmpfs := m.mount(filepath.Join(root, "tmpfs"), "tmpfs", "tmpfs", "size=256m")
	// overlayfs: lower on ext4, upper on tmpfs (not the same file system).
	lower := filepath.Join(ext4, "lower")
	upper, work := filepath.Join(tmpfs, "upper"), filepath.Join(tmpfs, "work")
	for _, d := range []string{upper, work} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	place := func(path string) string {
		if err := lab.CopyExecutable(filepath.Join(binDir, "hostqos"), path); err != nil {
			t.Fatal(err)
		}
		return path
	}
	lowerApp := place(filepath.Join(lower, "app-lower"))
	ovl := m.mount(filepath.Join(root, "ovl"), "overlay", "overlay",
		fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", lower, upper, work))

	apps := []struct{ name, path string }{
		{"btrfs-top", place(filepath.Join(btrfs, "app"))},
		{"btrfs-subvol", place(filepath.Join(btrfs, "sv", "app-sv"))},
		{"btrfs-subvol-mount", filepath.Join(btrfsSub, "app-sv")},
		{"ext4", place(filepath.Join(ext4, "app"))},
		{"bind", place(filepath.Join(bind, "app"))},
		{"tmpfs", place(filepath.Join(tmpfs, "app"))},
		{"ovl-lower", filepath.Join(ovl, filepath.Base(lowerApp))},
		{"ovl-upper", place(filepath.Join(ovl, "app-upper"))},
	}
	if _, err := os.Stat(filepath.Join(upper, "app-upper")); err != nil {
		t.Fatalf("the overlay's new file is not in the upper layer: %v", err)
	}
	for _, a := range apps {
		var st unix.Stat_t
		if err := unix.Stat(a.path, &st); err != nil {
			t.Fatal(err)
		}
		id, err := datapath.FileIDOf(a.path)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %s stat dev %d:%d ino %d; kernel dev %d:%d ino %d", a.name, a.path,
			unix.Major(st.Dev), unix.Minor(st.Dev), st.Ino, id.Dev>>20, id.Dev&0xfffff, id.Ino)
		// The fallback (mount table and statx) must agree with what the
		// kernel reports for the inode.
		if mt, err := datapath.FileIDFromMountTable(a.path); err != nil || mt != id {
			t.Errorf("%s: identity from the mount table %+v (%v), the kernel says %+v", a.name, mt, err, id)
		}
	}

	e.startDaemon()
	e.hostqos("link", "set", e.iface())
	for _, a := range apps {
		e.hostqos("rule", "add", a.name, "--exe", a.path, "--dscp", "EF")
	}
	var rules []api.RuleInfo
	e.hostqosJSON(&rules, "rule", "list")
	for _, ri := range rules {
		t.Logf("rule %s: %s", ri.Rule.Name, strings.Join(ri.Resolved, "; "))
	}

	sn, err := testutil.StartReceiver(e.server, e.server.Iface("client"))
	if err != nil {
		t.Fatal(err)
	}
	defer sn.Stop()
	srv := serverV4.Addr().String()
	for i := range apps {
		e.udpSink(fmt.Sprintf("%s:%d", srv, 5100+i), 30*time.Second)
	}
	for i, a := range apps {
		e.runApp(a.path, "tool", "udp-send", "--to", fmt.Sprintf("%s:%d", srv, 5100+i), "--pps", "200", "--count", "10", "--size", "200")
	}
	time.Sleep(300 * time.Millisecond)
	for i, a := range apps {
		t.Run(a.name, func(t *testing.T) {
			allDSCP(t, sn, unix.IPPROTO_UDP, uint16(5100+i), dscpEF, 10)
		})
	}
	for _, w := range e.status().Warnings {
		if strings.Contains(w, "cannot be resolved") {
			t.Errorf("status warns: %s", w)
		}
	}
}

// kernelHasFS reports whether the kernel knows file system fs (loading
// its module if need be).
func kernelHasFS(t *testing.T, fs string) bool {
	t.Helper()
	has := func() bool {
		data, err := os.ReadFile("/proc/filesystems")
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(data), "\n") {
			f := strings.Fields(line)
			if len(f) > 0 && f[len(f)-1] == fs {
				return true
			}
		}
		return false
	}
	if has() {
		return true
	}
	_ = exec.Command("modprobe", fs).Run()
	return has()
}

// mounter makes loop devices and mounts and undoes them at cleanup, last
// first.
type mounter struct{ t *testing.T }

func (m *mounter) run(name string, args ...string) string {
	m.t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		m.t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// loopImage creates an image file of size bytes, makes a file system on it
// with mkfs and attaches it to a loop device, which it returns.
func (m *mounter) loopImage(img string, size int64, mkfs ...string) string {
	m.t.Helper()
	if _, err := exec.LookPath(mkfs[0]); err != nil {
		m.t.Fatalf("%s is not installed: run `make deps` (scripts/install-deps.sh installs it)", mkfs[0])
	}
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		m.t.Fatal(err)
	}
	if err := os.Truncate(img, size); err != nil {
		m.t.Fatal(err)
	}
	m.run(mkfs[0], append(mkfs[1:], img)...)
	dev := m.run("losetup", "--find", "--show", img)
	m.t.Cleanup(func() {
		if out, err := exec.Command("losetup", "-d", dev).CombinedOutput(); err != nil {
			m.t.Errorf("detach %s: %v %s", dev, err, out)
		}
	})
	return dev
}

// mount mounts src (of type fstype, with options opts) at dir, creating dir.
func (m *mounter) mount(dir, src, fstype, opts string) string {
	m.t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		m.t.Fatal(err)
	}
	if err := unix.Mount(src, dir, fstype, 0, opts); err != nil {
		m.t.Fatalf("mount %s (%s, %s) at %s: %v", src, fstype, opts, dir, err)
	}
	m.unmountAtCleanup(dir)
	return dir
}

// bind bind-mounts src at dir.
func (m *mounter) bind(src, dir string) string {
	m.t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		m.t.Fatal(err)
	}
	if err := unix.Mount(src, dir, "", unix.MS_BIND, ""); err != nil {
		m.t.Fatalf("bind-mount %s at %s: %v", src, dir, err)
	}
	m.unmountAtCleanup(dir)
	return dir
}

func (m *mounter) unmountAtCleanup(dir string) {
	m.t.Cleanup(func() {
		var err error
		for i := 0; i < 50; i++ { // a program of the test may still be exiting
			if err = unix.Unmount(dir, 0); err != unix.EBUSY {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err != nil {
			m.t.Errorf("unmount %s: %v", dir, err)
			_ = unix.Unmount(dir, unix.MNT_DETACH)
		}
	})
}
