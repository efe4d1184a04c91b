package demo

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/hostqos/hostqos/internal/plot"
	"github.com/hostqos/hostqos/internal/traffic"
)

// WriteJSON prints the result as JSON.
func (res *Result) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(res)
}

// WriteTable prints the result for people.
func (res *Result) WriteTable(w io.Writer) error {
	switch {
	case res.Default != nil:
		res.Default.writeTable(w)
	case res.VoIP != nil:
		res.VoIP.writeTable(w)
	case res.Scale != nil:
		res.Scale.writeTable(w)
	case res.TCT != nil:
		res.TCT.writeTable(w)
	case res.CoS != nil:
		res.CoS.writeTable(w)
	}
	fmt.Fprintf(w, "\nmachine: %s, %d CPUs, kernel %s, load %s at start; wall time %.0f s\n", res.Env.CPU, res.Env.CPUs, res.Env.Kernel, res.Env.Load1, res.WallS)
	fmt.Fprintf(w, "files (%s):\n", res.OutDir)
	for _, f := range res.Files {
		fmt.Fprintf(w, "  %s\n", f)
	}
	if res.Scratch != "" {
		fmt.Fprintf(w, "scratch kept (daemon log, config, raw generator output): %s\n", res.Scratch)
	}
	return nil
}

// rate prints a measured rate for a report ("-" when there is none).
func rate(bps float64) string {
	if bps <= 0 {
		return "-"
	}
	return traffic.FormatRate(bps)
}

func msStr(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

// dscpMain names the DSCPs a class arrived with, most frequent first.
func dscpMain(m map[string]uint64) string {
	type kv struct {
		k string
		v uint64
	}
	var all []kv
	var sum uint64
	for k, v := range m {
		all = append(all, kv{k, v})
		sum += v
	}
	if sum == 0 {
		return "-"
	}
	sort.Slice(all, func(i, j int) bool { return all[i].v > all[j].v || (all[i].v == all[j].v && all[i].k < all[j].k) })
	var parts []string
	for _, e := range all {
		if len(parts) == 2 {
			break
		}
		if float64(e.v) >= 0.995*float64(sum) {
			return e.k
		}
		parts = append(parts, fmt.Sprintf("%s %.0f%%", e.k, 100*float64(e.v)/float64(sum)))
	}
	return strings.Join(parts, ",")
}

func pair(a, b string) string { return a + " → " + b }

func (d *DefaultResult) writeTable(w io.Writer) {
	s := d.Setup
	fmt.Fprintf(w, "\nhostqos demo: the same traffic without and with hostqos, measured at the server\n")
	fmt.Fprintf(w, "bottleneck %s at the router (DiffServ: EF strict priority, AF4x, AF1x, default, then CS1 and LE; %d ms FIFOs), client egress shaped by hostqos at %s\n",
		rate(float64(s.BottleneckBps)), s.RouterQueueMS, rate(float64(s.ClientEgressBps)))
	fmt.Fprintf(w, "cross traffic: Pareto k=%s α=%g cap %s, %gs intervals, seed %d, unmarked; voice measured for %gs\n\n",
		rate(float64(s.Cross.KBps)), s.Cross.Alpha, rate(float64(s.Cross.CapBps)), s.Cross.IntervalS, s.Cross.Seed, s.DurationS)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CLASS\tDSCP AT SERVER\tOFFERED\tTHROUGHPUT\tLOSS\tP50 LATENCY ms\tP99 LATENCY ms\tJITTER ms")
	fmt.Fprintln(tw, "\twithout → with\twithout → with\twithout → with\twithout → with\twithout → with\twithout → with\twithout → with")
	for i := range d.Without.Classes {
		a, b := d.Without.Classes[i], d.With.Classes[i]
		loss, p50, p99, jit := "-", "-", "-", "-"
		if a.HasLoss {
			loss = pair(pctStr(a.Loss), pctStr(b.Loss))
		}
		if a.HasLatency {
			p50 = pair(msStr(a.Latency.P50), msStr(b.Latency.P50))
			p99 = pair(msStr(a.Latency.P99), msStr(b.Latency.P99))
			jit = pair(msStr(a.JitterMS), msStr(b.JitterMS))
		}
		off := "elastic (TCP)"
		if a.OfferedBps > 0 {
			off = pair(rate(a.OfferedBps), rate(b.OfferedBps))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", a.Class, pair(dscpMain(a.DSCP), dscpMain(b.DSCP)), off,
			pair(rate(a.ThroughputBps), rate(b.ThroughputBps)), loss, p50, p99, jit)
	}
	tw.Flush()
	if a, b := d.Without.Classes[1], d.With.Classes[1]; a.FrameLoss != nil && b.FrameLoss != nil {
		fmt.Fprintf(w, "video frames lost (a frame with any fragment missing): %s → %s\n", pctStr(*a.FrameLoss), pctStr(*b.FrameLoss))
	}
	fmt.Fprintln(w, "latency is one-way (sender's timestamp to the server's receive time, same clock); jitter is RFC 3550, mean over flows")
	if len(d.With.Rules) > 0 {
		var parts []string
		for _, r := range d.With.Rules {
			parts = append(parts, fmt.Sprintf("%s→%s %d pkts", r.Rule, r.Class, r.Packets))
		}
		fmt.Fprintf(w, "hostqos's own counters (hostqos stat rules): %s\n", strings.Join(parts, ", "))
	}
	fmt.Fprintf(w, "at the router's bottleneck while the calls ran (its class counters: bytes sent, packets dropped):\n  without hostqos: %s\n  with hostqos:    %s\n",
		routerLine(d.Without.Router), routerLine(d.With.Router))
	fmt.Fprintf(w, "with hostqos: %s\n", strings.Join(s.Commands, "; "))
	d.Verdict.write(w)
}

// ---- plots ----

func (r *runner) plots(res *Result) ([]string, error) {
	var figs []struct {
		f    *plot.Figure
		base string
	}
	add := func(f *plot.Figure, name string) {
		figs = append(figs, struct {
			f    *plot.Figure
			base string
		}{f, filepath.Join(r.opts.OutDir, name)})
	}
	switch {
	case res.Default != nil:
		add(defaultFigure(res.Default), "voice-timeseries")
	case res.VoIP != nil:
		add(voipFigure(res.VoIP), "qpod-voip-fig25")
	case res.Scale != nil:
		add(scaleFigure(res.Scale), "qpod-scale-fig20")
	case res.TCT != nil:
		add(tctFigure(res.TCT), "qpod-tct-fig17-18")
	case res.CoS != nil:
		add(cosFigure(res.CoS), "qpod-cos-fig27")
	}
	var files []string
	for _, f := range figs {
		p, err := plot.Save(f.f, f.base)
		if err != nil {
			return nil, err
		}
		files = append(files, p...)
	}
	return files, nil
}

func binsXY(bins []Bin, y func(Bin) float64, mid bool, skipEmpty bool) ([]float64, []float64) {
	var xs, ys []float64
	for i, b := range bins {
		x := b.T
		if mid && i+1 < len(bins) {
			x = (b.T + bins[i+1].T) / 2
		} else if mid && i > 0 {
			x = b.T + (b.T-bins[i-1].T)/2
		}
		v := y(b)
		if skipEmpty && b.Sent == 0 {
			v = math.NaN()
		}
		xs = append(xs, x)
		ys = append(ys, v)
	}
	return xs, ys
}

// trim drops the leading and trailing bins that are empty or only partly
// covered by the sender (less than 90 % of the median bin's packets).
func trim(bins []Bin) []Bin {
	var sent []float64
	for _, b := range bins {
		if b.Sent > 0 {
			sent = append(sent, b.Sent)
		}
	}
	if len(sent) == 0 {
		return nil
	}
	sort.Float64s(sent)
	floor := 0.9 * sent[len(sent)/2]
	i, j := 0, len(bins)
	for i < j && bins[i].Sent < floor {
		i++
	}
	for j > i && bins[j-1].Sent < floor {
		j--
	}
	return bins[i:j]
}

func stepXY(trace []traffic.IntervalRate, interval float64, scale float64) ([]float64, []float64) {
	var xs, ys []float64
	for _, t := range trace {
		xs = append(xs, t.StartS, t.StartS+interval)
		ys = append(ys, t.TargetBps/scale, t.TargetBps/scale)
	}
	return xs, ys
}

func defaultFigure(d *DefaultResult) *plot.Figure {
	wo, wi := trim(d.Without.Voice), trim(d.With.Voice)
	offered := float64(d.Setup.Calls) * traffic.G729PacketRate
	x1, y1 := binsXY(wo, func(b Bin) float64 { return b.Received }, true, true)
	x2, y2 := binsXY(wi, func(b Bin) float64 { return b.Received }, true, true)
	l1x, l1y := binsXY(wo, func(b Bin) float64 { return b.P99 }, true, true)
	l2x, l2y := binsXY(wi, func(b Bin) float64 { return b.P99 }, true, true)
	ox := []float64{d.Setup.LeadS, d.Setup.LeadS + d.Setup.DurationS}
	cx, cy := stepXY(d.Without.CrossTrace, d.Setup.Cross.IntervalS, 1e6)
	cwx, cwy := binsXY(d.Without.Cross, func(b Bin) float64 { return b.RecvBps / 1e6 }, true, false)
	chx, chy := binsXY(d.With.Cross, func(b Bin) float64 { return b.RecvBps / 1e6 }, true, false)
	bn := float64(d.Setup.BottleneckBps) / 1e6
	return &plot.Figure{
		Title:     fmt.Sprintf("hostqos demo: %d g.729 calls, %.0f Mbit/s bottleneck, bursty cross traffic, bulk tcp", d.Setup.Calls, bn),
		XLabel:    "time since the start of the run (s); bins of 0.5 s by send time",
		XFromZero: true,
		Panels: []plot.Panel{
			{Title: "voice packets received per second (all calls)", YMax: offered * 1.25, Series: []plot.Series{
				{Name: "offered (" + fmt.Sprint(offered) + " pkt/s)", Color: plot.Black, Dashed: true, X: ox, Y: []float64{offered, offered}},
				{Name: "without hostqos (best effort)", Color: plot.Red, X: x1, Y: y1},
				{Name: "with hostqos (voice → ef)", Color: plot.Green, X: x2, Y: y2},
			}},
			{Title: "voice one-way latency, 99th percentile per bin (ms)", Series: []plot.Series{
				{Name: "without hostqos", Color: plot.Red, X: l1x, Y: l1y},
				{Name: "with hostqos", Color: plot.Green, X: l2x, Y: l2y},
			}},
			{Title: "cross traffic (Mbit/s)", YMax: bn * 1.3, Series: []plot.Series{
				{Name: "pareto source's rate per interval", Color: plot.Grey, X: cx, Y: cy},
				{Name: "received at the server, without hostqos", Color: plot.Red, Dashed: true, X: cwx, Y: cwy},
				{Name: "received at the server, with hostqos", Color: plot.Green, Dashed: true, X: chx, Y: chy},
				{Name: fmt.Sprintf("bottleneck (%.0f Mbit/s)", bn), Color: plot.Black, Dashed: true, X: []float64{0, cx[len(cx)-1]}, Y: []float64{bn, bn}},
			}},
		},
		Notes: []string{
			fmt.Sprintf("without: voice loss %s, p99 %s ms.  with: voice loss %s, p99 %s ms.  (measured at the server)",
				pctStr(d.Verdict.WithoutLoss), msStr(d.Verdict.WithoutP99MS), pctStr(d.Verdict.WithLoss), msStr(d.Verdict.WithP99MS)),
			fmt.Sprintf("cross traffic: pareto k=%s, alpha=%g, cap %s, %gs intervals, seed %d, unmarked",
				rate(float64(d.Setup.Cross.KBps)), d.Setup.Cross.Alpha, rate(float64(d.Setup.Cross.CapBps)), d.Setup.Cross.IntervalS, d.Setup.Cross.Seed),
			fmt.Sprintf("also on the link: %d bulk tcp uploads and a 25 fps video stream from the client", d.Setup.BulkStreams),
		},
	}
}
