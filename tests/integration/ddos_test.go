package integration

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/testbed"
	"github.com/hostqos/hostqos/internal/traffic"
)

// Extra source addresses of the server host for the shield tests: a
// legitimate peer, and a quarantined one (the server's own address is the
// flooding source).
var (
	legitV4      = netip.MustParseAddr("198.18.0.3")
	quarantineV4 = netip.MustParseAddr("198.18.0.4")
)

func (e *env) addServerAddrs(t *testing.T, addrs ...netip.Addr) {
	t.Helper()
	h := e.server.Handle()
	lk, err := h.LinkByName(e.server.Iface("client"))
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if err := h.AddrAdd(lk, &netlink.Addr{IPNet: &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(24, 32)}}); err != nil {
			t.Fatalf("add %v to the server: %v", a, err)
		}
	}
}

// upload sends bulk TCP from the client (the managed host) to the
// legitimate peer for dur and returns the goodput at the peer.
func (e *env) upload(t *testing.T, dur time.Duration) float64 {
	t.Helper()
	var sink *traffic.TCPSink
	if err := e.server.Do(func() (err error) {
		sink, err = traffic.ListenTCPSink(context.Background(), traffic.TCPSinkConfig{Listen: netip.AddrPortFrom(legitV4, 0).String(), Duration: dur + 10*time.Second, Streams: 1})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	done := make(chan *traffic.TCPSinkResult, 1)
	go func() { r, _ := sink.Run(context.Background()); done <- r }()
	if err := e.client.Do(func() error {
		_, err := traffic.SendBulk(context.Background(), traffic.BulkConfig{To: sink.Addr().String(), Duration: dur, DSCP: traffic.NoDSCP})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	r := waitResult(t, done, 20*time.Second)
	if r == nil {
		t.Fatal("upload: no sink result")
	}
	return r.GoodputBps
}

// blocks reads the drop list through the CLI.
func (e *env) blocks(t *testing.T) map[string]api.BlockInfo {
	t.Helper()
	var bs []api.BlockInfo
	e.hostqosJSON(&bs, "block", "list", "-o", "json")
	out := map[string]api.BlockInfo{}
	for _, b := range bs {
		out[b.Prefix.String()] = b
	}
	return out
}

// TestDropListAtXDP: a UDP flood from a listed source is dropped at XDP
// (counted on its entry, nothing reaches a socket) while an unlisted
// peer's TCP transfer keeps ≥ 95 % of its rate; a quarantined source
// (--maxbw-in 1mbit) gets 1 Mbit/s through; `hostqos down` removes the
// XDP program and the drop list.
func TestDropListAtXDP(t *testing.T) {
	e := newEnv(t)
	e.startDaemon()
	e.addServerAddrs(t, legitV4, quarantineV4)
	// The upload is shaped by hostqos at 200 Mbit/s, so its rate does not
	// depend on how much CPU the flood generator leaves.
	e.hostqos("link", "set", e.iface(), "--egress-rate", "200mbit")
	flooder := serverV4.Addr()
	e.hostqos("block", "add", flooder.String()+"/32")
	e.hostqos("block", "add", quarantineV4.String()+"/32", "--maxbw-in", "1mbit", "--ttl", "1h")
	// Bad input is refused and changes nothing.
	if out, err := e.hostqosErr("block", "add", "198.18.0.9/16"); err == nil {
		t.Fatalf("unmasked prefix accepted: %s", out)
	}
	if out, err := e.hostqosErr("block", "add", "198.18.0.0/16", "--maxbw-in", "10bit"); err == nil {
		t.Fatalf("10 bit/s quarantine accepted: %s", out)
	}
	if bs := e.blocks(t); len(bs) != 2 {
		t.Fatalf("drop list %+v", bs)
	}

	measured(t, "TCP rate under a listed flood", func(n int) (bool, string) {
		base := e.upload(t, 2*time.Second)
		before := e.blocks(t)[flooder.String()+"/32"]
		lostBefore := vethDrops(t, e)
		sink, endSink := e.clientUDPSink(t, netip.AddrPortFrom(clientV4.Addr(), uint16(9100+n)).String(), 12*time.Second)
		floodDone := make(chan *traffic.SendResult, 1)
		go func() {
			var s *traffic.SendResult
			_ = e.server.Do(func() (err error) {
				s, err = traffic.SendCBR(context.Background(), traffic.CBRConfig{To: netip.AddrPortFrom(clientV4.Addr(), uint16(9100+n)).String(),
					From: netip.AddrPortFrom(flooder, 0).String(), Size: traffic.HeaderSize, PacketRate: 400_000, Duration: 3 * time.Second, DSCP: traffic.NoDSCP})
				return err
			})
			floodDone <- s
		}()
		time.Sleep(300 * time.Millisecond)
		under := e.upload(t, 2*time.Second)
		fs := waitResult(t, floodDone, 15*time.Second)
		endSink()
		got := waitResult(t, sink, 20*time.Second)
		after := e.blocks(t)[flooder.String()+"/32"]
		if fs == nil || got == nil {
			return false, "flood or sink failed"
		}
		counted := after.Packets - before.Packets
		// What the veth pair dropped before XDP saw it (its ring full
		// under the flood) never reached the host: sent = counted + lost.
		lost := vethDrops(t, e) - lostBefore
		msg := fmt.Sprintf("upload %.1f Mbit/s alone, %.1f under a flood of %d packets (%.0f pkt/s); entry counted %d, dropped %d; %d lost by the veth before XDP; %d reached the socket",
			base/1e6, under/1e6, fs.Packets, float64(fs.Packets)/fs.DurationS, counted, after.Dropped-before.Dropped, lost, got.Packets)
		t.Log(msg)
		if got.Packets != 0 || counted+lost < fs.Packets || after.Dropped-before.Dropped != counted {
			t.Fatalf("flood not dropped at XDP: %s", msg)
		}
		return under >= 0.95*base, msg
	})

	measured(t, "quarantined source at 1 Mbit/s", func(n int) (bool, string) {
		const payload = 1000
		to := netip.AddrPortFrom(clientV4.Addr(), uint16(9200+n)).String()
		sink, endSink := e.clientUDPSink(t, to, 12*time.Second)
		var s *traffic.SendResult
		if err := e.server.Do(func() (err error) {
			s, err = traffic.SendCBR(context.Background(), traffic.CBRConfig{To: to, From: netip.AddrPortFrom(quarantineV4, 0).String(),
				Size: payload, BitRate: 5_000_000, Duration: 3 * time.Second, DSCP: traffic.NoDSCP})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		endSink()
		r := waitResult(t, sink, 20*time.Second)
		// The bucket counts whole frames (payload, UDP, IP, Ethernet) and
		// lets a burst of 20 ms (at least 3028 bytes) through first.
		frame := float64(payload + 8 + 20 + 14)
		rate := (float64(r.Packets)*frame*8 - 3028*8) / s.DurationS
		msg := fmt.Sprintf("offered %.2f Mbit/s, %d of %d packets passed: %.3f Mbit/s in frames", s.IPBitRate/1e6, r.Packets, s.Packets, rate/1e6)
		t.Log(msg)
		return rate >= 0.95e6 && rate <= 1.05e6, msg
	})

	// A dead daemon (kill -9) leaves the drop list enforcing; a restarted
	// one adopts it, counters continuing.
	before := e.blocks(t)[flooder.String()+"/32"]
	e.killDaemon(syscall.SIGKILL)
	to := netip.AddrPortFrom(clientV4.Addr(), 9300).String()
	sink, endSink := e.clientUDPSink(t, to, 5*time.Second)
	var fs *traffic.SendResult
	if err := e.server.Do(func() (err error) {
		fs, err = traffic.SendCBR(context.Background(), traffic.CBRConfig{To: to, From: netip.AddrPortFrom(flooder, 0).String(),
			Size: traffic.HeaderSize, PacketRate: 20_000, Duration: time.Second, DSCP: traffic.NoDSCP})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	endSink()
	if r := waitResult(t, sink, 10*time.Second); r.Packets != 0 {
		t.Fatalf("with the daemon dead, %d of %d flood packets reached the socket", r.Packets, fs.Packets)
	}
	e.startDaemon()
	after := e.blocks(t)[flooder.String()+"/32"]
	if after.Dropped < before.Dropped+fs.Packets {
		t.Fatalf("entry dropped %d before the kill, %d after the restart; the %d packets sent meanwhile are missing", before.Dropped, after.Dropped, fs.Packets)
	}
	t.Logf("daemon killed: %d flood packets dropped meanwhile; counters continued (%d → %d)", fs.Packets, before.Dropped, after.Dropped)

	// The XDP program is on the link; hostqos down removes it and the
	// drop list with it.
	linkOut, _ := e.client.Command("ip", "-d", "link", "show", "dev", e.iface()).CombinedOutput()
	if !contains(string(linkOut), "xdp") {
		t.Fatalf("no XDP program on the managed link:\n%s", linkOut)
	}
	e.hostqos("down")
	linkOut, _ = e.client.Command("ip", "-d", "link", "show", "dev", e.iface()).CombinedOutput()
	if contains(string(linkOut), "prog/xdp") {
		t.Fatalf("XDP program left after hostqos down:\n%s", linkOut)
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

// clientUDPSink is a UDP sink in the client (the managed host). It runs
// for at most dur; end, called once the senders are done, ends it after
// what they sent has had time to arrive (sinkDrain).
func (e *env) clientUDPSink(t *testing.T, addr string, dur time.Duration) (_ <-chan *traffic.SinkResult, end func()) {
	t.Helper()
	var s *traffic.Sink
	if err := e.client.Do(func() (err error) {
		s, err = traffic.ListenSink(context.Background(), traffic.SinkConfig{Listen: addr, Duration: dur})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	out := make(chan *traffic.SinkResult, 1)
	go func() {
		r, _ := s.Run(ctx)
		out <- r
	}()
	return out, func() { time.AfterFunc(sinkDrain, cancel) }
}

// TestSYNThrottle: a SYN flood at the generator's full rate from one
// (spoofed) source against a listening port of the managed host; an
// unlisted client opens connections meanwhile. With per-source and link
// SYN limits it completes ≥ 99 % of them; without, the figure is reported.
func TestSYNThrottle(t *testing.T) {
	e := newEnv(t)
	e.startDaemon()
	e.addServerAddrs(t, legitV4)
	e.hostqos("link", "set", e.iface())
	const port = 8080
	var ln net.Listener
	if err := e.client.Do(func() (err error) {
		ln, err = net.Listen("tcp", netip.AddrPortFrom(clientV4.Addr(), port).String())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	spoofed := netip.MustParseAddr("198.18.0.66") // no host has it: SYN-ACKs go nowhere
	round := func(label string) (done, total int) {
		flood := make(chan *traffic.SYNFloodResult, 1)
		go func() {
			var r *traffic.SYNFloodResult
			err := e.server.Do(func() (err error) {
				r, err = traffic.SendSYNFlood(context.Background(), traffic.SYNFloodConfig{To: netip.AddrPortFrom(clientV4.Addr(), port), From: spoofed, Duration: 4 * time.Second})
				return err
			})
			if err != nil {
				t.Error(err)
			}
			flood <- r
		}()
		time.Sleep(500 * time.Millisecond)
		total = 100
		_ = e.server.Do(func() error {
			d := net.Dialer{LocalAddr: &net.TCPAddr{IP: legitV4.AsSlice()}, Timeout: 3 * time.Second}
			for i := 0; i < total; i++ {
				c, err := d.Dial("tcp", netip.AddrPortFrom(clientV4.Addr(), port).String())
				if err == nil {
					done++
					c.Close()
				}
				time.Sleep(20 * time.Millisecond)
			}
			return nil
		})
		r := waitResult(t, flood, 20*time.Second)
		if r != nil {
			t.Logf("%s: SYN flood of %d SYNs at %.0f/s; the unlisted client completed %d of %d connections", label, r.Sent, r.Rate, done, total)
		}
		return done, total
	}
	round("without SYN throttling")
	e.hostqos("link", "set", e.iface(), "--syn-rate", "2000/s", "--syn-rate-per-source", "100/s")
	measured(t, "connections completed under a SYN flood with throttling", func(n int) (bool, string) {
		done, total := round("with --syn-rate 2000/s --syn-rate-per-source 100/s")
		return float64(done) >= 0.99*float64(total), fmt.Sprintf("%d of %d completed", done, total)
	})
	var ls []api.LinkStatus
	e.hostqosJSON(&ls, "link", "list", "-o", "json")
	if len(ls) != 1 || !ls[0].XDP || ls[0].SynDropped == 0 || ls[0].SynSeen <= ls[0].SynDropped {
		t.Fatalf("link status %+v: want the XDP shield on, SYNs seen and dropped", ls)
	}
	t.Logf("link %s: %d pure SYNs seen, %d dropped", ls[0].Name, ls[0].SynSeen, ls[0].SynDropped)
}

// vethDrops is the packets the test's veth pair dropped on the way (the
// server end's tx_dropped and its root qdisc's drops, plus the client
// end's rx_dropped), read through each namespace's netlink handle.
func vethDrops(t *testing.T, e *env) uint64 {
	t.Helper()
	var n uint64
	for _, end := range []struct {
		node *testbed.Node
		tx   bool
	}{{e.server, true}, {e.client, false}} {
		for _, name := range end.node.Ifaces() {
			l, err := end.node.Handle().LinkByName(name)
			if err != nil {
				t.Fatalf("read %s: %v", name, err)
			}
			st := l.Attrs().Statistics
			if st == nil {
				continue
			}
			if end.tx {
				n += st.TxDropped
				// And what a qdisc on the sending end dropped.
				qs, err := end.node.Handle().QdiscList(l)
				if err != nil {
					t.Fatalf("read the qdiscs of %s: %v", name, err)
				}
				for _, q := range qs {
					if qst := q.Attrs().Statistics; qst != nil && qst.Queue != nil && q.Attrs().Parent == netlink.HANDLE_ROOT {
						n += uint64(qst.Queue.Drops)
					}
				}
			} else {
				n += st.RxDropped
			}
		}
	}
	return n
}
