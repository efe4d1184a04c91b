package policy

import (
	"fmt"
	"net"
	"reflect"
	"strconv"
	"time"
)

// Settings are the daemon's observability settings, written as top-level
// keys of the config file (before the first [[section]]). hostqosd reads
// them when it starts (a reload does not change them); its flags of the
// same names (--metrics-listen, --history-raw, …) override them. Empty or
// zero fields take the defaults.
type Settings struct {
	// MetricsListen is the address of the Prometheus listener
	// ("127.0.0.1:9464"); "" = no listener.
	MetricsListen string `toml:"metrics_listen" json:"metrics_listen,omitempty"`
	// MaxApps is how many apps get a name of their own in history and
	// metrics; the traffic of the others is app "other" of their user.
	MaxApps int `toml:"max_apps" json:"max_apps,omitempty"`
	// Retention of the history store: per-second samples, per-minute and
	// per-hour roll-ups, flow records and events ("1h", "30d").
	HistoryRaw     string `toml:"history_raw" json:"history_raw,omitempty"`
	HistoryMinutes string `toml:"history_minutes" json:"history_minutes,omitempty"`
	HistoryHours   string `toml:"history_hours" json:"history_hours,omitempty"`
	HistoryFlows   string `toml:"history_flows" json:"history_flows,omitempty"`
	// HistoryMaxFlows bounds the flow records kept.
	HistoryMaxFlows int `toml:"history_max_flows" json:"history_max_flows,omitempty"`
	// HistoryMaxEvents and HistoryMaxEventBytes bound the events kept
	// (rows; their bytes, a size such as "64MiB").
	HistoryMaxEvents     int    `toml:"history_max_events" json:"history_max_events,omitempty"`
	HistoryMaxEventBytes string `toml:"history_max_event_bytes" json:"history_max_event_bytes,omitempty"`
	// HistoryMaxBytes is the history database's budget: at it, history
	// stops recording until retention frees room ("4GiB").
	HistoryMaxBytes string `toml:"history_max_bytes" json:"history_max_bytes,omitempty"`
	// HistoryMinFree is the free space history leaves on its file system
	// for the policy state ("64MiB"): below it, history stops recording.
	HistoryMinFree string `toml:"history_min_free" json:"history_min_free,omitempty"`
	// EventRate and EventBurst bound the events one ordinary user or one
	// remote RSVP party may have published one by one: on average
	// EventRate a minute, at most EventBurst at once (a token bucket);
	// what is over is counted and published as one event per kind a
	// minute.
	EventRate  int `toml:"event_rate" json:"event_rate,omitempty"`
	EventBurst int `toml:"event_burst" json:"event_burst,omitempty"`
	// FlowIdle is how long a flow may be silent before it is recorded as
	// ended ("15s").
	FlowIdle string `toml:"flow_idle" json:"flow_idle,omitempty"`
	// FlowQueueing is how each class's traffic is queued on a shaped
	// link: "htb" (the default: flow queueing built from HTB leaves, see
	// docs/concepts.md) or "off" (one FIFO per class).
	FlowQueueing string `toml:"flow_queueing" json:"flow_queueing,omitempty"`
	// AutoLinks is what the daemon does while the policy manages no
	// link: "observe" (the default) manages the interfaces of the default
	// routes to count and mark their traffic, without shaping; "off"
	// manages nothing.
	AutoLinks string `toml:"auto_links" json:"auto_links,omitempty"`
}

// AutoLinks modes (Settings.AutoLinks).
const (
	AutoLinksObserve = "observe"
	AutoLinksOff     = "off"
)

// Flow queueing modes (Settings.FlowQueueing).
const (
	FlowQueueingHTB = "htb"
	FlowQueueingOff = "off"
)

// FlowQueues reports whether shaped links get flow queueing.
func (s Settings) FlowQueues() bool { return s.FlowQueueing != FlowQueueingOff }

// Defaults and ranges of the settings.
var (
	SpanDefaults = map[string]time.Duration{
		"history_raw": time.Hour, "history_minutes": 30 * day, "history_hours": 365 * day,
		"history_flows": 30 * day, "flow_idle": 15 * time.Second,
	}
	SpanLimits = map[string][2]time.Duration{
		"history_raw":     {time.Minute, day},
		"history_minutes": {time.Hour, 366 * day},
		"history_hours":   {day, 10 * 366 * day},
		"history_flows":   {time.Hour, 10 * 366 * day},
		"flow_idle":       {time.Second, time.Hour},
	}
	// SizeDefaults and SizeLimits are the size settings' defaults and
	// ranges, in bytes.
	SizeDefaults = map[string]int64{
		"history_max_event_bytes": 64 << 20, "history_max_bytes": 4 << 30, "history_min_free": 64 << 20,
	}
	SizeLimits = map[string][2]int64{
		"history_max_event_bytes": {1 << 20, 1 << 40},
		"history_max_bytes":       {16 << 20, 1 << 40},
		"history_min_free":        {1 << 20, 1 << 40},
	}
)

// Defaults and ranges of the numeric settings.
const (
	DefaultMaxApps          = 100
	MaxMaxApps              = 10000
	DefaultHistoryMaxFlows  = 1_000_000
	MinHistoryMaxFlows      = 1000
	MaxHistoryMaxFlows      = 100_000_000
	DefaultHistoryMaxEvents = 100_000
	MinHistoryMaxEvents     = 1000
	MaxHistoryMaxEvents     = 100_000_000
	DefaultEventRate        = 30 // a minute
	MaxEventRate            = 60_000
	DefaultEventBurst       = 60
	MaxEventBurst           = 10_000
)

const day = 24 * time.Hour

// Span is the duration a span setting (history_raw, flow_idle, …) gives,
// or its default when it is empty. Call it on validated settings.
func (s Settings) Span(key string) time.Duration {
	v := reflect.ValueOf(s)
	f, ok := fieldsOf(v.Type(), "toml").byKey[key]
	if !ok {
		panic("policy.Settings.Span: no setting " + key)
	}
	str := v.FieldByIndex(f.index).String()
	if str == "" {
		return SpanDefaults[key]
	}
	d, _ := ParseDuration(str)
	return d
}

// Apps is MaxApps or its default.
func (s Settings) Apps() int {
	if s.MaxApps == 0 {
		return DefaultMaxApps
	}
	return s.MaxApps
}

// MaxFlowRecords is HistoryMaxFlows or its default.
func (s Settings) MaxFlowRecords() int {
	if s.HistoryMaxFlows == 0 {
		return DefaultHistoryMaxFlows
	}
	return s.HistoryMaxFlows
}

// MaxEventRecords is HistoryMaxEvents or its default.
func (s Settings) MaxEventRecords() int {
	if s.HistoryMaxEvents == 0 {
		return DefaultHistoryMaxEvents
	}
	return s.HistoryMaxEvents
}

// Events are EventRate and EventBurst or their defaults.
func (s Settings) Events() (rate, burst int) {
	rate, burst = s.EventRate, s.EventBurst
	if rate == 0 {
		rate = DefaultEventRate
	}
	if burst == 0 {
		burst = DefaultEventBurst
	}
	return rate, burst
}

// Bytes is the size a size setting (history_max_bytes, …) gives, or its
// default when it is empty. Call it on validated settings.
func (s Settings) Bytes(key string) int64 {
	v := reflect.ValueOf(s)
	f, ok := fieldsOf(v.Type(), "toml").byKey[key]
	if !ok {
		panic("policy.Settings.Bytes: no setting " + key)
	}
	str := v.FieldByIndex(f.index).String()
	if str == "" {
		return SizeDefaults[key]
	}
	n, _ := ParseSize(str)
	return int64(n)
}

// Validate checks every setting and names the bad ones.
func (s Settings) Validate(source string) error {
	var errs Errors
	v := reflect.ValueOf(s)
	for key := range SpanLimits {
		f := fieldsOf(v.Type(), "toml").byKey[key]
		str := v.FieldByIndex(f.index).String()
		if str == "" {
			continue
		}
		lim := SpanLimits[key]
		d, err := ParseDuration(str)
		if err != nil || d < lim[0] || d > lim[1] {
			fe := &FieldError{Source: source, Field: key, Value: Clip(str),
				Reason: fmt.Sprintf("want a duration from %s to %s", FormatSpan(lim[0]), FormatSpan(lim[1])),
				Fix:    "write e.g. " + FormatSpan(SpanDefaults[key]) + " (s, min, h, d, w; e.g. 2h 30min)"}
			if err != nil {
				fe.Reason = err.Error()
			}
			errs = append(errs, fe)
		}
	}
	if s.MaxApps != 0 && (s.MaxApps < 1 || s.MaxApps > MaxMaxApps) {
		errs = append(errs, &FieldError{Source: source, Field: "max_apps", Value: strconv.Itoa(s.MaxApps), Literal: true,
			Reason: fmt.Sprintf("want 1 … %d", MaxMaxApps)})
	}
	if s.HistoryMaxFlows != 0 && (s.HistoryMaxFlows < MinHistoryMaxFlows || s.HistoryMaxFlows > MaxHistoryMaxFlows) {
		errs = append(errs, &FieldError{Source: source, Field: "history_max_flows", Value: strconv.Itoa(s.HistoryMaxFlows), Literal: true,
			Reason: fmt.Sprintf("want %d … %d", MinHistoryMaxFlows, MaxHistoryMaxFlows)})
	}
	for key, lim := range SizeLimits {
		f := fieldsOf(v.Type(), "toml").byKey[key]
		str := v.FieldByIndex(f.index).String()
		if str == "" {
			continue
		}
		n, err := ParseSize(str)
		if err != nil || int64(n) < lim[0] || int64(n) > lim[1] {
			errs = append(errs, &FieldError{Source: source, Field: key, Value: Clip(str),
				Reason: fmt.Sprintf("want a size from %s to %s", Size(lim[0]), Size(lim[1])),
				Fix:    "write e.g. " + Size(SizeDefaults[key]).String() + " (B, KiB, MiB, GiB; or kB, MB, GB in 1000s)"})
		}
	}
	for _, c := range []struct {
		key          string
		v, low, high int
	}{
		{"history_max_events", s.HistoryMaxEvents, MinHistoryMaxEvents, MaxHistoryMaxEvents},
		{"event_rate", s.EventRate, 1, MaxEventRate},
		{"event_burst", s.EventBurst, 1, MaxEventBurst},
	} {
		if c.v != 0 && (c.v < c.low || c.v > c.high) {
			errs = append(errs, &FieldError{Source: source, Field: c.key, Value: strconv.Itoa(c.v), Literal: true,
				Reason: fmt.Sprintf("want %d … %d", c.low, c.high)})
		}
	}
	if s.FlowQueueing != "" && s.FlowQueueing != FlowQueueingHTB && s.FlowQueueing != FlowQueueingOff {
		errs = append(errs, &FieldError{Source: source, Field: "flow_queueing", Value: Clip(s.FlowQueueing),
			Reason: "not a flow queueing mode", Fix: `write "htb" (flow queueing, the default) or "off" (one FIFO per class)`})
	}
	if s.AutoLinks != "" && s.AutoLinks != AutoLinksObserve && s.AutoLinks != AutoLinksOff {
		errs = append(errs, &FieldError{Source: source, Field: "auto_links", Value: Clip(s.AutoLinks),
			Reason: "not a mode", Fix: `write "observe" (manage the default routes' interfaces while no link is managed, the default) or "off"`})
	}
	if s.MetricsListen != "" {
		if _, port, err := net.SplitHostPort(s.MetricsListen); err != nil || port == "" {
			errs = append(errs, &FieldError{Source: source, Field: "metrics_listen", Value: Clip(s.MetricsListen),
				Reason: "not a host:port address", Fix: `write e.g. "127.0.0.1:9464"`})
		}
	}
	if len(errs) == 0 {
		return nil
	}
	errs.sortByLine()
	return errs
}

// settingsKeys are the top-level keys of the config file that are
// settings.
func settingsKeys() map[string]bool {
	out := map[string]bool{}
	for _, n := range fieldsOf(reflect.TypeOf(Settings{}), "toml").names {
		out[n] = true
	}
	return out
}

// settings decodes the top-level settings keys of raw into p.Settings.
func (ld *loader) settings(raw map[string]any, p *Policy) {
	keys := settingsKeys()
	sub := map[string]any{}
	for k, v := range raw {
		if keys[k] {
			sub[k] = v
		}
	}
	if len(sub) == 0 {
		return
	}
	e := ld.entry("", -1, sub)
	e.obj = ""
	e.fields(&p.Settings)
	for _, fe := range AsErrors(p.Settings.Validate(ld.src)) {
		if ld.bad["\x00"+fe.Field] {
			continue
		}
		fe.Line = ld.loc[keyLoc{"", -1, fe.Field}]
		ld.errs = append(ld.errs, fe)
	}
}
