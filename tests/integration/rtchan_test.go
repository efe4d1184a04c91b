package integration

import (
	"context"
	"net"
	"os"
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
