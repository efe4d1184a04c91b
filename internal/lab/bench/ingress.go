package bench

import (
	"fmt"

	"github.com/hostqos/hostqos/internal/lab/dpbench"
)

// benchIngress: ns/packet of the TC ingress classifier with
// BPF_PROG_TEST_RUN (dpbench.MeasureIngressPerPacket), against an empty
// TC program, at 10, 10k and 100k flows, and at 100k with a download
// limit on the matching rule; several rounds, median and min.
func benchIngress(e *env, r *Report) error {
	rounds := e.n(5, 2)
	repeat := uint32(e.n(1_000_000, 200_000))
	sizes := []int{10, 10_000, 100_000}
	r.setup("%s", hostLine())
	r.setup("BPF_PROG_TEST_RUN of the TCX ingress classifier on a received 64-byte-payload IPv4/TCP frame whose flow is in the table (the steady state of a download); %d repetitions per measurement (the kernel's average), best of 3 per measurement, %d rounds per size, sizes interleaved", repeat, rounds)
	r.setup("policy: 10 rules, the flow matches the last (remote 198.19.0.0/16); flow table pre-filled to 10 / 10k / 100k entries; the packet is counted on the receive side of its flow and rule")
	r.setup("download limit: the same at 100k flows with maxbw_in on the matching rule (100 gbit, so every packet is accounted and none is dropped: the TCP path of a limited download at ingress — payload length, epoch estimator)")
	const limited = -100_000
	empty := []float64{}
	cls := map[int][]float64{}
	net := map[int][]float64{}
	for i := 0; i < rounds; i++ {
		for _, n := range append(sizes, limited) {
			if err := e.ctx.Err(); err != nil {
				return err
			}
			res, err := dpbench.MeasureIngressPerPacket(max(n, -n), repeat, n < 0)
			if err != nil {
				return fmt.Errorf("measure ingress per-packet cost at %d flows (limit %v): %w", max(n, -n), n < 0, err)
			}
			empty = append(empty, res.EmptyNS)
			cls[n] = append(cls[n], res.ClassifierNS)
			net[n] = append(net[n], res.NetNS)
		}
	}
	r.Columns = []string{"program", "flows", "ns/packet median", "ns/packet min", "net of empty, median (min)", "target (net)"}
	r.row("empty TC program", "—", f1(median(empty)), f1(minOf(empty)), "—", "—")
	r.metric("empty_ns_median", median(empty))
	for _, n := range append(sizes, limited) {
		name, target := "hostqos ingress classifier", "—"
		if n == 100_000 {
			target = "≤ 60 ns " + mark(median(net[n]) <= 60)
		}
		if n == limited {
			name = "ingress classifier + download limit"
		}
		r.row(name, fmt.Sprint(max(n, -n)), f1(median(cls[n])), f1(minOf(cls[n])),
			fmt.Sprintf("%s (%s)", f1(median(net[n])), f1(minOf(net[n]))), target)
		key := fmt.Sprint(max(n, -n))
		if n == limited {
			key = "limit_100000"
		}
		r.metric("ingress_ns_median_"+key, median(cls[n]))
		r.metric("net_ns_median_"+key, median(net[n]))
	}
	r.note("net = classifier − empty program, per round; 'min' is the best round (least disturbed by other load on the machine)")
	return nil
}
