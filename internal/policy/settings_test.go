package policy

import (
	"strings"
	"testing"
	"time"
)

func TestSettingsLoad(t *testing.T) {
	p, err := Load([]byte("metrics_listen = \"127.0.0.1:9464\"\nhistory_raw = \"2h\"\nflow_idle = \"3s\"\nmax_apps = 5\n"), "t.toml")
	if err != nil {
		t.Fatal(err)
	}
	s := p.Settings
	if s.MetricsListen != "127.0.0.1:9464" || s.Span("history_raw") != 2*time.Hour || s.Span("flow_idle") != 3*time.Second ||
		s.Apps() != 5 || s.Span("history_minutes") != 30*24*time.Hour {
		t.Errorf("settings = %+v", s)
	}
	_, err = Load([]byte("history_raw = \"1s\"\nmax_apps = 0\nmetrics_listen = \"nope\"\n"), "t.toml")
	if err == nil || !strings.Contains(err.Error(), "t.toml:1: field history_raw = \"1s\": want a duration from 1m to 1d") ||
		!strings.Contains(err.Error(), "t.toml:3: field metrics_listen") {
		t.Errorf("bad settings: %v", err)
	}
	for d, want := range map[time.Duration]string{time.Hour: "1h", 90 * time.Minute: "1h30m", 30 * 24 * time.Hour: "30d", 15 * time.Second: "15s", time.Minute: "1m"} {
		if got := FormatSpan(d); got != want {
			t.Errorf("FormatSpan(%v) = %q, want %q", d, got, want)
		}
		if back, err := ParseDuration(want); err != nil || back != d {
			t.Errorf("ParseDuration(%q) = %v, %v", want, back, err)
		}
	}
}

// TestSettingsHistoryBounds: the history's caps and the event limits load
// with their defaults, and a value out of range names its key and range.
func TestSettingsHistoryBounds(t *testing.T) {
	p, err := Load([]byte("history_max_events = 5000\nhistory_max_bytes = \"1GiB\"\nevent_rate = 6\n"), "t.toml")
	if err != nil {
		t.Fatal(err)
	}
	s := p.Settings
	rate, burst := s.Events()
	if s.MaxEventRecords() != 5000 || s.Bytes("history_max_bytes") != 1<<30 || s.Bytes("history_min_free") != 64<<20 ||
		s.Bytes("history_max_event_bytes") != 64<<20 || rate != 6 || burst != DefaultEventBurst {
		t.Errorf("settings = %+v", s)
	}
	var none Settings
	if r, b := none.Events(); none.MaxEventRecords() != DefaultHistoryMaxEvents || r != 30 || b != 60 {
		t.Errorf("defaults: %d events, rate %d, burst %d", none.MaxEventRecords(), r, b)
	}
	_, err = Load([]byte("history_max_events = 10\nhistory_min_free = \"1KiB\"\nhistory_max_bytes = \"lots\"\nevent_burst = 100000\n"), "t.toml")
	for _, want := range []string{
		"t.toml:1: field history_max_events = 10: want 1000 … 100000000",
		`t.toml:2: field history_min_free = "1KiB": want a size from 1MiB to 1TiB; write e.g. 64MiB`,
		`t.toml:3: field history_max_bytes = "lots": want a size from 16MiB to 1TiB; write e.g. 4GiB`,
		"t.toml:4: field event_burst = 100000: want 1 … 10000",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("bad settings: %v\nwant %q", err, want)
		}
	}
}
