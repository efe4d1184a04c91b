package integration

import (
	"debug/elf"
	"fmt"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hostqos/hostqos/internal/testutil"
)

const (
	dscpEF   = 46
	dscpAF41 = 34
	dscpAF21 = 18
	dscpAF22 = 20
)

// allDSCP checks that every packet of every flow towards port has dscp and
// that the very first one did too.
func allDSCP(t *testing.T, s *testutil.Receiver, proto uint8, port uint16, want int, minPackets int) {
	t.Helper()
	flows := s.To(proto, port)
	total := 0
	for id, f := range flows {
		if f.FirstDSCP != want {
			t.Errorf("flow %v: first packet DSCP %d, want %d", id, f.FirstDSCP, want)
		}
		for d, n := range f.DSCP {
			if d != want {
				t.Errorf("flow %v: %d packets with DSCP %d, want all %d", id, n, d, want)
			}
		}
		total += f.Packets
	}
	if total < minPackets {
		t.Errorf("port %d/%d: saw %d packets, want at least %d", proto, port, total, minPackets)
	}
}

// TestExeRuleMarksFromFirstPacket: a rule by executable path marks a UDP
// and a TCP app's packets, as seen by the receiver, from the first packet
// (the TCP SYN included), over IPv4 and IPv6; a static binary run with
// `hostqos run --dscp AF41` is marked; an unmanaged program is not.
func TestExeRuleMarksFromFirstPacket(t *testing.T) {
	parallel(t)
	e := newEnv(t)
	e.startDaemon()
	marked := e.app("marked-app")
	plain := e.app("plain-app")
	static := e.app("static-app")
	assertStatic(t, static)
	e.hostqos("link", "set", e.iface())
	e.hostqos("rule", "add", "marked", "--exe", marked, "--dscp", "EF")

	sn, err := testutil.StartReceiver(e.server, e.server.Iface("client"))
	if err != nil {
		t.Fatal(err)
	}
	defer sn.Stop()
	srv4, srv6 := serverV4.Addr().String(), "["+serverV6.Addr().String()+"]"
	e.udpSink(srv4+":5001", 20*time.Second)
	e.udpSink(srv6+":5001", 20*time.Second)
	e.udpSink(srv4+":5003", 20*time.Second)
	e.udpSink(srv4+":5004", 20*time.Second)
	tcp := e.tcpSink(srv4+":5002", 20*time.Second, 1)
	tcp6 := e.tcpSink(srv6+":5002", 20*time.Second, 1)

	udp := func(bin, to string) {
		e.runApp(bin, "tool", "udp-send", "--to", to, "--pps", "200", "--count", "20", "--size", "200")
	}
	udp(marked, srv4+":5001")
	udp(marked, srv6+":5001")
	e.runApp(marked, "tool", "tcp-send", "--to", srv4+":5002", "--duration", "1s")
	e.runApp(marked, "tool", "tcp-send", "--to", srv6+":5002", "--duration", "1s")
	udp(plain, srv4+":5003")
	// hostqos run: the static binary is covered like any other program.
	e.runApp(hostqosBin(), "--socket", e.d.Socket, "run", "--dscp", "AF41", "--", static,
		"tool", "udp-send", "--to", srv4+":5004", "--pps", "200", "--count", "20", "--size", "200")
	time.Sleep(300 * time.Millisecond)

	allDSCP(t, sn, unix.IPPROTO_UDP, 5001, dscpEF, 40)
	allDSCP(t, sn, unix.IPPROTO_TCP, 5002, dscpEF, 10)
	for id, f := range sn.To(unix.IPPROTO_TCP, 5002) {
		if !f.FirstSYN {
			t.Errorf("flow %v: the first packet seen was not the SYN", id)
		}
	}
	allDSCP(t, sn, unix.IPPROTO_UDP, 5003, 0, 20)
	allDSCP(t, sn, unix.IPPROTO_UDP, 5004, dscpAF41, 20)
	if r := waitResult(t, tcp, 30*time.Second); r == nil || r.Bytes == 0 {
		t.Errorf("IPv4 TCP sink received nothing: %+v", r)
	}
	if r := waitResult(t, tcp6, 30*time.Second); r == nil || r.Bytes == 0 {
		t.Errorf("IPv6 TCP sink received nothing: %+v", r)
	}
	if st := e.ruleStat("marked"); st.Packets == 0 {
		t.Errorf("rule marked counted nothing: %+v", st)
	}
}

// assertStatic makes sure the test really exercises a static binary.
func assertStatic(t *testing.T, path string) {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Fatalf("%s is dynamically linked; the test needs a static binary", path)
		}
	}
}

// TestFlowRuleMarksAndCountsOnlyMatching: a rule on remote port and remote
// address marks and counts only those flows, IPv6 like IPv4.
func TestFlowRuleMarksAndCountsOnlyMatching(t *testing.T) {
	parallel(t)
	e := newEnv(t)
	e.startDaemon()
	e.hostqos("link", "set", e.iface())
	e.hostqos("rule", "add", "f4", "--proto", "udp", "--rport", "6000", "--remote", serverV4.Addr().String()+"/32", "--dscp", "AF21")
	e.hostqos("rule", "add", "f6", "--proto", "udp", "--rport", "6000-6000", "--remote", "2001:db8::/64", "--dscp", "AF22")
	sn, err := testutil.StartReceiver(e.server, e.server.Iface("client"))
	if err != nil {
		t.Fatal(err)
	}
	defer sn.Stop()
	app := e.app("flow-app")
	srv4, srv6 := serverV4.Addr().String(), "["+serverV6.Addr().String()+"]"
	for _, to := range []string{srv4 + ":6000", srv4 + ":6001", srv6 + ":6000", srv6 + ":6001"} {
		e.udpSink(to, 20*time.Second)
	}
	for _, to := range []string{srv4 + ":6000", srv4 + ":6001", srv6 + ":6000", srv6 + ":6001"} {
		e.runApp(app, "tool", "udp-send", "--to", to, "--pps", "500", "--count", "50", "--size", "100")
	}
	time.Sleep(300 * time.Millisecond)
	byFamily := func(port uint16, v6 bool) (map[int]int, int) {
		out, total := map[int]int{}, 0
		for id, f := range sn.To(unix.IPPROTO_UDP, port) {
			if id.Dst.Addr().Is6() != v6 {
				continue
			}
			for d, n := range f.DSCP {
				out[d] += n
				total += n
			}
		}
		return out, total
	}
	check := func(port uint16, v6 bool, want int) int {
		got, total := byFamily(port, v6)
		if total < 50 || got[want] != total {
			t.Errorf("port %d v6=%v: DSCP counts %v of %d packets, want all %d", port, v6, got, total, want)
		}
		return total
	}
	n4 := check(6000, false, dscpAF21)
	n6 := check(6000, true, dscpAF22)
	check(6001, false, 0)
	check(6001, true, 0)
	eventually(t, 3*time.Second, "rule counters", func() (bool, string) {
		a, b := e.ruleStat("f4"), e.ruleStat("f6")
		return a.Packets == uint64(n4) && b.Packets == uint64(n6),
			fmt.Sprintf("f4 counted %d (receiver saw %d), f6 counted %d (receiver saw %d)", a.Packets, n4, b.Packets, n6)
	})
}
