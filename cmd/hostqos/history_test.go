package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/plot"
)

func TestParseTime(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for in, want := range map[string]time.Time{
		"2h":                   now.Add(-2 * time.Hour),
		"7d":                   now.Add(-7 * 24 * time.Hour),
		"2026-01-01T10:00:00Z": time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC),
		"2026-01-01":           time.Date(2026, 1, 1, 0, 0, 0, 0, time.Local),
		"2026-01-01 10:30":     time.Date(2026, 1, 1, 10, 30, 0, 0, time.Local),
	} {
		got, err := parseTime(in, now)
		if err != nil || !got.Equal(want) {
			t.Errorf("parseTime(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	if _, err := parseTime("yesterday", now); err == nil {
		t.Error("yesterday accepted")
	}
}

func testHistory() api.History {
	t0 := time.Date(2026, 1, 2, 2, 0, 0, 0, time.UTC)
	var pts []api.HistoryPoint
	var total api.HistoryCounters
	for i := 0; i < 30; i++ {
		c := api.HistoryCounters{BytesOut: uint64(1e6 * (i + 1)), PacketsOut: uint64(700 * (i + 1)), BytesIn: 1000}
		pts = append(pts, api.HistoryPoint{Time: t0.Add(time.Duration(i) * time.Minute), HistoryCounters: c})
		total.BytesOut += c.BytesOut
		total.PacketsOut += c.PacketsOut
		total.BytesIn += c.BytesIn
	}
	return api.History{Step: 60, Resolution: "1m", Series: []api.HistorySeries{{Name: "web", Total: total, Points: pts}}}
}

func TestStatHistory(t *testing.T) {
	c := &fakeClient{history: testHistory()}
	out, errOut, code := runFake(c, "stat", "history", "rules", "web", "--since", "2h", "--step", "1m")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, "web") || !strings.Contains(out, "BYTES OUT") || !strings.Contains(out, "443.46MiB") {
		t.Errorf("table:\n%s", out)
	}
	if len(c.calls) != 1 || c.calls[0] != "History.Get rules web 2026-01-02T01:04:05Z 2026-01-02T03:04:05Z 1m0s" {
		t.Errorf("calls = %q", c.calls)
	}
	out, _, code = runFake(c, "stat", "history", "rules", "-o", "csv")
	if code != exitOK || strings.Count(out, "\n") != 31 || !strings.HasPrefix(out, "name,time,bytes_in,bytes_out") {
		t.Errorf("csv (exit %d):\n%s", code, out)
	}
	for _, args := range [][]string{
		{"stat", "history", "nope"},
		{"stat", "history", "rules", "--since", "soon"},
		{"stat", "history", "rules", "--since", "1h", "--until", "2h"},
		{"stat", "history", "rules", "--step", "0s"},
		{"stat", "history", "rules", "-o", "xml"},
		{"plot", "flows", "--out", "x.png"},
		{"plot", "rules", "--out", "x.gif"},
	} {
		if _, errOut, code := runFake(c, args...); code == exitOK || errOut == "" {
			t.Errorf("%q: exit %d, stderr %q", args, code, errOut)
		}
	}
}

// TestPlotFiles: hostqos plot writes a PNG and an SVG that decode, and the
// SVG's caption states the data's range and peak.
func TestPlotFiles(t *testing.T) {
	c := &fakeClient{history: testHistory()}
	dir := t.TempDir()
	for _, name := range []string{"rules.png", "rules.svg"} {
		path := filepath.Join(dir, name)
		out, errOut, code := runFake(c, "plot", "rules", "--since", "2026-01-02T02:00:00Z", "--out", path)
		if code != exitOK {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		// The last point: 30 MB in a minute = 4 Mbit/s (no busiest
		// second known: its mean).
		if !strings.Contains(out, "1 series, 30 points") || !strings.Contains(out, "busiest second 4.00mbit/s") {
			t.Errorf("plot said %q", out)
		}
		if _, err := plot.CheckFile(path); err != nil {
			t.Error(err)
		}
		if data, _ := os.ReadFile(path); strings.HasSuffix(name, ".svg") && !strings.Contains(string(data), "busiest second 4.00mbit/s") {
			t.Error("the SVG does not state the peak")
		}
	}
}

// TestPlotKeepsPeaks: two hours of minute points whose seconds peaked at
// 6 Mbit/s while each minute averaged under 3 (the history's busiest
// second of each point): the plot draws the mean as a line and a band up
// to the busiest second, says that peak, and its x axis is the time of
// day (Unix seconds marked as clock times), not minutes since the start.
func TestPlotKeepsPeaks(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 14, 0, 0, 0, time.Local)
	var pts []api.HistoryPoint
	for i := 0; i < 120; i++ {
		// 20 MB a minute (2.67 Mbit/s); 750 kB in its busiest second (6 Mbit/s).
		pts = append(pts, api.HistoryPoint{Time: t0.Add(time.Duration(i) * time.Minute),
			HistoryCounters: api.HistoryCounters{BytesOut: 20e6}, PeakBytesOut: 750e3})
	}
	h := api.History{Kind: "rules", Since: t0, Until: t0.Add(2 * time.Hour), Step: 60, Resolution: "1m",
		Series: []api.HistorySeries{{Name: "download", Points: pts}}}
	fig, peak, n := historyFigure(h, 8)
	if peak != 6e6 || n != 120 {
		t.Errorf("busiest %v bit/s over %d points, want 6e6 over 120", peak, n)
	}
	var line, band *plot.Series
	for i, s := range fig.Panels[0].Series {
		if s.Lo != nil {
			band = &fig.Panels[0].Series[i]
		} else {
			line = &fig.Panels[0].Series[i]
		}
	}
	if line == nil || band == nil || slices.Max(line.Y) > 2.7 || slices.Max(band.Y) != 6 || band.Lo[0] != line.Y[0] {
		t.Fatalf("sent panel %+v: want a mean line under 2.7 Mbit/s and a band from it up to 6", fig.Panels[0].Series)
	}
	if fig.XClock == nil || line.X[0] != float64(t0.Unix()) || strings.Contains(fig.XLabel, "minutes") {
		t.Errorf("x axis: clock %v, first x %v, label %q; want clock times (Unix seconds)", fig.XClock, line.X[0], fig.XLabel)
	}
	if bad := fig.NotLowerCase(); len(bad) > 0 {
		t.Errorf("texts not in the house style: %q", bad)
	}
	c := &fakeClient{history: h}
	out, errOut, code := runFake(c, "plot", "rules", "--since", "2h", "--out", filepath.Join(t.TempDir(), "p.png"))
	if code != exitOK || !strings.Contains(out, "1 series, 120 points") || !strings.Contains(out, "busiest second 6.00mbit/s") {
		t.Errorf("plot: exit %d %s%s", code, out, errOut)
	}
}

// TestStatHistoryContainers: a container's app history is named
// container:RUNTIME/NAME with its image, and its flow records by
// runtime/name.
func TestStatHistoryContainers(t *testing.T) {
	h := api.History{Kind: "apps", Step: 60, Resolution: "1m", Series: []api.HistorySeries{
		{Name: "container:docker/db", Container: "db", Runtime: "docker", Image: "postgres:16", Total: api.HistoryCounters{BytesOut: 5e6}}}}
	c := &fakeClient{history: h}
	out, errOut, code := runFake(c, "stat", "history", "apps", "container:docker/db")
	if code != exitOK || !strings.Contains(out, "container:docker/db (postgres:16)") {
		t.Errorf("apps history of a container (exit %d, %s):\n%s", code, errOut, out)
	}
	c.history = api.History{Kind: api.HistoryFlows, Flows: []api.FlowRecord{{Proto: "tcp", Local: "198.19.0.2:40000", Remote: "198.18.0.2:443",
		Container: "db", Runtime: "docker", Image: "postgres:16", HistoryCounters: api.HistoryCounters{BytesOut: 100}}}}
	out, _, _ = runFake(c, "stat", "history", "flows")
	if !strings.Contains(out, "docker/db") {
		t.Errorf("flow records of a container:\n%s", out)
	}
	out, _, _ = runFake(c, "stat", "history", "flows", "-o", "csv")
	if !strings.Contains(out, ",runtime,container,image\n") || !strings.Contains(out, ",docker,db,postgres:16\n") {
		t.Errorf("csv flow records of a container:\n%s", out)
	}
}
