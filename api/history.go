package api

import (
	"context"
	"net/url"
	"strconv"
	"time"
)

// Kinds of history (GET /v1/history/{kind}).
const (
	HistoryLinks   = "links"
	HistoryClasses = "classes"
	HistoryRules   = "rules"
	HistoryApps    = "apps"
	HistoryFlows   = "flows"
)

// Bounds of a history answer: at most MaxHistoryPoints points per series,
// MaxHistorySeries series, MaxHistoryTotalPoints points in all and
// MaxHistoryFlows flow records (the newest). A longer range gets a coarser
// step; more series, points or flows set Truncated (the totals still
// count every point).
const (
	MaxHistoryPoints      = 2000
	MaxHistorySeries      = 500
	MaxHistoryTotalPoints = 100_000
	MaxHistoryFlows       = 5000
)

// HistoryQuery asks for the history of one kind over [Since, Until].
type HistoryQuery struct {
	Kind  string        // links, classes, rules, apps or flows
	Name  string        // one object ("" = all); for flows: an app (comm, exe or container:RUNTIME/NAME), rule, class or unit
	Since time.Time     // zero: an hour before Until
	Until time.Time     // zero: now
	Step  time.Duration // width of a point (0: the finest the range allows)
	Limit int           // series or flow records at most (0: the maximum)
}

// values encodes q as the query string of the route.
func (q HistoryQuery) values() url.Values {
	v := url.Values{}
	if q.Name != "" {
		v.Set("name", q.Name)
	}
	if !q.Since.IsZero() {
		v.Set("since", q.Since.UTC().Format(time.RFC3339Nano))
	}
	if !q.Until.IsZero() {
		v.Set("until", q.Until.UTC().Format(time.RFC3339Nano))
	}
	if q.Step > 0 {
		v.Set("step", strconv.FormatFloat(q.Step.Seconds(), 'f', -1, 64))
	}
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	return v
}

// ParseHistoryQuery reads a HistoryQuery from a route's kind and query
// string (the daemon's side of HistoryQuery's encoding); the engine
// validates the values.
func ParseHistoryQuery(kind string, v url.Values) (HistoryQuery, error) {
	q := HistoryQuery{Kind: kind, Name: v.Get("name")}
	for k := range v {
		switch k {
		case "name", "since", "until", "step", "limit":
		default:
			return q, &ParamError{Param: k, Reason: "unknown parameter; known: name, since, until, step, limit"}
		}
	}
	var err error
	for _, p := range []struct {
		key string
		dst *time.Time
	}{{"since", &q.Since}, {"until", &q.Until}} {
		if s := v.Get(p.key); s != "" {
			if *p.dst, err = time.Parse(time.RFC3339Nano, s); err != nil {
				return q, &ParamError{Param: p.key, Value: s, Reason: "want an RFC 3339 time"}
			}
		}
	}
	if s := v.Get("step"); s != "" {
		f, err := strconv.ParseFloat(s, 64)
		if err != nil || f < 0 || f > 1e9 {
			return q, &ParamError{Param: "step", Value: s, Reason: "want seconds, 0 … 1e9"}
		}
		q.Step = time.Duration(f * float64(time.Second))
	}
	if s := v.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			return q, &ParamError{Param: "limit", Value: s, Reason: "want a whole number ≥ 0"}
		}
		q.Limit = n
	}
	return q, nil
}

// ParamError is a bad query parameter.
type ParamError struct {
	Param, Value, Reason string
}

func (e *ParamError) Error() string {
	if e.Value == "" {
		return "parameter " + e.Param + ": " + e.Reason
	}
	return "parameter " + e.Param + " = " + strconv.Quote(e.Value) + ": " + e.Reason
}

// HistoryCounters are the bytes, packets and drops of each direction: in
// is what the host received, out what it sent.
type HistoryCounters struct {
	BytesIn    uint64 `json:"bytes_in"`
	BytesOut   uint64 `json:"bytes_out"`
	PacketsIn  uint64 `json:"packets_in"`
	PacketsOut uint64 `json:"packets_out"`
	DropsIn    uint64 `json:"drops_in"`
	DropsOut   uint64 `json:"drops_out"`
}

// HistoryPoint is what a series carried during [Time, Time+Step).
type HistoryPoint struct {
	Time time.Time `json:"t"`
	HistoryCounters
	// PeakBytesIn and PeakBytesOut are the bytes of the point's busiest
	// second each way: a point of a minute or an hour averages its
	// seconds, its peak is what the busiest of them carried. (Points of
	// minute and hour rows recorded before the store kept peaks carry
	// their mean.)
	PeakBytesIn  uint64 `json:"peak_bytes_in"`
	PeakBytesOut uint64 `json:"peak_bytes_out"`
}

// HistorySeries is one object's history: its total over the range and its
// points (only those with traffic).
type HistorySeries struct {
	Name string  `json:"name"`
	UID  *uint32 `json:"uid,omitempty"` // an app's user
	// An app that is a container (docs/containers.md) is one series,
	// named container:RUNTIME/NAME, whichever of its processes sent:
	// its name, runtime and (latest) image. It has no UID.
	Container string          `json:"container,omitempty"`
	Runtime   string          `json:"runtime,omitempty"`
	Image     string          `json:"image,omitempty"`
	Total     HistoryCounters `json:"total"`
	Points    []HistoryPoint  `json:"points,omitempty"`
}

// FlowRecord is a flow that ended: its 5-tuple, app, rule, class, start,
// end, and counters of each direction.
type FlowRecord struct {
	Proto  string `json:"proto"`
	Local  string `json:"local"`
	Remote string `json:"remote"`
	PID    uint32 `json:"pid,omitempty"`
	Comm   string `json:"comm,omitempty"`
	Exe    string `json:"exe,omitempty"`
	UID    uint32 `json:"uid"`
	Cgroup string `json:"cgroup,omitempty"`
	Unit   string `json:"unit,omitempty"`
	Rule   string `json:"rule,omitempty"`
	Class  string `json:"class,omitempty"`
	// Container, Runtime and Image name the container whose flow it
	// was (docs/containers.md).
	Container string    `json:"container,omitempty"`
	Runtime   string    `json:"runtime,omitempty"`
	Image     string    `json:"image,omitempty"`
	Start     time.Time `json:"start"`
	End       time.Time `json:"end"`
	HistoryCounters
}

// History is the answer to GET /v1/history/{kind}: Series for links,
// classes, rules and apps, Flows for flows.
type History struct {
	Kind  string    `json:"kind"`
	Since time.Time `json:"since"`
	Until time.Time `json:"until"`
	// Step is the width of a point in seconds; Resolution the stored
	// resolution it was summed from ("1s", "1m", "1h").
	Step       float64         `json:"step_s"`
	Resolution string          `json:"resolution,omitempty"`
	Series     []HistorySeries `json:"series,omitempty"`
	Flows      []FlowRecord    `json:"flows,omitempty"`
	// Truncated: more series or flow records matched than the answer
	// holds.
	Truncated bool `json:"truncated,omitempty"`
}

// HistoryAPI reads the daemon's history store.
type HistoryAPI interface {
	Get(ctx context.Context, q HistoryQuery) (History, error)
}

// History returns the client for the history store.
func (c *Client) History() HistoryAPI { return &historyClient{c} }

type historyClient struct{ c *Client }

// Get asks for the history q describes.
func (h *historyClient) Get(ctx context.Context, q HistoryQuery) (History, error) {
	var out History
	path := Path(RouteHistory, q.Kind)
	if v := q.values(); len(v) > 0 {
		path += "?" + v.Encode()
	}
	err := h.c.Do(ctx, Method(RouteHistory), path, nil, &out)
	return out, err
}
