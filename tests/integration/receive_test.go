package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hostqos/hostqos/internal/datapath"
	"github.com/hostqos/hostqos/internal/lab"
	"github.com/hostqos/hostqos/internal/testbed"
	"github.com/hostqos/hostqos/internal/testutil"
	"github.com/hostqos/hostqos/internal/testutil/daemontest"
	"github.com/hostqos/hostqos/internal/traffic"
)

// The receive side end to end: downloads from a server 40 ms away (the
// testbed's delay line) into apps on the host hostqosd manages.

// newPathEnv is newEnv over a 40 ms wide-area path: the daemon runs on the
// path's client, the server is the far end.
func newPathEnv(t *testing.T) (*env, *testutil.Path) {
	t.Helper()
	return newPathEnvRTT(t, 40*time.Millisecond)
}

// newPathEnvRTT is newPathEnv over a path of that round-trip time.
func newPathEnvRTT(t *testing.T, rtt time.Duration) (*env, *testutil.Path) {
	t.Helper()
	p := testutil.NewPath(t, rtt)
	e := &env{t: t, client: p.Client.Node, server: p.Server.Node}
	e.d = daemontest.New(t, e.client, binDir)
	e.dir, e.cli = e.d.Dir, e.d.Client
	return e, p
}

// downloaderEnv selects the test binary's downloader mode (downloaderMain):
// an app that connects to a bulk server and reads.
const downloaderEnv = "HQ_IT_DOWNLOAD"

// rcvbufEnv, when set, fixes the downloader's socket receive buffer
// (SO_RCVBUF, bytes): its window, so what it keeps in flight, is bounded.
const rcvbufEnv = "HQ_IT_RCVBUF"

// dlReport is what downloaderMain prints: goodput (TCP payload the app
// read, bits/s) per stream and in total, over the run after its warm-up.
type dlReport struct {
	Streams []float64 `json:"streams_bps"`
	Total   float64   `json:"total_bps"`
	Bytes   uint64    `json:"bytes"`
}

// downloaderMain connects HQ_IT_STREAMS streams to HQ_IT_DOWNLOAD, reads
// for HQ_IT_DURATION and prints a dlReport of the time after HQ_IT_WARMUP
// (the sender's slow start is not the limit's business).
func downloaderMain() int {
	to := os.Getenv(downloaderEnv)
	streams, _ := strconv.Atoi(os.Getenv("HQ_IT_STREAMS"))
	dur, _ := time.ParseDuration(os.Getenv("HQ_IT_DURATION"))
	warm, _ := time.ParseDuration(os.Getenv("HQ_IT_WARMUP"))
	counts := make([]atomic.Uint64, streams)
	var conns []net.Conn
	d := net.Dialer{Timeout: 5 * time.Second}
	if rb, _ := strconv.Atoi(os.Getenv(rcvbufEnv)); rb > 0 {
		// Before connect, so the window scale fits the buffer.
		d.Control = func(_, _ string, c syscall.RawConn) error {
			var serr error
			if err := c.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, rb) }); err != nil {
				return err
			}
			return serr
		}
	}
	for range streams {
		c, err := d.Dial("tcp", to)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		conns = append(conns, c)
	}
	for i, c := range conns {
		go func() {
			buf := make([]byte, 256<<10)
			for {
				n, err := c.Read(buf)
				counts[i].Add(uint64(n))
				if err != nil {
					return
				}
			}
		}()
	}
	time.Sleep(warm)
	start := time.Now()
	base := make([]uint64, streams)
	for i := range counts {
		base[i] = counts[i].Load()
	}
	time.Sleep(dur - warm)
	el := time.Since(start).Seconds()
	var r dlReport
	for i := range counts {
		b := counts[i].Load() - base[i]
		r.Bytes += b
		r.Streams = append(r.Streams, float64(b)*8/el)
		r.Total += float64(b) * 8 / el
	}
	for _, c := range conns {
		c.Close()
	}
	out, _ := json.Marshal(r)
	fmt.Println(string(out))
	return 0
}

// appCopy copies the test binary to a new executable that exe rules can
// name; run with downloaderEnv set it is a downloading app.
func appCopy(e *env, name string) string {
	e.t.Helper()
	self, err := os.Executable()
	if err != nil {
		e.t.Fatal(err)
	}
	dst := filepath.Join(e.dir, name)
	if err := lab.CopyExecutable(self, dst); err != nil {
		e.t.Fatal(err)
	}
	return dst
}

// download is one measured TCP download into an app.
type download struct {
	dlReport
	retrans uint64 // segments the server retransmitted (its TCP_INFO)
	segs    uint64 // data segments the server sent
}

// bulkServerOn listens on node at addr and writes to every connection as
// fast as TCP allows until the peer goes away; done stops it and reports
// the senders' own TCP_INFO counts, summed.
func bulkServerOn(e *env, node *testbed.Node, at netip.Addr) (addr string, done func() (retrans, segs uint64)) {
	t := e.t
	t.Helper()
	var ln net.Listener
	if err := node.Do(func() (err error) {
		ln, err = net.Listen("tcp", netip.AddrPortFrom(at, 0).String())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	var (
		mu       sync.Mutex
		rtx, seg uint64
		wg       sync.WaitGroup
	)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				buf := make([]byte, 64<<10)
				_ = c.SetWriteDeadline(time.Now().Add(30 * time.Second))
				for {
					if _, err := c.Write(buf); err != nil {
						break
					}
				}
				rc, err := c.(*net.TCPConn).SyscallConn()
				if err != nil {
					return
				}
				_ = rc.Control(func(fd uintptr) {
					if ti, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO); err == nil {
						mu.Lock()
						rtx += uint64(ti.Total_retrans)
						seg += uint64(ti.Data_segs_out)
						mu.Unlock()
					}
				})
			}()
		}
	}()
	return ln.Addr().String(), func() (uint64, uint64) {
		ln.Close()
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		return rtx, seg
	}
}

// startDownload runs app (an appCopy) on the client: it opens streams TCP
// connections to a bulk server on the far end and reads for dur (goodput
// after 1 s of warm-up). wait returns the result. env adds to the app's
// environment (e.g. rcvbufEnv).
func startDownload(e *env, p *testutil.Path, app string, streams int, dur time.Duration, env ...string) (wait func() download) {
	e.t.Helper()
	return startDownloadFrom(e, e.server, p.ServerV4, app, streams, dur, env...)
}

// startDownloadFrom is startDownload from a bulk server on node at addr.
func startDownloadFrom(e *env, node *testbed.Node, at netip.Addr, app string, streams int, dur time.Duration, env ...string) (wait func() download) {
	t := e.t
	t.Helper()
	addr, done := bulkServerOn(e, node, at)
	cmd := e.client.Command(app)
	cmd.Env = append(os.Environ(), downloaderEnv+"="+addr, "HQ_IT_STREAMS="+strconv.Itoa(streams),
		"HQ_IT_DURATION="+dur.String(), "HQ_IT_WARMUP=1s")
	cmd.Env = append(cmd.Env, env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", app, err)
	}
	return func() download {
		t.Helper()
		if err := cmd.Wait(); err != nil {
			t.Fatalf("downloader: %v\n%s", err, errb.String())
		}
		var d download
		if err := json.Unmarshal(out.Bytes(), &d.dlReport); err != nil {
			t.Fatalf("downloader output: %v\n%s", err, out.String())
		}
		d.retrans, d.segs = done()
		return d
	}
}

// pingDuring measures the round trip of a 50 pkt/s UDP echo from the client
// to the server for dur (in the background; wait returns it).
func pingDuring(e *env, p *testutil.Path, dur time.Duration) (wait func() *traffic.VoiceResult) {
	t := e.t
	t.Helper()
	var echo *traffic.Echo
	if err := e.server.Do(func() (err error) {
		echo, err = traffic.ListenEcho(context.Background(), netip.AddrPortFrom(p.ServerV4, 0).String())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	go func() { _, _ = echo.Run(ctx, dur+5*time.Second) }()
	res := make(chan *traffic.VoiceResult, 1)
	go func() {
		var r *traffic.VoiceResult
		err := e.client.Do(func() (err error) {
			r, err = traffic.RunVoice(context.Background(), traffic.VoiceConfig{To: echo.Addr().String(), Calls: 1, PacketRate: 50,
				Duration: dur, DSCP: traffic.NoDSCP, Drain: time.Second})
			return err
		})
		if err != nil {
			t.Errorf("ping: %v", err)
		}
		res <- r
	}()
	return func() *traffic.VoiceResult {
		r := <-res
		stop()
		if r == nil {
			t.FailNow()
		}
		return r
	}
}

// TestDownloadLimitTCP: an app's download limited with --maxbw-in over a 40
// ms path, at 2, 20 and 200 Mbit/s (set live with rule set on one rule):
// goodput at the app (TCP payload) within 0.95–1.01 of the limit, the
// sender retransmits < 1 % of its segments (the sender is slowed by the
// window, not by drops) and a concurrent ping's median round trip stays
// within 5 ms of the idle path's (no queue). Then two apps with different
// limits at once, one rule's limit shared by 4 parallel flows, and a
// download over the bare veth from the router (0 ms: held by paced ACKs).
func TestDownloadLimitTCP(t *testing.T) {
	e, p := newPathEnv(t)
	e.startDaemon()
	e.hostqos("link", "set", p.IfClient)
	dl := appCopy(e, "dlapp")
	e.hostqos("rule", "add", "dl", "--exe", dl, "--maxbw-in", "2mbit")

	idle := pingDuring(e, p, time.Second)()
	t.Logf("idle path: ping p50 %.2f ms p99 %.2f ms", idle.RTT.P50, idle.RTT.P99)
	const dur = 3 * time.Second // 1 s of warm-up, 2 s measured
	for i, rate := range []float64{2e6, 20e6, 200e6} {
		if i > 0 {
			e.hostqos("rule", "set", "dl", "--maxbw-in", fmt.Sprintf("%gmbit", rate/1e6))
		}
		measured(t, fmt.Sprintf("download at %g Mbit/s", rate/1e6), func(n int) (bool, string) {
			ping := pingDuring(e, p, dur-time.Second)
			d := startDownload(e, p, dl, 1, dur)()
			pr := ping()
			ratio := d.Total / rate
			rtx := float64(d.retrans) / float64(max(d.segs, 1))
			msg := fmt.Sprintf("goodput %.3f Mbit/s = %.3f of the limit (want 0.95–1.01), server retransmitted %d of %d segments (%.2f%%, want < 1%%), ping p50 %.2f ms p99 %.2f ms (idle p50 %.2f, want ≤ +5 ms)",
				d.Total/1e6, ratio, d.retrans, d.segs, 100*rtx, pr.RTT.P50, pr.RTT.P99, idle.RTT.P50)
			t.Log(msg)
			return ratio >= 0.95 && ratio <= 1.01 && rtx < 0.01 && pr.RTT.P50 <= idle.RTT.P50+5, msg
		})
	}

	// Two apps with their own limits, downloading at once.
	e.hostqos("rule", "set", "dl", "--maxbw-in", "10mbit")
	other := appCopy(e, "dlother")
	e.hostqos("rule", "add", "dl2", "--exe", other, "--maxbw-in", "30mbit")
	measured(t, "two apps, two limits", func(n int) (bool, string) {
		a := startDownload(e, p, dl, 1, dur)
		b := startDownload(e, p, other, 1, dur)
		ra, rb := a().Total/10e6, b().Total/30e6
		msg := fmt.Sprintf("app 1: %.3f of 10 Mbit/s, app 2: %.3f of 30 Mbit/s (want 0.95–1.01 each)", ra, rb)
		t.Log(msg)
		return ra >= 0.95 && ra <= 1.01 && rb >= 0.95 && rb <= 1.01, msg
	})

	// One limit shared fairly by 4 flows.
	e.hostqos("rule", "set", "dl", "--maxbw-in", "20mbit")
	measured(t, "4 flows on one limit", func(n int) (bool, string) {
		d := startDownload(e, p, dl, 4, dur)()
		ratio := d.Total / 20e6
		ok := ratio >= 0.95 && ratio <= 1.01 && len(d.Streams) == 4
		var each []string
		for _, s := range d.Streams {
			share := s / (d.Total / 4)
			each = append(each, fmt.Sprintf("%.2f", share))
			ok = ok && share >= 0.7 && share <= 1.3
		}
		msg := fmt.Sprintf("aggregate %.3f of 20 Mbit/s (want 0.95–1.01); each flow's share of a fair quarter: %s (want 0.7–1.3); retransmitted %d of %d",
			ratio, strings.Join(each, " "), d.retrans, d.segs)
		t.Log(msg)
		return ok, msg
	})
	// A LAN: from the router, over the bare veth (no delay line, a round
	// trip of tens of µs), where two segments per round trip are hundreds
	// of Mbit/s: the window cannot hold the limit, the paced ACKs do.
	e.hostqos("rule", "set", "dl", "--maxbw-in", "10mbit")
	measured(t, "download at 10 Mbit/s over a 0 ms path", func(n int) (bool, string) {
		d := startDownloadFrom(e, p.Router.Node, testutil.PathRouterC.Addr(), dl, 1, dur)()
		ratio := d.Total / 10e6
		rtx := float64(d.retrans) / float64(max(d.segs, 1))
		msg := fmt.Sprintf("goodput %.3f Mbit/s = %.3f of the limit (want 0.95–1.01), sender retransmitted %d of %d segments (%.2f%%, want < 1%%)",
			d.Total/1e6, ratio, d.retrans, d.segs, 100*rtx)
		t.Log(msg)
		return ratio >= 0.95 && ratio <= 1.01 && rtx < 0.01, msg
	})
	in := e.ruleStat("dl").In
	if in.Bytes == 0 || in.Packets == 0 || in.Drops != 0 {
		t.Errorf("rule dl received side %+v: want bytes and packets counted, no drops (TCP is never dropped)", in)
	}
}

// TestDownloadLimitUDP: UDP arriving at 4× an app's --maxbw-in reaches the
// app at the limit (0.97–1.01, payload bytes), the excess is dropped on
// arrival and counted: the rule's IN drops equal what the app did not get.
// Then the daemon is killed with SIGKILL: the pinned limit keeps holding
// TCP; `hostqos down` leaves no ingress program.
func TestDownloadLimitUDP(t *testing.T) {
	e, p := newPathEnv(t)
	e.startDaemon()
	e.hostqos("link", "set", p.IfClient)
	app := e.app("udpapp")
	e.hostqos("rule", "add", "udp", "--exe", app, "--proto", "udp", "--maxbw-in", "5mbit")
	const (
		rate    = 5e6
		payload = 1000
		finMax  = 3 // end markers the sender adds, which the limit may drop too
	)
	measured(t, "UDP at 4x the limit", func(n int) (bool, string) {
		listen := netip.AddrPortFrom(p.ClientV4, uint16(6000+n)).String()
		cmd, out := e.start(app, "tool", "udp-sink", "--listen", listen, "--duration", "8s", "--flows", "1", "-o", "json")
		eventually(t, 5*time.Second, "udp-sink listening", func() (bool, string) {
			return strings.Contains(out.String(), "listening on"), out.String()
		})
		before := e.ruleStat("udp").In
		var s *traffic.SendResult
		if err := e.server.Do(func() (err error) {
			s, err = traffic.SendCBR(context.Background(), traffic.CBRConfig{To: listen, Size: payload, BitRate: 4 * rate, Duration: 3 * time.Second, DSCP: traffic.NoDSCP})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if err := cmd.Wait(); err != nil {
			t.Fatalf("udp-sink: %v\n%s", err, out)
		}
		var r traffic.SinkResult
		decodeLast(t, out.String(), &r)
		after := e.ruleStat("udp").In
		ratio := float64(r.Packets) * payload * 8 / s.DurationS / rate
		drops := after.Drops - before.Drops
		cut := s.Packets - r.Packets
		msg := fmt.Sprintf("sent %d in %.2f s, app received %d: %.3f of 5 Mbit/s in payload (want 0.97–1.01); IN drops %d, sent − received %d (+ up to %d end markers)",
			s.Packets, s.DurationS, r.Packets, ratio, drops, cut, finMax)
		t.Log(msg)
		return ratio >= 0.97 && ratio <= 1.01 && drops >= cut && drops <= cut+finMax, msg
	})

	// kill -9: the limit is pinned and keeps holding.
	dl := appCopy(e, "dlapp")
	e.hostqos("rule", "add", "dl", "--exe", dl, "--maxbw-in", "10mbit")
	e.killDaemon(syscall.SIGKILL)
	measured(t, "download limit after kill -9", func(n int) (bool, string) {
		d := startDownload(e, p, dl, 1, 3*time.Second)()
		ratio := d.Total / 10e6
		msg := fmt.Sprintf("with the daemon dead: %.3f of 10 Mbit/s (want 0.95–1.01)", ratio)
		t.Log(msg)
		return ratio >= 0.95 && ratio <= 1.01, msg
	})
	if !hasIngress(t, e, p.IfClient) {
		t.Fatal("no ingress program before down")
	}
	// The daemon is dead: down cleans up itself, in the pin directory given.
	e.hostqos("down", "--bpffs-dir", e.d.BPFFS)
	if hasIngress(t, e, p.IfClient) {
		t.Error("hostqos down left its ingress program attached")
	}
}

// hasIngress reports whether a hostqos ingress classifier is on ifc.
func hasIngress(t *testing.T, e *env, ifc string) bool {
	t.Helper()
	var names []string
	err := e.client.Do(func() error {
		ifi, err := net.InterfaceByName(ifc)
		if err != nil {
			return err
		}
		names, err = datapath.IngressPrograms(ifi.Index)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if strings.HasPrefix(n, "hq_tc_ingress") {
			return true
		}
	}
	return false
}
