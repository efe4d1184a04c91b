package testbed_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hostqos/hostqos/internal/testbed"
	"github.com/hostqos/hostqos/internal/testutil"
	"github.com/hostqos/hostqos/internal/traffic"
)

// steppingTopo is client — router — server with 20 ms each way on the
// router–server link (a 40 ms round trip) and a 30 Mbit/s bottleneck with
// a 1000-packet FIFO on the router's egress toward the server.
func steppingTopo(name string) testbed.Topology {
	t := threeNode(name, 30_000_000, false)
	t.Links[1].DelayAtoB, t.Links[1].DelayBtoA = 20*time.Millisecond, 20*time.Millisecond
	t.Links[1].QueueAtoB = 1000
	return t
}

// A bottleneck's rate changes in place while it carries traffic, and the
// traffic then arrives at the new rate.
func TestSteppingBottleneck(t *testing.T) {
	tb := build(t, steppingTopo("hqtbstep"))
	client, server := tb.Node("client"), tb.Node("server")
	q := tcShow(t, tb.Node("router"), "qdisc")
	if !strings.Contains(q, "limit 1000p") {
		t.Errorf("bottleneck FIFO is not 1000 packets:\n%s", q)
	}
	for _, rate := range []uint64{8_000_000, 20_000_000} {
		if err := tb.SetRate("router", "server", rate); err != nil {
			t.Fatal(err)
		}
		testutil.Measured(t, fmt.Sprintf("rate after the step to %d Mbit/s", rate/1e6), 3, func(int) (bool, string) {
			addr, res := startSink(t, server, server.AddrV4(), traffic.SinkConfig{Duration: 15 * time.Second, Flows: 1})
			if err := client.Do(func() error {
				_, err := traffic.SendCBR(context.Background(), traffic.CBRConfig{To: addr.String(), Size: 1400, BitRate: rate * 3 / 2, Duration: 2 * time.Second, DSCP: traffic.NoDSCP})
				return err
			}); err != nil {
				t.Fatal(err)
			}
			r := <-res
			if len(r.Flows) != 1 {
				t.Fatalf("flows %+v", r.Flows)
			}
			wire := r.Flows[0].IPBitRate * float64(1400+28+14) / float64(1400+28)
			msg := fmt.Sprintf("received %.2f Mbit/s on the wire at a %d Mbit/s bottleneck, min one-way %.1f ms", wire/1e6, rate/1e6, r.Latency.Min)
			t.Log(msg)
			return wire >= 0.9*float64(rate) && wire <= 1.1*float64(rate), msg
		})
	}

	var seen []uint64
	steps := []testbed.RateStep{{Rate: 30_000_000, For: 50 * time.Millisecond}, {Rate: 8_000_000, For: 50 * time.Millisecond}}
	if err := tb.RunSteps(context.Background(), "router", "server", steps, func(_ int, s testbed.RateStep) { seen = append(seen, s.Rate) }); err != nil {
		t.Fatal(err)
	}
	if len(seen) != 2 || seen[1] != 8_000_000 {
		t.Errorf("steps seen %v", seen)
	}
	r := tb.Node("router")
	if c := tcShow(t, r, "class", "dev", r.Iface("server")); !strings.Contains(c, "rate 8Mbit") {
		t.Errorf("after the steps the bottleneck is not at 8 Mbit/s:\n%s", c)
	}
	for _, bad := range [][2]string{{"server", "router"}, {"client", "server"}, {"router", "nobody"}} {
		if err := tb.SetRate(bad[0], bad[1], 1e6); err == nil {
			t.Errorf("SetRate %s→%s: no error", bad[0], bad[1])
		}
	}
}

func TestQueueValidation(t *testing.T) {
	topo := threeNode("hqtbqv", 0, false)
	topo.Links[1].QueueAtoB = 1000
	if _, err := testbed.Build(topo); err == nil || !strings.Contains(err.Error(), "needs the direction's rate") {
		t.Errorf("queue without a rate: %v", err)
	}
}

// tcShow is `tc OBJ show ARGS` in n's namespace.
func tcShow(t *testing.T, n *testbed.Node, obj string, args ...string) string {
	t.Helper()
	out, err := n.Command("tc", append([]string{obj, "show"}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("tc %s show in %s: %v: %s", obj, n.Name, err, out)
	}
	return string(out)
}
