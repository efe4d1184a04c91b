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
