package main

import (
	"os"
	"path/filepath"
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
		// The last point: 30 MB in a minute = 4 Mbit/s.
		if !strings.Contains(out, "30 points") || !strings.Contains(out, "peak 4.00mbit/s") {
			t.Errorf("plot said %q", out)
		}
		if _, err := plot.CheckFile(path); err != nil {
			t.Error(err)
		}
		if data, _ := os.ReadFile(path); strings.HasSuffix(name, ".svg") && !strings.Contains(string(data), "peak 4.00mbit/s") {
			t.Error("the SVG does not state the peak")
		}
	}
}
