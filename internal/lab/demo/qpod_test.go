package demo

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hostqos/hostqos/internal/plot"
	"github.com/hostqos/hostqos/internal/traffic"
)

// TestQPodTCTAndCoSReports draws the qpod-tct and qpod-cos figures and
// tables from made-up results (no root, no traffic), including a payload
// whose every congested transfer timed out: house style, files that are
// real PNG and SVG, and the tables' cells.
func TestQPodTCTAndCoSReports(t *testing.T) {
	sum := func(p50 float64) traffic.Summary { return traffic.Summary{N: 4, P50: p50, Mean: p50, P90: p50} }
	tct := &TCTResult{Setup: TCTSetup{Payloads: tctSizes, Transfers: 4, CongestedCount: 1, BottleneckBps: tctBottleneck, CrossBps: tctCrossBps}}
	for i, s := range tctSizes {
		b := uint64(50<<10) << i
		tct.Idle = append(tct.Idle, TCTPoint{Size: s, Bytes: b, Plain: sum(float64(i + 1)), Managed: sum(float64(i) + 1.1), OverheadMS: 0.1, OverheadPct: 10})
		c := TCTPoint{Size: s, Bytes: b, Plain: sum(float64(100 * (i + 1))), Managed: sum(float64(10 * (i + 1)))}
		if i == 3 {
			c.Plain, c.PlainFailed = traffic.Summary{}, 1
		}
		tct.Congested = append(tct.Congested, c)
	}
	bins := []Bin{{T: 0, Sent: 60, Received: 60}, {T: 1, Sent: 60, Received: 40}, {T: 2, Sent: 60, Received: 60}, {T: 3}}
	trace := []traffic.IntervalRate{{StartS: 0, TargetBps: 2e6}, {StartS: 2, TargetBps: cosBottleneck}}
	run := CoSRun{Gold: CoSStream{Series: bins, MeanRatio: 1, BurstRatio: 1, WorstRatio: 1},
		Silver: CoSStream{Series: bins, MeanRatio: 0.9, BurstRatio: 0.7, WorstRatio: 0.66}, CrossTrace: trace}
	cos := &CoSResult{Setup: CoSSetup{BottleneckBps: cosBottleneck, Cross: CrossSpec{KBps: cosK, Alpha: 1.05, CapBps: cosBottleneck, IntervalS: 2}, CBRBps: cosCBR},
		Unmanaged: run, Managed: run}

	dir := t.TempDir()
	var files []string
	for name, f := range map[string]*plot.Figure{"tct": tctFigure(tct), "cos": cosFigure(cos)} {
		if bad := f.NotLowerCase(); len(bad) > 0 {
			t.Errorf("%s figure: text not in lower case: %q", name, bad)
		}
		fs, err := plot.Save(f, filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, fs...)
	}
	checkFigures(t, files)

	var b bytes.Buffer
	if err := (&Result{TCT: tct}).WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	if err := (&Result{CoS: cos}).WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"all 1 timed out (> 15s)", "+0.10 ms (+10.0 %)", "≈ +7 ms (≈ 150 %)", "Figure 27", "0.700"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("tables do not say %q:\n%s", want, b.String())
		}
	}
}
