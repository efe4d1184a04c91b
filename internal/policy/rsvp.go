package policy

import (
	"fmt"
	"strconv"
	"time"
)

// RSVP is the [rsvp] table of the config file: whether hostqosd speaks
// RSVP (RFC 2205) on its managed links, as a host or as a router, and its
// soft-state timers. Like the settings, hostqosd reads it when it starts
// (a reload does not change it).
type RSVP struct {
	// Enabled starts the RSVP agent: raw IP protocol 46 sockets that
	// accept messages arriving on managed links only.
	Enabled bool `toml:"enabled" json:"enabled"`
	// Router makes this host an RSVP router: it intercepts Path messages
	// it forwards (Router Alert), keeps path and reservation state per
	// session, and installs reservations for forwarded flows on its
	// outgoing link.
	Router bool `toml:"router" json:"router"`
	// Refresh is the refresh period R of the state this node originates
	// ("30s"); received state lives (K + 0.5) × 1.5 × R of its sender's R.
	Refresh string `toml:"refresh" json:"refresh,omitempty"`
	// MaxSessions bounds the sessions the API keeps (hostqos rsvp session
	// add).
	MaxSessions int `toml:"max_sessions" json:"max_sessions,omitempty"`
	// MaxPathsPerHop and MaxPathsPerSource bound the path states that the
	// Paths of one previous hop (their RSVP_HOP address) and of one
	// source address (the IP source of their packets) may hold: a remote
	// party cannot take the whole table of signalled state.
	MaxPathsPerHop    int `toml:"max_paths_per_hop" json:"max_paths_per_hop,omitempty"`
	MaxPathsPerSource int `toml:"max_paths_per_source" json:"max_paths_per_source,omitempty"`
}

// RSVP defaults and bounds.
const (
	DefaultRSVPRefresh     = 30 * time.Second
	MinRSVPRefresh         = 100 * time.Millisecond
	MaxRSVPRefresh         = time.Hour
	DefaultRSVPMaxSessions = 1024
	MaxRSVPMaxSessions     = 65536
	// DefaultRSVPMaxPaths is the default of max_paths_per_hop and
	// max_paths_per_source: a sixteenth of the node's 65,536 path states
	// (MaxRSVPMaxPaths, their largest value).
	DefaultRSVPMaxPaths = 4096
	MaxRSVPMaxPaths     = 65536
)

// RefreshPeriod is Refresh or its default. Call it on validated settings.
func (r RSVP) RefreshPeriod() time.Duration {
	if r.Refresh == "" {
		return DefaultRSVPRefresh
	}
	d, _ := ParseDuration(r.Refresh)
	return d
}

// SessionLimit is MaxSessions or its default.
func (r RSVP) SessionLimit() int {
	if r.MaxSessions == 0 {
		return DefaultRSVPMaxSessions
	}
	return r.MaxSessions
}

// PathsPerHop is MaxPathsPerHop or its default.
func (r RSVP) PathsPerHop() int {
	if r.MaxPathsPerHop == 0 {
		return DefaultRSVPMaxPaths
	}
	return r.MaxPathsPerHop
}

// PathsPerSource is MaxPathsPerSource or its default.
func (r RSVP) PathsPerSource() int {
	if r.MaxPathsPerSource == 0 {
		return DefaultRSVPMaxPaths
	}
	return r.MaxPathsPerSource
}

// Validate checks the [rsvp] table and names the bad fields.
func (r RSVP) Validate(source string) error {
	var errs Errors
	if r.Refresh != "" {
		d, err := ParseDuration(r.Refresh)
		if err != nil || d < MinRSVPRefresh || d > MaxRSVPRefresh {
			errs = append(errs, &FieldError{Source: source, Object: "rsvp", Field: "refresh", Value: Clip(r.Refresh),
				Reason: fmt.Sprintf("want a duration from %s to %s", MinRSVPRefresh, FormatSpan(MaxRSVPRefresh)),
				Fix:    `write e.g. "30s" (RFC 2205's default) or "1s" in a test bed`})
		}
	}
	if r.MaxSessions != 0 && (r.MaxSessions < 1 || r.MaxSessions > MaxRSVPMaxSessions) {
		errs = append(errs, &FieldError{Source: source, Object: "rsvp", Field: "max_sessions", Value: strconv.Itoa(r.MaxSessions), Literal: true,
			Reason: fmt.Sprintf("want 1 … %d", MaxRSVPMaxSessions)})
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"max_paths_per_hop", r.MaxPathsPerHop}, {"max_paths_per_source", r.MaxPathsPerSource}} {
		if f.v != 0 && (f.v < 1 || f.v > MaxRSVPMaxPaths) {
			errs = append(errs, &FieldError{Source: source, Object: "rsvp", Field: f.name, Value: strconv.Itoa(f.v), Literal: true,
				Reason: fmt.Sprintf("want 1 … %d path states", MaxRSVPMaxPaths)})
		}
	}
	if r.Router && !r.Enabled {
		errs = append(errs, &FieldError{Source: source, Object: "rsvp", Field: "router", Value: "true", Literal: true,
			Reason: "router = true needs RSVP enabled", Fix: "add enabled = true to [rsvp]"})
	}
	if len(errs) == 0 {
		return nil
	}
	return errs
}

// rsvpKey is the config file's [rsvp] table.
const rsvpKey = "rsvp"

// rsvp decodes the [rsvp] table of raw into p.RSVP.
func (ld *loader) rsvp(raw map[string]any, p *Policy) {
	v, ok := raw[rsvpKey]
	if !ok {
		return
	}
	m, ok := v.(map[string]any)
	if !ok {
		ld.fail("", rsvpKey, ld.loc[keyLoc{"", -1, rsvpKey}], nil, "want a table", "write it as an [rsvp] section, with single brackets")
		return
	}
	e := ld.entry(rsvpKey, -1, m)
	e.obj = rsvpKey
	e.fields(&p.RSVP)
	for _, fe := range AsErrors(p.RSVP.Validate(ld.src)) {
		if ld.bad[rsvpKey+"\x00"+fe.Field] {
			continue
		}
		fe.Line = ld.loc[keyLoc{rsvpKey, -1, fe.Field}]
		ld.errs = append(ld.errs, fe)
	}
}
