package api

import (
	"context"
	"net/url"
	"strings"

	"github.com/hostqos/hostqos/internal/policy"
)

// Method returns the HTTP method of a route ("GET /v1/rules" → "GET").
func Method(route string) string {
	m, _, _ := strings.Cut(route, " ")
	return m
}

// Path returns the path of a route with its {wildcards} filled, in order,
// by params (each escaped with url.PathEscape):
// Path(RouteRule, "web") is "/v1/rules/web". It panics when the number of
// params does not match the route's wildcards: that is a programming error.
func Path(route string, params ...string) string {
	_, p, ok := strings.Cut(route, " ")
	if !ok {
		p = route
	}
	var b strings.Builder
	for {
		i := strings.IndexByte(p, '{')
		if i < 0 {
			break
		}
		j := strings.IndexByte(p[i:], '}')
		if j < 0 || len(params) == 0 {
			panic("api.Path: route " + route + " wants more parameters")
		}
		b.WriteString(p[:i])
		b.WriteString(url.PathEscape(params[0]))
		params = params[1:]
		p = p[i+j+1:]
	}
	if len(params) > 0 {
		panic("api.Path: route " + route + " wants fewer parameters")
	}
	b.WriteString(p)
	return b.String()
}

// ChangeOption adjusts one change (a request that is not a GET).
type ChangeOption func(*ChangeOptions)

// ChangeOptions are the options of one change, as the ChangeOptions given
// set them (see Options).
type ChangeOptions struct {
	// Temporary: not persisted (see Temporary).
	Temporary bool
	// Force: applied though it takes away shaping admitted guarantees
	// rely on (see Force).
	Force bool
	// IdempotencyKey overrides the client's key (see WithIdempotencyKey).
	IdempotencyKey string
	// Once: not sent again after an attempt that may have reached the
	// daemon (see SendOnce).
	Once bool
	// NoWait: a refused connection is not tried again (see
	// NoWaitForDaemon).
	NoWait bool
}

// NoWaitForDaemon makes a change give up at once when the daemon's socket
// refuses the connection (a socket file left by a crashed daemon), instead
// of trying again for 10 s while a restarting daemon comes back: for
// `hostqos down`, which then cleans up without a daemon.
func NoWaitForDaemon() ChangeOption { return func(o *ChangeOptions) { o.NoWait = true } }

// SendOnce makes a change that may have reached the daemon not be sent
// again: for a change the daemon does not deduplicate by its key (the runs
// of ordinary users), where a resend could apply it twice. A lost answer
// then comes back as an *OutcomeUnknownError.
func SendOnce() ChangeOption { return func(o *ChangeOptions) { o.Once = true } }

// Options applies opts in order and returns the result; fakes of the
// client use it to see the options of a change.
func Options(opts ...ChangeOption) ChangeOptions {
	var o ChangeOptions
	for _, f := range opts {
		f(&o)
	}
	return o
}

// Temporary makes a change that is not persisted: the daemon forgets it
// when it stops (a crash keeps it). Links, classes and rules take it.
func Temporary(on bool) ChangeOption { return func(o *ChangeOptions) { o.Temporary = on } }

// Force makes a change that takes away the shaping admitted guarantees
// rely on (a link's egress rate removed, or lowered under the scheduled
// qsockets' rates) apply anyway, instead of being refused with the
// numbers: sent as ?force=1. Link changes and reload take it.
func Force(on bool) ChangeOption { return func(o *ChangeOptions) { o.Force = on } }

// WithIdempotencyKey sends the change with this key instead of the
// client's (Client.IdempotencyKey) or a fresh random one.
func WithIdempotencyKey(key string) ChangeOption {
	return func(o *ChangeOptions) { o.IdempotencyKey = key }
}

// Fields are a rule's or a class's fields by their JSON names, for adding
// with only some fields given (the daemon fills in the defaults) or for
// changing some fields (a field given as nil is cleared).
type Fields map[string]any

// call sends a request to route with its wildcards filled by params.
func (c *Client) call(ctx context.Context, route string, params []string, body, out any, opts []ChangeOption) error {
	o := Options(opts...)
	path := Path(route, params...)
	var q []string
	if o.Temporary {
		q = append(q, "temporary=1")
	}
	if o.Force {
		q = append(q, "force=1")
	}
	if len(q) > 0 {
		path += "?" + strings.Join(q, "&")
	}
	if (o.IdempotencyKey != "" && o.IdempotencyKey != c.IdempotencyKey) || o.Once || o.NoWait {
		cc := *c
		if o.IdempotencyKey != "" {
			cc.IdempotencyKey = o.IdempotencyKey
		}
		cc.once, cc.noWait = o.Once, o.NoWait
		c = &cc
	}
	return c.Do(ctx, Method(route), path, body, out)
}

// Status returns the daemon's status.
func (c *Client) Status(ctx context.Context) (Status, error) {
	var s Status
	err := c.call(ctx, RouteStatus, nil, nil, &s, nil)
	return s, err
}

// Reload makes the daemon re-read its config file and returns its status
// afterwards; an invalid file changes nothing.
func (c *Client) Reload(ctx context.Context, opts ...ChangeOption) (Status, error) {
	var s Status
	err := c.call(ctx, RouteReload, nil, nil, &s, opts)
	return s, err
}

// Down makes the daemon remove everything it made and stop; it returns
// the daemon's one-line account of what it removed.
func (c *Client) Down(ctx context.Context, opts ...ChangeOption) (string, error) {
	var res map[string]string
	err := c.call(ctx, RouteDown, nil, nil, &res, opts)
	return res["down"], err
}

// The parts of the API, as interfaces so that programs built on the
// client (the CLI) can be tested against a fake.
type (
	// LinksAPI manages links.
	LinksAPI interface {
		List(ctx context.Context) ([]LinkStatus, error)
		Set(ctx context.Context, name string, f Fields, opts ...ChangeOption) ([]LinkStatus, error)
		Replace(ctx context.Context, link policy.Link, opts ...ChangeOption) ([]LinkStatus, error)
		Remove(ctx context.Context, name string, opts ...ChangeOption) error
	}
	// PolicyObjectsAPI manages one kind of named policy object (classes,
	// rules): T as it is added, Info as it is listed.
	PolicyObjectsAPI[T, Info any] interface {
		// List returns the objects (rules in evaluation order).
		List(ctx context.Context) ([]Info, error)
		// Get returns one object (a rule with what its selectors
		// resolve to).
		Get(ctx context.Context, name string) (Info, error)
		// Add adds an object given whole.
		Add(ctx context.Context, obj T, opts ...ChangeOption) error
		// AddFields adds object name with the fields given; the daemon
		// fills in the others' defaults.
		AddFields(ctx context.Context, name string, f Fields, opts ...ChangeOption) error
		// Set changes the fields given of object name (nil clears a
		// field).
		Set(ctx context.Context, name string, f Fields, opts ...ChangeOption) error
		// Remove removes an object.
		Remove(ctx context.Context, name string, opts ...ChangeOption) error
	}
	// ClassesAPI manages service classes.
	ClassesAPI = PolicyObjectsAPI[policy.Class, ClassInfo]
	// RulesAPI manages rules.
	RulesAPI = PolicyObjectsAPI[policy.Rule, RuleInfo]
	// RunsAPI starts, lists and ends runs.
	RunsAPI interface {
		List(ctx context.Context) ([]Run, error)
		Start(ctx context.Context, req RunRequest, opts ...ChangeOption) (Run, error)
		End(ctx context.Context, id string, opts ...ChangeOption) error
	}
	// StatsAPI reads the live counters.
	StatsAPI interface {
		Get(ctx context.Context, kind string) (Stats, error)
		Rules(ctx context.Context) (Stats, error)
		Classes(ctx context.Context) (Stats, error)
		Apps(ctx context.Context) (Stats, error)
		Flows(ctx context.Context) (Stats, error)
	}
)

// Links returns the client for managed links.
func (c *Client) Links() LinksAPI {
	return linksClient{objectClient[LinkStatus]{c, objectRoutes{
		list: RouteLinks, put: RouteSetLink, patch: RoutePatchLink, remove: RouteRemoveLink}}}
}

// Classes returns the client for service classes.
func (c *Client) Classes() ClassesAPI {
	return policyClient[policy.Class, ClassInfo]{objectClient[ClassInfo]{c, objectRoutes{
		list: RouteClasses, show: RouteClass, add: RouteAddClass, patch: RouteSetClass, remove: RouteRemoveClass}}}
}

// Rules returns the client for rules.
func (c *Client) Rules() RulesAPI {
	return policyClient[policy.Rule, RuleInfo]{objectClient[RuleInfo]{c, objectRoutes{
		list: RouteRules, show: RouteRule, add: RouteAddRule, patch: RouteSetRule, remove: RouteRemoveRule}}}
}

// Runs returns the client for runs (programs started by hostqos run).
func (c *Client) Runs() RunsAPI { return &runsClient{c} }

// Stats returns the client for the live counters.
func (c *Client) Stats() StatsAPI { return &statsClient{c} }

// linksClient is the client of managed links: its changes answer with
// every managed link.
type linksClient struct{ o objectClient[LinkStatus] }

// List returns the managed links.
func (l linksClient) List(ctx context.Context) ([]LinkStatus, error) { return l.o.List(ctx) }

// Set changes the fields given of link name (nil clears a field) and
// keeps the others, or manages the link with them; it returns the
// managed links.
func (l linksClient) Set(ctx context.Context, name string, f Fields, opts ...ChangeOption) ([]LinkStatus, error) {
	return patch[[]LinkStatus](ctx, l.o, name, f, opts)
}

// Replace manages the link with all of link's settings (a field left out
// takes its default) and returns the managed links.
func (l linksClient) Replace(ctx context.Context, link policy.Link, opts ...ChangeOption) ([]LinkStatus, error) {
	return callFor[[]LinkStatus](ctx, l.o.c, l.o.routes.put, []string{link.Name}, link, opts)
}

// Remove stops managing the link.
func (l linksClient) Remove(ctx context.Context, name string, opts ...ChangeOption) error {
	return l.o.Remove(ctx, name, opts...)
}

type runsClient struct{ c *Client }

// List returns the runs the caller may see.
func (r *runsClient) List(ctx context.Context) ([]Run, error) {
	var rs []Run
	err := r.c.call(ctx, RouteRuns, nil, nil, &rs, nil)
	return rs, err
}

// Start puts a process (req.PID, 0 for the caller) under a policy.
func (r *runsClient) Start(ctx context.Context, req RunRequest, opts ...ChangeOption) (Run, error) {
	var run Run
	// An ordinary user's run is not deduplicated by its key: never resend.
	err := r.c.call(ctx, RouteStartRun, nil, req, &run, append(opts, SendOnce()))
	return run, err
}

// End ends a run.
func (r *runsClient) End(ctx context.Context, id string, opts ...ChangeOption) error {
	return r.c.call(ctx, RouteEndRun, []string{id}, nil, nil, opts)
}

// Stat kinds of RouteStats.
const (
	StatRules   = "rules"
	StatClasses = "classes"
	StatApps    = "apps"
	StatFlows   = "flows"
	StatLinks   = "links"
)

type statsClient struct{ c *Client }

// Get returns the counters of one kind (StatRules, StatClasses, StatApps,
// StatFlows or StatLinks).
func (s *statsClient) Get(ctx context.Context, kind string) (Stats, error) {
	var st Stats
	err := s.c.call(ctx, RouteStats, []string{kind}, nil, &st, nil)
	return st, err
}

// Rules returns the counters per rule.
func (s *statsClient) Rules(ctx context.Context) (Stats, error) { return s.Get(ctx, StatRules) }

// Classes returns the counters per class and link.
func (s *statsClient) Classes(ctx context.Context) (Stats, error) { return s.Get(ctx, StatClasses) }

// Apps returns the counters per process.
func (s *statsClient) Apps(ctx context.Context) (Stats, error) { return s.Get(ctx, StatApps) }

// Flows returns the counters per flow.
func (s *statsClient) Flows(ctx context.Context) (Stats, error) { return s.Get(ctx, StatFlows) }

// withName returns a copy of f without its nil fields and with "name".
func withName(name string, f Fields) Fields {
	out := Fields{}
	for k, v := range f {
		if v != nil {
			out[k] = v
		}
	}
	out["name"] = name
	return out
}
