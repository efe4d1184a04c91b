package integration

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/testutil"
	"github.com/hostqos/hostqos/qsock"
)

// TestQSockets: the application API end to end.
//   - A C program compiled against the installed header and library
//     (`make install PREFIX=…`, `pkg-config --cflags --libs hostqos`)
//     creates a qsocket in class interactive: its packets leave with AF41
//     from the first one, qinfo counts them exactly, qchange to voice
//     marks the next packet EF.
//   - The same program as nobody: interactive (user_allowed) works, voice
//     (not user_allowed) is refused, and the error says why; attaching a
//     socket root created is refused, and the error says why.
//   - qattach from Go and from Python on an open TCP connection applies
//     without reconnecting.
//   - The C and Go examples (video and sensor senders) build and run.
func TestQSockets(t *testing.T) {
	parallel(t)
	e := newEnv(t)
	e.startDaemon()
	openForNobody(t, e)
	e.hostqos("link", "set", e.iface())
	e.hostqos("class", "set", "interactive", "--user-allowed", "true")
	srv := serverV4.Addr().String()
	sn := testutil.NewReceiver(t, e.server, e.server.Iface("client"))

	// The library, installed; the program, built against the installation.
	prefix := filepath.Join(e.dir, "prefix")
	lib := filepath.Join(prefix, "lib")
	mustRun(t, exec.Command("make", "-s", "-C", "../../libhostqos", "install", "PREFIX="+prefix))
	for _, f := range []string{"include/hostqos/qsock.h", "lib/libhostqos.a", "lib/libhostqos.so.1", "lib/pkgconfig/hostqos.pc", "share/man/man3/qsock.3"} {
		if _, err := os.Stat(filepath.Join(prefix, f)); err != nil {
			t.Errorf("make install: %v", err)
		}
	}
	pc := exec.Command("pkg-config", "--cflags", "--libs", "hostqos")
	pc.Env = append(os.Environ(), "PKG_CONFIG_PATH="+filepath.Join(lib, "pkgconfig"))
	flags := strings.Fields(mustRun(t, pc))
	prog := filepath.Join(e.dir, "qsock_accept")
	mustRun(t, exec.Command("cc", append([]string{"-std=gnu11", "-Wall", "-Werror", "-o", prog, "testdata/qsock_accept.c"}, flags...)...))
	env := []string{"LD_LIBRARY_PATH=" + lib, "HOSTQOS_SOCKET=" + e.d.Socket}

	// Root: interactive, then voice.
	cmd := e.client.Command(prog, "send", srv, "7401", "interactive", "10", "voice", "3")
	cmd.Env = append(os.Environ(), env...)
	out := mustRun(t, cmd)
	t.Logf("C program as root:\n%s", out)
	if !regexp.MustCompile(`first id=\d+ class=interactive dscp=34 sent=10 packets=10 `).MatchString(out) ||
		!regexp.MustCompile(`second id=\d+ class=voice dscp=46 sent=13 packets=13 `).MatchString(out) {
		t.Errorf("qinfo does not count 10 packets in interactive, then 13 in voice:\n%s", out)
	}
	waitPackets(sn, unix.IPPROTO_UDP, 7401, 13)
	for id, f := range sn.To(unix.IPPROTO_UDP, 7401) {
		if f.FirstDSCP != 34 || f.DSCP[34] != 10 || f.DSCP[46] != 3 || f.Packets != 13 {
			t.Errorf("flow %v: first DSCP %d, DSCPs %v; want the first 10 AF41 (34), the next 3 EF (46)", id, f.FirstDSCP, f.DSCP)
		}
	}
	// The order: after the 10th packet every one is EF.
	seq := ""
	for range 13 {
		pk, err := sn.Next(time.Second, testutil.UDPTo(7401))
		if err != nil {
			break
		}
		seq += map[int]string{34: "a", 46: "e"}[pk.DSCP]
	}
	if len(seq) != 13 || strings.Count(seq, "a") != 10 || !strings.HasPrefix(seq, "aaaaaaaaaa") {
		t.Errorf("DSCP sequence %q, want 10 × AF41 (a) then 3 × EF (e)", seq)
	}

	// nobody: interactive is open to them, voice is not.
	cmd = e.asUser(uidNobody, "env", append(env, prog, "send", srv, "7402", "interactive", "5", "voice", "1")...)
	b, err := cmd.CombinedOutput()
	t.Logf("C program as nobody:\n%s", b)
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 3 ||
		!strings.Contains(string(b), "qchange refused errno=1:") || !strings.Contains(string(b), `class "voice" is not open to ordinary users`) {
		t.Errorf("nobody's qchange to voice: %v, want refused with EPERM saying voice is not open to ordinary users", err)
	}
	if !regexp.MustCompile(`first id=\d+ class=interactive dscp=34 sent=5 packets=5 `).MatchString(string(b)) {
		t.Errorf("nobody's qsocket in interactive did not count 5 packets")
	}
	waitPackets(sn, unix.IPPROTO_UDP, 7402, 5)
	allDSCP(t, sn, unix.IPPROTO_UDP, 7402, 34, 5)

	// nobody: a socket root created (inherited as descriptor 3).
	var rootSock int
	e.client.Do(func() error {
		rootSock, err = unix.Socket(unix.AF_INET, unix.SOCK_DGRAM, 0)
		return err
	})
	f := os.NewFile(uintptr(rootSock), "root-socket")
	defer f.Close()
	cmd = e.asUser(uidNobody, "env", append(env, prog, "attach", "3", "default")...)
	cmd.ExtraFiles = []*os.File{f}
	b, err = cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 3 ||
		!strings.Contains(string(b), "qattach refused errno=1:") || !strings.Contains(string(b), "belongs to uid 0") {
		t.Errorf("nobody's qattach of root's socket: %v\n%s\nwant refused with EPERM saying whose socket it is", err, b)
	}

	// Go: qattach on an open TCP connection.
	tcpSink(t, e, srv+":7403")
	var conn net.Conn
	if err := e.client.Do(func() (err error) { conn, err = net.Dial("tcp", srv+":7403"); return err }); err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	writeSome := func() {
		for i := 0; i < 3; i++ {
			if _, err := conn.Write([]byte(strings.Repeat("x", 200))); err != nil {
				t.Fatal(err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	writeSome()
	qsock.Client = api.NewClient(e.d.Socket)
	qs, err := qsock.Attach(conn.(*net.TCPConn), qsock.Params{Class: "bulk"})
	if err != nil {
		t.Fatalf("qsock.Attach: %v", err)
	}
	writeSome()
	in, err := qs.Info()
	if err != nil {
		t.Fatal(err)
	}
	// Class bulk is marked LE (DSCP 1, RFC 8622; docs/concepts.md).
	if in.Class != "bulk" || in.DSCP != 1 || in.Packets < 3 || in.TCP == nil {
		t.Errorf("Go qinfo after attach: %+v, want class bulk, at least 3 packets, TCP_INFO", in)
	}
	checkReattached(t, sn, 7403, 1)
	// hostqos qsock list: root sees it, nobody (not the owner) does not.
	if out := e.hostqos("qsock", "list"); !regexp.MustCompile(`(?m)^\d+\s+0\s+bulk\s+1\s+fifo\s+\d+$`).MatchString(out) {
		t.Errorf("hostqos qsock list as root does not show the Go qsocket:\n%s", out)
	}
	if out, err := e.userHostqos(uidNobody, "qsock", "list", "-o", "json"); err != nil || strings.TrimSpace(out) != "[]" {
		t.Errorf("hostqos qsock list as nobody: %v\n%s\nwant [] (root's qsocket hidden)", err, out)
	}

	// Python: the same.
	tcpSink(t, e, srv+":7404")
	py := e.client.Command("python3", "testdata/qattach_tcp.py", srv, "7404", "interactive")
	py.Env = append(os.Environ(), "PYTHONPATH=../../python", "HOSTQOS_SOCKET="+e.d.Socket)
	out = mustRun(t, py)
	t.Logf("Python: %s", out)
	if !regexp.MustCompile(`class=interactive packets=([3-9]|\d\d+) sent=5 tcp_info=\d+`).MatchString(out) {
		t.Errorf("Python qinfo after qattach: %s", out)
	}
	checkReattached(t, sn, 7404, 34)

	// Python, a datagram qsocket with a per-message scheduler: every
	// message leaves (with its attributes, SCM_TXTIME), marked from the
	// first, counted exactly; the queueing delay is measured; a drop
	// priority out of range is refused.
	py = e.client.Command("python3", "testdata/qsock_udp.py", srv, "7409", "interactive")
	py.Env = append(os.Environ(), "PYTHONPATH=../../python", "HOSTQOS_SOCKET="+e.d.Socket)
	out = mustRun(t, py)
	t.Logf("Python UDP: %s", out)
	if !regexp.MustCompile(`class=interactive scheduler=fifo sent=50 dropped=0 packets=50 samples=([1-9]|\d\d+) mean_ns=\d+ p99_ns=\d+ host_late=0 host_dropped=0 drop_priority_9=EINVAL`).MatchString(out) {
		t.Errorf("Python datagram qsocket: %s\nwant 50 messages sent and through the classifier, queueing delay samples, drop priority 9 refused", out)
	}
	waitPackets(sn, 17, 7409, 50)
	if ds, n := sn.DSCPCounts(17, 7409); n != 50 || ds[34] != 50 {
		t.Errorf("Python datagram qsocket: the receiver saw %d packets, DSCPs %v; want 50, all AF41", n, ds)
	}

	// The examples, C and Go, on an idle link: nothing is dropped or late.
	mustRun(t, exec.Command("make", "-s", "-C", "../../libhostqos", "examples"))
	gobin := filepath.Join(e.dir, "gobin")
	gb := exec.Command("go", "build", "-o", gobin+"/", "../../qsock/examples/...")
	mustRun(t, gb)
	for _, ex := range []struct {
		name string
		cmd  []string
		msgs int
	}{
		{"C video", []string{"../../libhostqos/examples/video_sender", srv, "7405", "1"}, 0},
		{"C sensor", []string{"../../libhostqos/examples/sensor_sender", srv, "7406", "20"}, 20},
		{"Go video", []string{gobin + "/videosender", srv + ":7407", "1"}, 0},
		{"Go sensor", []string{gobin + "/sensorsender", srv + ":7408", "20"}, 20},
	} {
		c := e.client.Command(ex.cmd[0], ex.cmd[1:]...)
		c.Env = append(os.Environ(), env...)
		out := mustRun(t, c)
		m := regexp.MustCompile(`qinfo id=\d+ class=interactive dscp=34 sent=(\d+) sent_bytes=\d+ dropped=(\d+) late=\d+ packets=(\d+)`).FindStringSubmatch(out)
		if m == nil {
			t.Errorf("%s: no qinfo line:\n%s", ex.name, out)
			continue
		}
		sent, _ := strconv.Atoi(m[1])
		dropped, _ := strconv.Atoi(m[2])
		packets, _ := strconv.Atoi(m[3])
		t.Logf("%s: %s", ex.name, strings.TrimSpace(out))
		if ex.msgs > 0 && sent+dropped != ex.msgs {
			t.Errorf("%s: %d sent + %d dropped, want %d messages", ex.name, sent, dropped, ex.msgs)
		}
		if sent == 0 || packets != sent {
			t.Errorf("%s: %d messages sent, %d packets through the classifier; want the same, not 0", ex.name, sent, packets)
		}
	}

	// The host's scheduler (a shaped link has one) acts on the attributes
	// the libraries pass: the C video sender under DWCS, within its
	// declared rate, has every message it sent through the classifier or
	// dropped by the host, and at most 1 frame of any 4 dropped (none when
	// the machine keeps up); a late droppable frame is dropped whole, a
	// non-droppable message sent late (Python; last, as the latter leaves
	// the scheduler's virtual time ahead of the clock).
	e.hostqos("link", "set", e.iface(), "--egress-rate", "100mbit")
	c := e.client.Command("../../libhostqos/examples/video_sender", srv, "7411", "1")
	c.Env = append(os.Environ(), env...)
	out = mustRun(t, c)
	t.Logf("C video, DWCS on a shaped link: %s", strings.TrimSpace(out))
	if m := regexp.MustCompile(`sent=(\d+) .* packets=(\d+) .* sched_dropped=(\d+) sched_frame_dropped=(\d+)`).FindStringSubmatch(out); m == nil {
		t.Errorf("C video under DWCS: no qinfo line:\n%s", out)
	} else {
		n := make([]int, 4)
		for i := range n {
			n[i], _ = strconv.Atoi(m[i+1])
		}
		if n[0] == 0 || n[1]+n[2]+n[3] != n[0] || n[2] > 20/4 {
			t.Errorf("C video under DWCS: %d messages sent, %d through the classifier, %d frames (%d more messages) dropped by the host; want all accounted for, at most 5 of its 20 frames dropped", n[0], n[1], n[2], n[3])
		}
	}
	py = e.client.Command("python3", "testdata/qsock_udp.py", srv, "7410", "interactive", "host")
	py.Env = append(os.Environ(), "PYTHONPATH=../../python", "HOSTQOS_SOCKET="+e.d.Socket)
	out = mustRun(t, py)
	t.Logf("Python UDP, host's scheduler: %s", out)
	if !regexp.MustCompile(`python udp host sent=4 dropped=0 packets=1 late_dropped=1 frame_dropped=2 dropped_bytes=\d+ late=1`).MatchString(out) {
		t.Errorf("Python datagram qsocket, the host's scheduler: %s\nwant the late frame of 3 dropped whole by the host, the non-droppable message sent late", out)
	}
}

func mustRun(t *testing.T, cmd *exec.Cmd) string {
	t.Helper()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, out)
	}
	return string(out)
}

// waitPackets waits (up to 2 s) until the receiver saw n packets to port.
func waitPackets(sn *testutil.Receiver, proto uint8, port uint16, n int) {
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if _, got := sn.DSCPCounts(proto, port); got >= n {
			return
		}
	}
}

// tcpSink accepts TCP connections on addr in the server and reads them.
func tcpSink(t *testing.T, e *env, addr string) {
	t.Helper()
	var ln net.Listener
	if err := e.server.Do(func() (err error) { ln, err = net.Listen("tcp", addr); return err }); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 65536)
				for {
					if _, err := c.Read(buf); err != nil {
						return
					}
				}
			}()
		}
	}()
}

// checkReattached: the client's one connection to port carried unmarked
// segments, then segments marked dscp — one flow, so no reconnect.
func checkReattached(t *testing.T, sn *testutil.Receiver, port uint16, dscp int) {
	t.Helper()
	time.Sleep(100 * time.Millisecond)
	flows := sn.To(unix.IPPROTO_TCP, port)
	if len(flows) != 1 {
		t.Errorf("port %d: %d client flows, want 1 (no reconnect): %v", port, len(flows), flows)
	}
	for id, f := range flows {
		if !f.FirstSYN || f.DSCP[0] < 3 || f.DSCP[dscp] < 3 {
			t.Errorf("flow %v: first SYN %v, DSCPs %v; want unmarked segments before the attach and at least 3 with DSCP %d after", id, f.FirstSYN, f.DSCP, dscp)
		}
	}
}
