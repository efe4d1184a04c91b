package integration

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hostqos/hostqos/api"
)

// Admission as an ordinary user would attack it: sums that wrap, and one
// user taking a link's whole real-time admission.

// overflowRate is 2⁶⁴ − 3999999 bit/s: a user's 4 Mbit/s plus it is
// 2⁶⁴ + 1, which wrapped to 1 bit/s.
const overflowRate uint64 = 18446744073705551617

// TestQSockRateOverflowAsNobody: nobody holds two scheduled qsockets of
// 2 Mbit/s (their 4 Mbit/s bound) and attaches a third declaring
// 2⁶⁴ − 3999999 bit/s. It is refused naming field rate and the bound; the
// daemon still holds nobody's 4 Mbit/s and the link's qsched class stays
// at 4 Mbit/s (it was accepted, the user got 7 Mbit/s past the bound and
// the class shrank to 3 Mbit/s).
func TestQSockRateOverflowAsNobody(t *testing.T) {
	parallel(t)
	e := newEnv(t)
	e.startDaemon()
	openForNobody(t, e)
	e.hostqos("link", "set", e.iface(), "--egress-rate", "10mbit")
	e.hostqos("class", "set", "interactive", "--user-allowed", "true")

	cmd := e.asUser(uidNobody, e.attacker())
	cmd.Env = append(os.Environ(), attackerEnv+"=qsched", "HQ_IT_SOCKET="+e.d.Socket)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { stdin.Close(); _ = cmd.Wait() }()
	var out []string
	sc := bufio.NewScanner(stdout)
	for sc.Scan() && sc.Text() != "READY" {
		out = append(out, sc.Text())
	}
	report := strings.Join(out, "\n")
	t.Logf("nobody's qsockets:\n%s", report)
	if strings.Count(report, "attach 2000000: ok") != 2 {
		t.Fatalf("nobody's two 2 Mbit/s qsockets were not both admitted:\n%s", report)
	}
	if !strings.Contains(report, fmt.Sprintf("attach %d: refused", overflowRate)) || !strings.Contains(report, "field rate") || !strings.Contains(report, "above 10tbit") {
		t.Errorf("the rate near 2⁶⁴ was not refused naming field rate and the bound:\n%s", report)
	}

	var qs []api.QSocket
	e.hostqosJSON(&qs, "qsock", "list")
	var sum uint64
	for _, q := range qs {
		if q.UID == uidNobody {
			sum += q.Rate
		}
	}
	if len(qs) != 2 || sum != 4_000_000 {
		t.Errorf("the daemon holds %+v, want nobody's two qsockets of 2 Mbit/s", qs)
	}
	if r := qschedClassRate(t, e); r != "4Mbit" {
		t.Errorf("the link's qsched class is at %q, want 4Mbit (the admitted rates)", r)
	}
}

// qschedClassRate is the rate tc shows for the qsched class of the
// client's link ("" without one).
func qschedClassRate(t *testing.T, e *env) string {
	t.Helper()
	out, err := e.client.Command("tc", "class", "show", "dev", e.iface()).CombinedOutput()
	if err != nil {
		t.Fatalf("tc class show: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`(?m)^class htb 4851:7000 .*\brate (\S+)`).FindStringSubmatch(string(out))
	if m == nil {
		return ""
	}
	return m[1]
}

// qschedAttack is the attacker's "qsched" mode: two edf-lossy qsockets
// declaring 2 Mbit/s, then one declaring overflowRate; it prints one line
// per attach, then READY, and keeps the sockets open until stdin closes.
func qschedAttack(sock string) int {
	c := api.NewClient(sock)
	var fds []int
	for _, rate := range []uint64{2_000_000, 2_000_000, overflowRate} {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM, 0)
		if err != nil {
			fmt.Println("socket:", err)
			return 1
		}
		fds = append(fds, fd)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err = c.QSockets().Attach(ctx, fd, api.QSockParams{Class: "interactive", Scheduler: api.SchedEDFLossy, Rate: rate})
		cancel()
		if err != nil {
			fmt.Printf("attach %d: refused: %v\n", rate, strings.ReplaceAll(err.Error(), "\n", " "))
		} else {
			fmt.Printf("attach %d: ok\n", rate)
		}
	}
	fmt.Println("READY")
	_, _ = io.Copy(io.Discard, os.Stdin)
	for _, fd := range fds {
		unix.Close(fd)
	}
	return 0
}

// TestRTChannelsAsNobody: nobody's real-time channels on a 100 Mbit/s
// link. The report's channel (1400 B every 180 µs within an hour: 0.98 of
// the link's real-time utilization) is refused while class voice is not
// open to ordinary users, then for its delay of an hour, then for taking
// more than half of the link; a channel of 0.3 is admitted, and root's
// next channel is admitted beside it (it was refused at utilization 1.04).
func TestRTChannelsAsNobody(t *testing.T) {
	parallel(t)
	e := newEnv(t)
	e.startDaemon()
	openForNobody(t, e)
	e.hostqos("link", "set", e.iface(), "--egress-rate", "100mbit")
	open := func(period, delay string, more ...string) []string {
		return append([]string{"rtchan", "open", "--link", e.iface(), "--message-bytes", "1400", "--period", period, "--delay", delay}, more...)
	}
	refused := func(what string, args []string, want ...string) {
		t.Helper()
		out, err := e.userHostqos(uidNobody, append(args, "--for", "1ms")...)
		t.Logf("%s: %s", what, out)
		if err == nil {
			t.Errorf("%s: admitted, want refused", what)
		}
		for _, w := range want {
			if !strings.Contains(out, w) {
				t.Errorf("%s: %q does not say %q", what, out, w)
			}
		}
	}
	refused("the report's channel, voice closed", open("180us", "1s"), "class voice", "--user-allowed true")
	e.hostqos("class", "set", "voice", "--user-allowed", "true")
	refused("a delay of an hour", open("180us", "3600s"), "field delay_ns = \"3600000000000\"", "1µs … 10s")
	refused("the report's channel with a delay of 1s", open("180us", "1s"), "uid 65534's channels on it would take 0.9840", "--max-user-rt-utilization")
	var chans []api.RTChannel
	e.hostqosJSON(&chans, "rtchan", "list")
	if len(chans) != 0 {
		t.Fatalf("refused channels are listed: %+v", chans)
	}

	// 0.3 of the link, held for a while.
	held := e.asUser(uidNobody, hostqosBin(), append([]string{"--socket", e.d.Socket}, open("590us", "1s", "--name", "mine", "--for", "60s")...)...)
	var heldOut strings.Builder
	held.Stdout, held.Stderr = &heldOut, &heldOut
	held.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := held.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = syscall.Kill(-held.Process.Pid, syscall.SIGKILL); _ = held.Wait() }()
	eventually(t, 10*time.Second, "nobody's channel of 0.3 is admitted", func() (bool, string) {
		e.hostqosJSON(&chans, "rtchan", "list")
		return len(chans) == 1 && chans[0].UID == uidNobody, heldOut.String()
	})
	refused("a second channel of 0.25", open("708us", "1s"), "would take 0.5", "--max-user-rt-utilization")
	// Root's channel: half of the link within 20 ms, beside nobody's.
	if out, err := e.hostqosErr(open("354us", "20ms", "--for", "1ms")...); err != nil {
		t.Errorf("root's channel beside nobody's: %v\n%s", err, out)
	}
}

// TestLinkSetKeepsShaping: docs/ddos.md's `hostqos link set IFACE
// --syn-rate 2000/s --syn-rate-per-source 20/s` on a shaped link with a
// guaranteed reservation and a class minbw of 4 Mbit/s changes only the
// SYN limits: the HTB tree (the link at 10 Mbit/s, voice's 4 Mbit/s, the
// reservation's 2 Mbit/s leaf) stays as it was (it turned the link into
// "mark only", exit 0). Taking the shaping away under those guarantees is
// refused with the numbers, a rate cut under them too (forced or not: no
// over-commit); --force removes the shaping, and the reservation stays,
// reported as not enforced, while a new one is refused.
func TestLinkSetKeepsShaping(t *testing.T) {
	parallel(t)
	e := newEnv(t)
	e.writeConfig(fmt.Sprintf(`
[[link]]
name = %q
egress_rate = "10mbit"

[[class]]
name = "voice"
minbw = "4mbit"

[[reservation]]
name = "rtp"
proto = "udp"
rport = "5004"
service = "guaranteed"
rate = "2mbit"
burst = "16KiB"
`, e.iface()))
	e.startDaemon()
	tree := func() string {
		out, err := e.client.Command("tc", "class", "show", "dev", e.iface()).CombinedOutput()
		if err != nil {
			t.Fatalf("tc class show: %v\n%s", err, out)
		}
		return string(out)
	}
	enforced := func(what string) {
		t.Helper()
		tc := tree()
		for _, want := range []*regexp.Regexp{
			regexp.MustCompile(`class htb 4851:1 root rate 10Mbit ceil 10Mbit`),
			// voice's general class: a leaf, or with flow queueing an
			// inner class (tc prints no prio for those)
			regexp.MustCompile(`(?m)^class htb 4851:\S+ parent \S+ (leaf \S+ )?(prio 0 )?rate 4Mbit`),
			// The reservation's leaf, shaped to its Tspec: r in frames of
			// M = 1500 bytes (× 1514/1500).
			regexp.MustCompile(`(?m)^class htb 4851:\S+ parent \S+ (leaf \S+ )?prio 0 rate 2018Kbit`),
		} {
			if !want.MatchString(tc) {
				t.Errorf("%s: the HTB tree has no %s:\n%s", what, want, tc)
			}
		}
		var ls []api.LinkStatus
		e.hostqosJSON(&ls, "link", "list")
		if len(ls) != 1 || ls[0].EgressRate != 10e6 {
			t.Errorf("%s: links %+v, want %s at 10mbit", what, ls, e.iface())
		}
	}
	enforced("before")
	before := tree()

	out := e.hostqos("link", "set", e.iface(), "--syn-rate", "2000/s", "--syn-rate-per-source", "20/s")
	t.Logf("docs/ddos.md's example:\n%s", out)
	enforced("after the SYN limits")
	if after := tree(); after != before {
		t.Errorf("the SYN limits changed the HTB tree:\nbefore\n%s\nafter\n%s", before, after)
	}
	var ls []api.LinkStatus
	e.hostqosJSON(&ls, "link", "list")
	if len(ls) != 1 || ls[0].SynRate != 2000 || ls[0].SynRatePerSource != 20 {
		t.Errorf("links %+v, want the SYN limits set", ls)
	}

	refused := func(what string, want []string, args ...string) {
		t.Helper()
		out, err := e.hostqosErr(append([]string{"link", "set", e.iface()}, args...)...)
		t.Logf("%s: %s", what, out)
		if err == nil {
			t.Errorf("%s: applied, want refused", what)
		}
		for _, w := range want {
			if !strings.Contains(out, w) {
				t.Errorf("%s: %q does not say %q", what, out, w)
			}
		}
		enforced("after " + what)
	}
	refused("removing the rate", []string{"removing the shaping (egress_rate 10mbit) leaves guarantees 6mbit admitted on the link unenforced (class voice 4mbit, reservation rtp 2mbit): it would reserve 0", "--force"},
		"--egress-rate", "0")
	for _, force := range [][]string{nil, {"--force"}} {
		refused("a rate cut under the guarantees "+strings.Join(force, ""), []string{"guarantees 6mbit exceed reservable capacity 5.6mbit (0.8 × 7mbit): class voice 4mbit, reservation rtp 2mbit"},
			append([]string{"--egress-rate", "7mbit"}, force...)...)
	}

	out = e.hostqos("link", "set", e.iface(), "--egress-rate", "0", "--force")
	t.Logf("forced:\n%s", out)
	if tc := tree(); strings.Contains(tc, "class htb") {
		t.Errorf("the forced removal left the HTB tree:\n%s", tc)
	}
	e.hostqosJSON(&ls, "link", "list")
	if len(ls) != 1 || ls[0].EgressRate != 0 || ls[0].SynRate != 2000 {
		t.Errorf("after the forced removal: %+v, want the link marked only, its SYN limits kept", ls)
	}
	// The reservation stays, reported as not enforced; a new one is
	// refused.
	if out := e.hostqos("resv", "show", "rtp"); !strings.Contains(out, "not enforced: no managed link has an egress_rate") {
		t.Errorf("resv show after the forced removal does not say the reservation is not enforced:\n%s", out)
	}
	if out, err := e.hostqosErr("resv", "add", "more", "--service", "guaranteed", "--proto", "udp", "--rport", "5006", "--rate", "1mbit", "--burst", "16KiB"); err == nil ||
		!strings.Contains(out, "cannot be enforced") {
		t.Errorf("a reservation added with nothing to enforce it: %v\n%s", err, out)
	}
}
