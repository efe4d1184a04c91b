package testbed_test

import (
	"context"
	"math"
	"net/netip"
	"testing"
	"time"

	"github.com/hostqos/hostqos/internal/testbed"
	"github.com/hostqos/hostqos/internal/traffic"
)

// delayed is client — router — server with different delays per link and
// direction: client→server 10+5 ms, server→client 5+20 ms (40 ms RTT).
func delayedTopo(name string) testbed.Topology {
	t := threeNode(name, 0, false)
	t.Links[0].DelayAtoB, t.Links[0].DelayBtoA = 10*time.Millisecond, 20*time.Millisecond
	t.Links[1].DelayAtoB, t.Links[1].DelayBtoA = 5*time.Millisecond, 5*time.Millisecond
	return t
}

func TestPathDelay(t *testing.T) {
	tb := build(t, delayedTopo("hqtbdelay"))
	client, server := tb.Node("client"), tb.Node("server")
	for _, v6 := range []bool{false, true} {
		dst := server.AddrV4()
		if v6 {
			dst = server.AddrV6()
		}
		var e *traffic.Echo
		if err := server.Do(func() (err error) {
			e, err = traffic.ListenEcho(context.Background(), hp(dst, 0))
			return err
		}); err != nil {
			t.Fatal(err)
		}
		ctx, stop := context.WithCancel(context.Background())
		go func() { _, _ = e.Run(ctx, 10*time.Second) }()
		var r *traffic.VoiceResult
		err := client.Do(func() (err error) {
			r, err = traffic.RunVoice(context.Background(), traffic.VoiceConfig{To: e.Addr().String(), Calls: 1, PacketRate: 100,
				Duration: time.Second, DSCP: traffic.NoDSCP, Drain: time.Second})
			return err
		})
		stop()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("v6=%v: rtt min %.2f p50 %.2f p99 %.2f ms, forward min %.2f p50 %.2f ms, sent %d received %d",
			v6, r.RTT.Min, r.RTT.P50, r.RTT.P99, r.Forward.Min, r.Forward.P50, r.Sent, r.Received)
		if r.Received != r.Sent {
			t.Fatalf("v6=%v: sent %d received %d", v6, r.Sent, r.Received)
		}
		// The delay is a lower bound (a packet is never early); the
		// median sits just above it unless the machine stalls.
		if r.RTT.Min < 40 || r.Forward.Min < 15 || math.Abs(r.Forward.Min-15) > 5 || r.RTT.Min > 45 {
			t.Fatalf("v6=%v: rtt min %.2f ms (want 40), forward min %.2f ms (want 15)", v6, r.RTT.Min, r.Forward.Min)
		}
	}
	// UDP at 100 Mbit/s: nothing reordered, nothing lost to the line.
	addr, res := startSink(t, server, server.AddrV4(), traffic.SinkConfig{Duration: 10 * time.Second, Flows: 1})
	if err := client.Do(func() error {
		_, err := traffic.SendCBR(context.Background(), traffic.CBRConfig{To: addr.String(), Size: 1400, BitRate: 100e6, Duration: time.Second, DSCP: traffic.NoDSCP})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	r := <-res
	if len(r.Flows) != 1 {
		t.Fatalf("flows %+v", r.Flows)
	}
	t.Logf("udp: %.1f Mbit/s, loss %.2f%%, reordered %d, delay stats %+v", r.Flows[0].IPBitRate/1e6, r.Loss*100, r.Flows[0].Reordered, tb.DelayStats())
	if r.Flows[0].Reordered != 0 {
		t.Fatalf("delay line reordered %d packets", r.Flows[0].Reordered)
	}
	// TCP goodput over the 40 ms path (logged; a shared VM's speed is not
	// asserted).
	var sink *traffic.TCPSink
	if err := server.Do(func() (err error) {
		sink, err = traffic.ListenTCPSink(context.Background(), traffic.TCPSinkConfig{Listen: hp(server.AddrV4(), 0), Duration: 20 * time.Second, Streams: 1})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	done := make(chan *traffic.TCPSinkResult, 1)
	go func() { sr, _ := sink.Run(context.Background()); done <- sr }()
	if err := client.Do(func() error {
		_, err := traffic.SendBulk(context.Background(), traffic.BulkConfig{To: sink.Addr().String(), Duration: 4 * time.Second, DSCP: traffic.NoDSCP})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	sr := <-done
	if sr == nil || sr.Bytes == 0 {
		t.Fatalf("tcp: nothing received: %+v", sr)
	}
	t.Logf("tcp over 40 ms: %.1f Mbit/s, delay stats %+v", sr.GoodputBps/1e6, tb.DelayStats())
}

func TestPathDelayValidation(t *testing.T) {
	bad := threeNode("hqtbdelbad", 0, false)
	bad.Links[0].DelayAtoB = -time.Millisecond
	if _, err := testbed.Build(bad); err == nil {
		t.Fatal("negative delay accepted")
	}
	noRouter := testbed.Topology{Name: "hqtbdelnr", Nodes: []testbed.NodeSpec{{Name: "a"}, {Name: "b"}},
		Links: []testbed.LinkSpec{{A: "a", B: "b", AAddrs: []netip.Prefix{mp("198.18.1.1/24")}, BAddrs: []netip.Prefix{mp("198.18.1.2/24")}, DelayAtoB: time.Millisecond}}}
	if _, err := testbed.Build(noRouter); err == nil {
		t.Fatal("delay on a link without a router accepted")
	}
}
