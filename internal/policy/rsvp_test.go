package policy

import (
	"strings"
	"testing"
	"time"
)

// The [rsvp] table loads strictly: its keys, its bounds, unknown keys.
func TestRSVPConfig(t *testing.T) {
	p, err := Load([]byte("[rsvp]\nenabled = true\nrouter = true\nrefresh = \"1s\"\nmax_sessions = 10\nmax_paths_per_hop = 20\nmax_paths_per_source = 30\n"), "t.toml")
	if err != nil {
		t.Fatal(err)
	}
	if !p.RSVP.Enabled || !p.RSVP.Router || p.RSVP.RefreshPeriod() != time.Second || p.RSVP.SessionLimit() != 10 ||
		p.RSVP.PathsPerHop() != 20 || p.RSVP.PathsPerSource() != 30 {
		t.Fatalf("loaded %+v", p.RSVP)
	}
	if p, err := Load(nil, "t.toml"); err != nil || p.RSVP.Enabled || p.RSVP.RefreshPeriod() != 30*time.Second || p.RSVP.SessionLimit() != 1024 ||
		p.RSVP.PathsPerHop() != 4096 || p.RSVP.PathsPerSource() != 4096 {
		t.Fatalf("defaults: %+v, %v", p.RSVP, err)
	}
	for conf, want := range map[string]string{
		"[rsvp]\nrefresh = \"10ms\"\n":                                  `t.toml:2: rsvp: field refresh = "10ms": want a duration from 100ms to 1h`,
		"[rsvp]\nenabled = true\nmax_sessions = 100000\n":               "t.toml:3: rsvp: field max_sessions = 100000: want 1 … 65536",
		"[rsvp]\nrouter = true\n":                                       "t.toml:2: rsvp: field router = true: router = true needs RSVP enabled",
		"[rsvp]\nmax_paths_per_hop = 0\nmax_paths_per_source = 70000\n": "t.toml:3: rsvp: field max_paths_per_source = 70000: want 1 … 65536 path states",
		"[rsvp]\nmax_paths_per_hop = -1\n":                              "t.toml:2: rsvp: field max_paths_per_hop = -1: want 1 … 65536 path states",
		"[rsvp]\nenable = true\n":                                       `t.toml:2: rsvp: unknown key "enable"`,
		"[rsvp]\nenabled = \"yes\"\n":                                   "t.toml:2: rsvp: field enabled = \"yes\": want true or false",
		"[[rsvp]]\nenabled = true\n":                                    "want a table",
	} {
		_, err := Load([]byte(conf), "t.toml")
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: got %v, want %q", conf, err, want)
		}
	}
}
