package integration

import (
	"context"
	"fmt"
	"net"
	"os"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/rtchan"
)

// TestRTChannelsHostWide: two real processes ask
// hostqosd for real-time channels that together exceed the link. The
// first is admitted and listed with its owner and bound figures; the
// second is refused with the failing bound; when the first process is
// killed (no close) its channel is released by its pidfd and the second
// is admitted.
func TestRTChannelsHostWide(t *testing.T) {
	parallel(t)
	e := newEnv(t)
	e.startDaemon()
	e.hostqos("link", "set", e.iface(), "--egress-rate", "10mbit")
	// 12,000 B every 20 ms within 100 ms: 4.8 Mbit/s each of 10 Mbit/s.
	open := []string{"rtchan", "open", "--link", e.iface(), "--message-bytes", "12000", "--period", "20ms", "--delay", "100ms"}

	first, out := e.start(hostqosBin(), append([]string{"--socket", e.d.Socket}, append(open, "--name", "first")...)...)
	var chans []api.RTChannel
	eventually(t, 5*time.Second, "the first channel is admitted", func() (bool, string) {
		e.hostqosJSON(&chans, "rtchan", "list")
		return len(chans) == 1, out.String()
	})
	c := chans[0]
	t.Logf("admitted: %+v", c)
	if c.PID != first.Process.Pid || c.UID != 0 || !strings.HasSuffix(c.Exe, "/hostqos") || c.Name != "first" ||
		c.Bound != 99*time.Millisecond || c.Response <= 0 || c.Response > c.Bound {
		t.Errorf("listed %+v; want pid %d, uid 0, exe hostqos, a response within the 99 ms local bound", c, first.Process.Pid)
	}

	refused, err := e.hostqosErr(append(open, "--name", "second", "--for", "1ms")...)
	t.Logf("second: %v\n%s", err, refused)
	if err == nil || !strings.Contains(refused, "refuse real-time channel on link "+e.iface()) || !strings.Contains(refused, "delay bound 99ms") {
		t.Errorf("second channel: %v, want refused naming the failing delay bound", err)
	}

	_ = syscall.Kill(first.Process.Pid, syscall.SIGKILL)
	_ = first.Wait()
	eventually(t, 5*time.Second, "the killed process's channel is released", func() (bool, string) {
		e.hostqosJSON(&chans, "rtchan", "list")
		return len(chans) == 0, ""
	})
	if out, err := e.hostqosErr(append(open, "--name", "second", "--for", "1ms")...); err != nil {
		t.Errorf("second channel after the first process ended: %v\n%s", err, out)
	}

	// The library: a UDPHost that asks the daemon (this test's process
	// owns the channel); its socket becomes a qsocket in class voice.
	var conn *net.UDPConn
	if err := e.client.Do(func() (err error) { conn, err = net.ListenUDP("udp4", nil); return err }); err != nil {
		t.Fatal(err)
	}
	h, err := rtchan.NewUDPHost(conn, rtchan.UDPParams(10_000_000), rtchan.DefaultPolicy())
	if err != nil {
		t.Fatal(err)
	}
	defer h.Shutdown()
	h.UseDaemon(e.d.Socket, e.iface())
	id, err := h.Create(serverV4.Addr().String()+":7501", rtchan.Spec{Name: "lib", Mmax: 1000, Imin: 10 * time.Millisecond, Bmax: 1, Delay: 50 * time.Millisecond})
	if err != nil {
		t.Fatalf("library channel: %v", err)
	}
	e.hostqosJSON(&chans, "rtchan", "list")
	qs, err := api.NewClient(e.d.Socket).QSockets().List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(chans) != 1 || chans[0].PID != os.Getpid() || chans[0].Name != "lib" || len(qs) != 1 || qs[0].Class != "voice" {
		t.Errorf("library channel: listed %+v, qsockets %+v; want one channel of pid %d and its socket in voice", chans, qs, os.Getpid())
	}
	// Its datagrams leave in the link's real-time leaf, whose rate is the
	// channel's wire rate (1,000 bytes and the headers every 10 ms), and
	// the link's budget names it.
	for i := 0; i < 5; i++ {
		if err := h.Send(id, make([]byte, 1000)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(12 * time.Millisecond)
	}
	wire := rtchan.UDPParams(10_000_000).WireRate(rtchan.Spec{Mmax: 1000, Imin: 10 * time.Millisecond})
	sent := regexp.MustCompile(`Sent ([1-9][0-9]*) bytes`)
	eventually(t, 3*time.Second, "the channel's datagrams in the real-time leaf", func() (bool, string) {
		out, _ := e.client.Command("tc", "-s", "class", "show", "dev", e.iface()).CombinedOutput()
		i := strings.Index(string(out), "class htb 4851:7100 ")
		if i < 0 {
			return false, string(out)
		}
		leaf := string(out[i:])
		if j := strings.Index(leaf[1:], "class htb"); j >= 0 {
			leaf = leaf[:j+1]
		}
		return strings.Contains(leaf, fmt.Sprintf("rate %dbit", wire)) && sent.MatchString(leaf), leaf
	})
	var links []api.LinkStatus
	e.hostqosJSON(&links, "link", "list")
	if len(links) != 1 || len(links[0].Guarantees) != 1 || links[0].Guarantees[0].Kind != "rtchannel" || int64(links[0].Reserved) != wire {
		t.Errorf("link budget %+v, want the channel's %d bit/s", links, wire)
	}
	// A daemon killed and started again keeps the live process's channel.
	e.killDaemon(syscall.SIGKILL)
	e.startDaemon()
	if e.hostqosJSON(&chans, "rtchan", "list"); len(chans) != 1 || chans[0].PID != os.Getpid() {
		t.Errorf("after a daemon restart: %+v, want the library's channel", chans)
	}
	if err := h.Close(id); err != nil {
		t.Error(err)
	}
	if e.hostqosJSON(&chans, "rtchan", "list"); len(chans) != 0 {
		t.Errorf("after Close: %+v", chans)
	}
}

// TestOneBudgetPerLink: every kind of guarantee counts against one budget
// per link. On a 20 Mbit/s link (16 Mbit/s reservable) a rule's 10 Mbit/s
// guarantee and a 4 Mbit/s guaranteed reservation leave no room for a
// real-time channel of 1200 bytes every 2 ms (refused, naming both); one
// every 8 ms fits; link list shows who holds the budget.
func TestOneBudgetPerLink(t *testing.T) {
	parallel(t)
	e := newEnv(t)
	e.startDaemon()
	e.hostqos("link", "set", e.iface(), "--egress-rate", "20mbit")
	e.hostqos("rule", "add", "web", "--proto", "tcp", "--rport", "443", "--minbw", "10mbit")
	e.hostqos("resv", "add", "media", "--proto", "udp", "--rport", "5004", "--service", "guaranteed", "--rate", "4mbit", "--burst", "16000")
	open := []string{"rtchan", "open", "--link", e.iface(), "--message-bytes", "1200", "--delay", "50ms", "--name", "telemetry", "--for", "1ms"}
	out, err := e.hostqosErr(append(open, "--period", "2ms")...)
	t.Logf("%v: %s", err, out)
	if err == nil || !strings.Contains(out, "rule web 10mbit") || !strings.Contains(out, "reservation media 4mbit") || !strings.Contains(out, "reservable capacity 16mbit") {
		t.Errorf("a 4.8 Mbit/s channel over the budget: %v, want refused naming the rule and the reservation", err)
	}
	first, fout := e.start(hostqosBin(), append([]string{"--socket", e.d.Socket}, "rtchan", "open", "--link", e.iface(), "--message-bytes", "1200", "--delay", "50ms", "--name", "telemetry", "--period", "8ms")...)
	defer func() { _ = syscall.Kill(first.Process.Pid, syscall.SIGKILL); _ = first.Wait() }()
	var links []api.LinkStatus
	eventually(t, 5*time.Second, "a 1.2 Mbit/s channel admitted, the budget shown", func() (bool, string) {
		e.hostqosJSON(&links, "link", "list")
		return len(links) == 1 && len(links[0].Guarantees) == 3, fmt.Sprintf("%+v\n%s", links, fout)
	})
	if r := links[0].Reserved; r < 15_200_000 || r > 16_000_000 {
		t.Errorf("reserved %v of %v, want 14 Mbit/s and the channel's wire rate", r, links[0].Reservable)
	}
	if table := e.hostqos("link", "list"); !strings.Contains(table, "reserved by: rule web 10mbit, reservation media 4mbit, rtchannel") {
		t.Errorf("link list does not say who holds the budget:\n%s", table)
	}
}
