// Package rtchanlab reproduces the evaluation of the seed behind real-time
// channels (docs/rtchan.md): its Table 3 workload on the null device in
// virtual time (Experiment, over rtchan.Sim and its trace), the sweeps of
// Figs. 7-9 (RunBench) and their tables and plots (gonum/plot, through
// internal/plot). It is the lab behind `hostqos rtchan bench`; the public
// rtchan package, and hostqosd through it, do not link it.
package rtchanlab

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/hostqos/hostqos/internal/plot"
	"github.com/hostqos/hostqos/rtchan"
)

// Sweep is one figure of the seed's evaluation: the same experiment run at
// several values of one variable.
type Sweep struct {
	Name   string    `json:"name"`
	Title  string    `json:"title"`
	XLabel string    `json:"xlabel"`
	X      []float64 `json:"x"`
	Runs   []Result  `json:"runs"`
}

// BenchOptions selects the sweep points. Zero values take the defaults.
type BenchOptions struct {
	Quick   bool      // 8K packets instead of 32K, fewer points
	Loads   []float64 // best-effort loads, KB/s (Figs. 7 and 9)
	Factors []float64 // R_max violation factors of channel 0 (Fig. 8)
	BEFixed float64   // best-effort load of Fig. 8, KB/s (seed: ≈1,900)
}

func (o BenchOptions) withDefaults() BenchOptions {
	if len(o.Loads) == 0 {
		if o.Quick {
			o.Loads = []float64{0, 1000, 2000, 3000, 4000, 5000, 6000}
		} else {
			for l := 0.0; l <= 7000; l += 500 {
				o.Loads = append(o.Loads, l)
			}
		}
	}
	if len(o.Factors) == 0 {
		o.Factors = []float64{1, 1.5, 2, 3, 4, 5}
	}
	if o.BEFixed == 0 {
		o.BEFixed = 1900
	}
	return o
}

// Variant names the experiment variants of the seed's Figs. 7–9.
type Variant string

const (
	VariantFig7       Variant = "fig7"        // all channels honour their specs
	VariantFig9a      Variant = "fig9a"       // non-preemptive best-effort processing
	VariantFig9b      Variant = "fig9b"       // real-time preemption only at message boundaries, early work above BE
	VariantFig9bDrain Variant = "fig9b-drain" // real-time handlers drain their queue non-preemptively
)

// VariantExperiment is the seed experiment at best-effort load beKBs with
// the policy of variant v.
func VariantExperiment(v Variant, beKBs float64, quick bool) Experiment {
	e := SeedExperiment(fmt.Sprintf("%s be=%g", v, beKBs), beKBs)
	switch v {
	case VariantFig9a:
		e.Policy.BEPreempt = rtchan.PreemptNever
	case VariantFig9b:
		e.Policy.RTPreempt = rtchan.PreemptMessage
		e.Policy.WorkConserving = true
		e.Policy.EarlyAboveBE = true
	case VariantFig9bDrain:
		e.Policy.RTPreempt = rtchan.PreemptNever
		e.Policy.WorkConserving = true
		e.Policy.EarlyAboveBE = true
	}
	if quick {
		e.TotalPackets, e.Warmup, e.Cooldown = 8*1024, 512, 512
	}
	return e
}

// RunBench runs the sweeps of Figs. 7, 8, 9a, 9b (and 9b with queue
// draining) in virtual time.
func RunBench(o BenchOptions) ([]Sweep, error) {
	o = o.withDefaults()
	var out []Sweep
	loadSweep := func(v Variant, title string) error {
		sw := Sweep{Name: string(v), Title: title, XLabel: "offered best-effort load (KB/s)"}
		for _, l := range o.Loads {
			r, err := VariantExperiment(v, l, o.Quick).Run()
			if err != nil {
				return err
			}
			sw.X = append(sw.X, l)
			sw.Runs = append(sw.Runs, r)
		}
		out = append(out, sw)
		return nil
	}
	if err := loadSweep(VariantFig7, "Fig. 7: all channels honour their traffic specs"); err != nil {
		return nil, err
	}
	sw := Sweep{Name: "fig8", Title: fmt.Sprintf("Fig. 8: channel 0 violates Rmax (best effort %g KB/s)", o.BEFixed), XLabel: "channel 0 rate / Rmax"}
	for _, f := range o.Factors {
		e := VariantExperiment(VariantFig7, o.BEFixed, o.Quick)
		e.Name = fmt.Sprintf("fig8 factor=%g", f)
		e.Loads[0].RateFactor = f
		r, err := e.Run()
		if err != nil {
			return nil, err
		}
		sw.X = append(sw.X, f)
		sw.Runs = append(sw.Runs, r)
	}
	out = append(out, sw)
	if err := loadSweep(VariantFig9a, "Fig. 9a: non-preemptive best-effort processing"); err != nil {
		return nil, err
	}
	if err := loadSweep(VariantFig9b, "Fig. 9b: real-time preemption only at message boundaries"); err != nil {
		return nil, err
	}
	if err := loadSweep(VariantFig9bDrain, "Fig. 9b': real-time handlers drain their message queue"); err != nil {
		return nil, err
	}
	return out, nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// fmtX formats a sweep's x value for the table: whole numbers without
// decimals, others with 3 significant digits.
func fmtX(v float64) string {
	if v == math.Trunc(v) && math.Abs(v) < 1e7 {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.3g", v)
}

// Table renders the sweep as a text table.
func (s Sweep) Table() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n", s.Title)
	fmt.Fprintf(&b, "%10s %-5s %10s %10s %10s %10s %8s %8s\n", "x", "chan", "offered", "thruput", "minlax", "meanlax", "misses", "drops")
	fmt.Fprintf(&b, "%10s %-5s %10s %10s %10s %10s %8s %8s\n", "", "", "KB/s", "KB/s", "ms", "ms", "pkts", "pkts")
	for i, r := range s.Runs {
		for j, c := range r.Channels {
			x := ""
			if j == 0 {
				x = fmtX(s.X[i])
			}
			minl, meanl := "-", "-"
			if !c.BestEffort {
				minl, meanl = fmt.Sprintf("%.2f", ms(c.MinLaxity)), fmt.Sprintf("%.2f", ms(c.MeanLaxity))
			}
			fmt.Fprintf(&b, "%10s %-5s %10.0f %10.0f %10s %10s %8d %8d\n", x, c.Name, c.OfferedKBs, c.ThroughputKBs, minl, meanl, c.Misses, c.Drops)
		}
	}
	return b.String()
}

// Charts returns the sweep's plots keyed by file name without extension
// (WriteCharts adds .png and .svg).
func (s Sweep) Charts() map[string]Chart {
	if len(s.Runs) == 0 {
		return nil
	}
	n := len(s.Runs[0].Channels)
	thr := Chart{Title: s.Title + " — throughput", XLabel: s.XLabel, YLabel: "throughput (KB/s)"}
	lax := Chart{Title: s.Title + " — message laxity", XLabel: s.XLabel, YLabel: "laxity (ms)"}
	miss := Chart{Title: s.Title + " — deadline misses", XLabel: s.XLabel, YLabel: "packets missing deadline"}
	drop := Chart{Title: s.Title + " — packet drops", XLabel: s.XLabel, YLabel: "packets dropped"}
	for j := 0; j < n; j++ {
		name := s.Runs[0].Channels[j].Name
		be := s.Runs[0].Channels[j].BestEffort
		var t, mn, mean, mi, dr []float64
		for _, r := range s.Runs {
			c := r.Channels[j]
			t = append(t, c.ThroughputKBs)
			mn = append(mn, ms(c.MinLaxity))
			mean = append(mean, ms(c.MeanLaxity))
			mi = append(mi, float64(c.Misses))
			dr = append(dr, float64(c.Drops))
		}
		label := name
		if be {
			label += " (best effort)"
		}
		thr.Series = append(thr.Series, Series{Name: label, X: s.X, Y: t})
		drop.Series = append(drop.Series, Series{Name: label, X: s.X, Y: dr})
		if !be {
			lax.Series = append(lax.Series, Series{Name: name + " min", X: s.X, Y: mn}, Series{Name: name + " mean", X: s.X, Y: mean})
			miss.Series = append(miss.Series, Series{Name: name, X: s.X, Y: mi})
		}
	}
	return map[string]Chart{
		s.Name + "_throughput": thr,
		s.Name + "_laxity":     lax,
		s.Name + "_misses":     miss,
		s.Name + "_drops":      drop,
	}
}

// WriteCharts writes every sweep's plots into dir, each as NAME.png and
// NAME.svg, and returns the file names.
func WriteCharts(dir string, sweeps []Sweep) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create plot directory %s: %w", dir, err)
	}
	var names []string
	for _, s := range sweeps {
		for name, c := range s.Charts() {
			files, err := plot.Save(c.figure(), filepath.Join(dir, name))
			if err != nil {
				return nil, err
			}
			names = append(names, files...)
		}
	}
	sort.Strings(names)
	return names, nil
}
