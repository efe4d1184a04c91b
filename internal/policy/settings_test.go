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
		if back, err := ParseSpan(want); err != nil || back != d {
			t.Errorf("ParseSpan(%q) = %v, %v", want, back, err)
		}
	}
}
