package bench

import (
	"fmt"
	"math"
	"time"
)

// benchDownloadPriority reproduces Crossbow's Table 2: the bandwidth two
// competing downloads of different priority get. Two apps download at once
// through a downlink bottleneck, one in class interactive (high priority),
// one in class bulk (low); without a link ingress_rate (both only counted)
// and with one just below the bottleneck, where the classes' priorities
// apply to downloads. Per app: min, max and mean of its 1-s rates.
func benchDownloadPriority(e *env, r *Report) error {
	const (
		downlink = 100e6
		ingress  = 95e6
		rtt      = 40 * time.Millisecond
		every    = time.Second
	)
	dur := e.dur(16*time.Second, 6*time.Second)
	warm := e.dur(4*time.Second, 2*time.Second)
	rounds := e.n(2, 1)
	hi, err := e.app("hqb-dl-high")
	if err != nil {
		return err
	}
	lo, err := e.app("hqb-dl-low")
	if err != nil {
		return err
	}
	p, err := e.path("benchdlp", rtt, downlink)
	if err != nil {
		return err
	}
	defer p.Close()
	rules := fmt.Sprintf("[[rule]]\nname = \"flow1\"\nexe = %q\nclass = \"interactive\"\n\n[[rule]]\nname = \"flow2\"\nexe = %q\nclass = \"bulk\"\n", hi, lo)
	d, err := e.dlDaemon(p, rules)
	if err != nil {
		return err
	}
	defer d.Stop()
	r.setup("%s", hostLine())
	r.setup("path: client — router — server, %v round trip (the testbed's delay line), the router's egress toward the client shaped to %.0f Mbit/s (HTB with a short FIFO: the downlink bottleneck); the real hostqosd on the client manages its link", rtt, downlink/1e6)
	r.setup("two apps (copies of the helper executable) download at once, each over one TCP connection from an in-process bulk sender on the server, for %v; rules flow1 (app 1, class interactive: high priority) and flow2 (app 2, class bulk: low)", dur)
	r.setup("alternatives: the link managed without ingress_rate (downloads counted, not prioritised) and with `hostqos link set IF --ingress-rate %.0fmbit` (just below the bottleneck: each class may receive what the higher ones leave); %d round(s), interleaved; min / max / mean of each app's 1-s goodput after %v of warm-up", ingress/1e6, rounds, warm)

	type stat struct{ rates []float64 }
	alts := []struct {
		name string
		set  []string
	}{
		{"no ingress_rate (counted only)", []string{"link", "set", p.clientIf, "--ingress-rate", "0"}},
		{fmt.Sprintf("ingress_rate %.0f Mbit/s", ingress/1e6), []string{"link", "set", p.clientIf, "--ingress-rate", fmt.Sprintf("%.0fmbit", ingress/1e6)}},
	}
	got := make([][2]stat, len(alts))
	for round := 0; round < rounds; round++ {
		for ai, a := range alts {
			if err := e.ctx.Err(); err != nil {
				return err
			}
			if _, err := d.CLI(a.set...); err != nil {
				return err
			}
			res, err := e.downloadPair(p, hi, lo, dur, every)
			if err != nil {
				return fmt.Errorf("%s: %w", a.name, err)
			}
			for i := range res {
				got[ai][i].rates = append(got[ai][i].rates, intervalRates(&res[i], warm)...)
			}
		}
	}
	r.Columns = []string{"alternative", "flow", "priority", "min Mbit/s", "max Mbit/s", "mean Mbit/s", "share of the two"}
	for ai, a := range alts {
		var means [2]float64
		for i := range means {
			means[i] = meanOf(got[ai][i].rates)
		}
		for i, name := range []string{"flow1 (app 1)", "flow2 (app 2)"} {
			rs := got[ai][i].rates
			share := means[i] / (means[0] + means[1])
			r.row(a.name, name, []string{"high (interactive)", "low (bulk)"}[i], f1(minOf(rs)), f1(maxOf(rs)), f1(means[i]), pct(share))
			r.metric(fmt.Sprintf("mean_mbps_%s_flow%d", key2(ai), i+1), means[i])
		}
	}
	r.row("Crossbow (seed Table 2)", "flow1", "high", "365", "415", "390", pct(390.0/(390+338)))
	r.row("Crossbow (seed Table 2)", "flow2", "low", "291", "360", "338", pct(338.0/(390+338)))
	r.note("with ingress_rate the classes are strict priorities by design (docs/receive.md): each level may receive what the levels above it left of the rate, at least 1 %% of it, so a greedy high-priority download takes nearly all and the low one the rest; without it the two share the bottleneck as TCP does")
	r.note("seed (Crossbow Table 2): priorities map to the kernel threads that process each flow's packets, so they show only when the CPU is saturated; two flows of high and low priority on an unsaturated host got overlapping ranges. hostqos applies the classes to the bandwidth itself: the low class is held to what the high class leaves of the ingress rate")
	return nil
}

// downloadPair runs the two apps' downloads at once and returns their
// samples (app a first).
func (e *env) downloadPair(p *dlPath, a, b string, dur, every time.Duration) ([2]downloadResult, error) {
	var out [2]downloadResult
	var senders []*bulkSender
	defer func() {
		for _, s := range senders {
			s.Close()
		}
	}()
	var waits []func(any) error
	for _, app := range []string{a, b} {
		bs, err := startBulkSender(p.server, dlServer4.Addr())
		if err != nil {
			return out, err
		}
		senders = append(senders, bs)
		w, err := e.startHelper(p.client, app, "download", "--to", bs.addr(), "--duration", dur.String(), "--warmup", "0s", "--sample", every.String())
		if err != nil {
			for _, w := range waits {
				_ = w(nil)
			}
			return out, err
		}
		waits = append(waits, w)
	}
	var first error
	for i, w := range waits {
		if err := w(&out[i]); err != nil && first == nil {
			first = err
		}
	}
	return out, first
}

// intervalRates are the Mbit/s of the first stream between consecutive
// samples, after skip from the first sample.
func intervalRates(res *downloadResult, skip time.Duration) []float64 {
	var out []float64
	if len(res.Samples) == 0 {
		return nil
	}
	t0 := res.Samples[0].UnixMS
	for i := 1; i < len(res.Samples); i++ {
		s0, s1 := res.Samples[i-1], res.Samples[i]
		dt := float64(s1.UnixMS-s0.UnixMS) / 1e3
		if dt <= 0 || time.Duration(s0.UnixMS-t0)*time.Millisecond < skip || len(s0.Bytes) == 0 || len(s1.Bytes) == 0 {
			continue
		}
		out = append(out, float64(s1.Bytes[0]-s0.Bytes[0])*8/dt/1e6)
	}
	return out
}

func meanOf(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	var s float64
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

func maxOf(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	m := xs[0]
	for _, x := range xs[1:] {
		m = max(m, x)
	}
	return m
}
