package testutil_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hostqos/hostqos/internal/testbed"
	"github.com/hostqos/hostqos/internal/testutil"
)

func netnsIno(t *testing.T, path string) uint64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

// TestNetNSDo: Do runs on a thread inside the namespace (which has only
// lo) and leaves the caller where it was; sockets made in Do stay there.
func TestNetNSDo(t *testing.T) {
	ns := testutil.NewNetNS(t)
	host := netnsIno(t, "/proc/thread-self/ns/net")
	var inside uint64
	var ifaces []net.Interface
	var ln net.Listener
	ns.MustDo(t, func() error {
		var err error
		inside = netnsIno(t, "/proc/thread-self/ns/net")
		if ifaces, err = net.Interfaces(); err != nil {
			return err
		}
		ln, err = net.Listen("tcp", "127.0.0.1:0")
		return err
	})
	defer ln.Close()
	if inside == host || inside != netnsIno(t, "/run/netns/"+ns.NetnsName) {
		t.Errorf("Do ran in netns %d; host %d, want the namespace's", inside, host)
	}
	if len(ifaces) != 1 || ifaces[0].Name != "lo" || ifaces[0].Flags&net.FlagUp == 0 {
		t.Errorf("interfaces in a new namespace: %+v, want lo up only", ifaces)
	}
	if c, err := net.DialTimeout("tcp", ln.Addr().String(), time.Second); err == nil {
		c.Close()
		t.Error("a listener made in Do is reachable from the host's namespace")
	}
	if err := ns.Do(func() error { return errors.New("boom") }); err == nil || err.Error() != "boom" {
		t.Errorf("Do error: %v, want fn's", err)
	}
}

// send sends one datagram (or, for tcp, a connection attempt) from A to B
// with the given DSCP.
func send(t *testing.T, p *testutil.Pair, network string, dst netip.AddrPort, dscp int) {
	t.Helper()
	p.A.MustDo(t, func() error {
		d := net.Dialer{Timeout: 200 * time.Millisecond, Control: func(_, _ string, c syscall.RawConn) error {
			var serr error
			err := c.Control(func(fd uintptr) {
				if dst.Addr().Is4() {
					serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_TOS, dscp<<2)
				} else {
					serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_TCLASS, dscp<<2)
				}
			})
			return errors.Join(err, serr)
		}}
		c, err := d.Dial(network, dst.String())
		if network == "tcp" {
			if err == nil {
				c.Close()
			}
			return nil // nobody listens: the SYN is what counts
		}
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.Write([]byte("dscp"))
		return err
	})
}

// TestPairAndReceiver: the pair's ends reach each other over IPv4 and
// IPv6, and the receiver reports each packet's DSCP, per packet and per
// flow, the first (a TCP SYN) included.
func TestPairAndReceiver(t *testing.T) {
	p := testutil.NewPair(t)
	if p.A.AddrV4() != testutil.PairA4.Addr() || p.B.AddrV6() != testutil.PairB6.Addr() || p.IfA == "" || p.IndexB == 0 {
		t.Fatalf("pair %+v: addresses %v %v", p, p.A.AddrV4(), p.B.AddrV6())
	}
	rx := testutil.NewReceiver(t, p.B, p.IfB)
	b4 := netip.AddrPortFrom(testutil.PairB4.Addr(), 9001)
	b6 := netip.AddrPortFrom(testutil.PairB6.Addr(), 9001)
	send(t, p, "udp", b4, 46)
	pkt, err := rx.Next(3*time.Second, testutil.UDPTo(9001))
	if err != nil {
		t.Fatal(err)
	}
	if pkt.DSCP != 46 || pkt.TOS != 46<<2 || pkt.Flow.Src.Addr() != testutil.PairA4.Addr() || pkt.Flow.Dst != b4 {
		t.Errorf("IPv4 packet %+v, want DSCP 46 from %v to %v", pkt, testutil.PairA4.Addr(), b4)
	}
	send(t, p, "udp", b6, 10)
	if pkt, err = rx.Next(3*time.Second, testutil.UDPTo(9001)); err != nil {
		t.Fatal(err)
	}
	if pkt.DSCP != 10 || pkt.Flow.Dst != b6 {
		t.Errorf("IPv6 packet %+v, want DSCP 10 to %v", pkt, b6)
	}
	send(t, p, "tcp", netip.AddrPortFrom(testutil.PairB4.Addr(), 9002), 18)
	if pkt, err = rx.Next(3*time.Second, func(p testutil.Packet) bool { return p.Flow.Proto == unix.IPPROTO_TCP }); err != nil {
		t.Fatal(err)
	}
	if !pkt.SYN || pkt.DSCP != 18 {
		t.Errorf("TCP packet %+v, want a SYN with DSCP 18", pkt)
	}
	if _, err := rx.Next(100*time.Millisecond, testutil.UDPTo(9001)); !errors.Is(err, testutil.ErrNoPacket) {
		t.Errorf("Next with nothing more sent: %v, want ErrNoPacket", err)
	}
	flows := rx.To(unix.IPPROTO_UDP, 9001)
	if len(flows) != 2 {
		t.Fatalf("UDP flows to 9001: %v, want 2", flows)
	}
	for id, f := range flows {
		want := 46
		if id.Dst.Addr().Is6() {
			want = 10
		}
		if f.Packets != 1 || f.FirstDSCP != want || f.DSCP[want] != 1 {
			t.Errorf("flow %v: %+v, want one packet with DSCP %d", id, f, want)
		}
	}
	for _, f := range rx.To(unix.IPPROTO_TCP, 9002) {
		if !f.FirstSYN || f.FirstDSCP != 18 {
			t.Errorf("TCP flow %+v, want first packet a SYN with DSCP 18", f)
		}
	}
	if c, n := rx.DSCPCounts(unix.IPPROTO_UDP, 9001); n != 2 || c[46] != 1 || c[10] != 1 {
		t.Errorf("DSCP counts %v (total %d), want one EF and one AF11", c, n)
	}
	rx.Stop()
	rx.Stop() // again: no-op
}

// TestTempPinDir: the directory is on bpffs, and it and its marker are
// gone after the test.
func TestTempPinDir(t *testing.T) {
	testutil.NeedRoot(t)
	var dir string
	t.Run("make", func(t *testing.T) {
		dir = testutil.TempPinDir(t)
		var st unix.Statfs_t
		if err := unix.Statfs(dir, &st); err != nil || uint32(st.Type) != 0xcafe4a11 {
			t.Fatalf("%s: not on bpffs (%v)", dir, err)
		}
		if err := os.Mkdir(filepath.Join(dir, "links"), 0o700); err != nil {
			t.Fatal(err)
		}
	})
	for _, p := range []string{dir, filepath.Join(testutil.MarkerDir, filepath.Base(dir)+".pid")} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left after the test (%v)", p, err)
		}
	}
}

// TestCleanStale removes the pin directory of a dead process, not that of
// a live one.
func TestCleanStale(t *testing.T) {
	testutil.NeedRoot(t)
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	mk := func(pid int) string {
		name := testutil.PinDirPrefix + testutil.RandHex(4)
		dir := filepath.Join(testutil.BPFFSRoot, name)
		if err := os.MkdirAll(testutil.MarkerDir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(testutil.MarkerDir, name+".pid"), []byte(strconv.Itoa(pid)+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			os.RemoveAll(dir)
			os.Remove(filepath.Join(testutil.MarkerDir, name+".pid"))
		})
		return dir
	}
	stale, live := mk(dead.Process.Pid), mk(os.Getpid())
	if err := testutil.CleanStale(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("pin directory of a dead process left: %v", err)
	}
	if _, err := os.Stat(live); err != nil {
		t.Errorf("pin directory of a live process removed: %v", err)
	}
}

const childEnv = "HQ_TESTUTIL_SIGNAL_CHILD"

// TestSignalCleanup: a test process that gets SIGTERM removes its
// namespaces and pin directories and exits with status 130.
func TestSignalCleanup(t *testing.T) {
	if os.Getenv(childEnv) != "" {
		p := testutil.NewPair(t)
		dir := testutil.TempPinDir(t)
		fmt.Printf("made %s %s %s\n", p.A.NetnsName, p.B.NetnsName, dir)
		time.Sleep(time.Minute) // until the parent's SIGTERM
		return
	}
	testutil.NeedRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run", "^TestSignalCleanup$", "-test.v")
	cmd.Env = append(os.Environ(), childEnv+"=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var made []string
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if f, ok := strings.CutPrefix(sc.Text(), "made "); ok {
			made = strings.Fields(f)
			break
		}
	}
	if len(made) != 3 {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("child did not report what it made: %v", made)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	go func() { _, _ = bufio.NewReader(out).WriteTo(os.Stdout) }()
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 130 {
		t.Errorf("child after SIGTERM: %v, want exit status 130", err)
	}
	left := []string{filepath.Join("/run/netns", made[0]), filepath.Join("/run/netns", made[1]),
		filepath.Join(testbed.MarkerDir, made[0]+".pid"), made[2],
		filepath.Join(testutil.MarkerDir, filepath.Base(made[2])+".pid")}
	for _, p := range left {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left after SIGTERM (%v)", p, err)
		}
	}
}
