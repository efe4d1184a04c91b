package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"sort"
	"strings"
	"time"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/policy"
)

// fakeClient answers the CLI's calls from memory and records the changes.
type fakeClient struct {
	status  api.Status
	links   []api.LinkStatus
	classes []api.ClassInfo
	rules   []api.RuleInfo
	runs    []api.Run
	stats   map[string]api.Stats
	events  []api.Event // what Events().Follow delivers
	resvs   []api.ReservationInfo
	history api.History
	explain api.Explanation // what Explain answers
	ctrs    []api.Container // what Containers answers
	err     error           // when set, every call fails with it
	calls   []string        // the calls made, one line each
}

var _ apiClient = (*fakeClient)(nil)

// record notes a call with its arguments and options.
func (f *fakeClient) record(name string, args []any, opts []api.ChangeOption) error {
	parts := []string{name}
	for _, a := range args {
		switch v := a.(type) {
		case string:
			parts = append(parts, v)
		case api.Fields:
			keys := make([]string, 0, len(v))
			for k := range v {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				b, _ := json.Marshal(v[k])
				parts = append(parts, k+"="+string(b))
			}
		default:
			b, _ := json.Marshal(v)
			parts = append(parts, string(b))
		}
	}
	o := api.Options(opts...)
	if o.Temporary {
		parts = append(parts, "(temporary)")
	}
	if o.Force {
		parts = append(parts, "(force)")
	}
	f.calls = append(f.calls, strings.Join(parts, " "))
	return f.err
}

func (f *fakeClient) Status(context.Context) (api.Status, error) {
	return f.status, f.record("Status", nil, nil)
}
func (f *fakeClient) Reload(_ context.Context, opts ...api.ChangeOption) (api.Status, error) {
	return f.status, f.record("Reload", nil, opts)
}
func (f *fakeClient) Down(_ context.Context, opts ...api.ChangeOption) (string, error) {
	return "down", f.record("Down", nil, opts)
}
func (f *fakeClient) Links() api.LinksAPI     { return fakeLinks{f} }
func (f *fakeClient) Classes() api.ClassesAPI { return fakeClasses{f} }
func (f *fakeClient) Rules() api.RulesAPI     { return fakeRules{f} }
func (f *fakeClient) Runs() api.RunsAPI       { return fakeRuns{f} }
func (f *fakeClient) Stats() api.StatsAPI     { return fakeStats{f} }
func (f *fakeClient) History() api.HistoryAPI { return fakeHistory{f} }
func (f *fakeClient) Explain(_ context.Context, q api.ExplainQuery) (api.Explanation, error) {
	return f.explain, f.record("Explain", []any{q}, nil)
}

func (f *fakeClient) Containers(context.Context) ([]api.Container, error) {
	return f.ctrs, f.record("Containers", nil, nil)
}

func (f *fakeClient) WebToken(context.Context) (api.WebLogin, error) {
	return api.WebLogin{URL: "http://127.0.0.1:9465/?token=0123", Base: "http://127.0.0.1:9465/", Token: "0123"}, f.record("WebToken", nil, nil)
}

type fakeHistory struct{ f *fakeClient }

func (h fakeHistory) Get(_ context.Context, q api.HistoryQuery) (api.History, error) {
	out := h.f.history
	out.Kind, out.Since, out.Until = q.Kind, q.Since, q.Until
	return out, h.f.record("History.Get", []any{q.Kind, q.Name, q.Since.UTC().Format(time.RFC3339), q.Until.UTC().Format(time.RFC3339), q.Step.String()}, nil)
}
func (f *fakeClient) Shield() api.ShieldAPI { return fakeShield{f} }

type fakeShield struct{ f *fakeClient }

func (s fakeShield) Blocks(context.Context) ([]api.BlockInfo, error) {
	return nil, s.f.record("Shield.Blocks", nil, nil)
}
func (s fakeShield) Block(_ context.Context, req api.BlockRequest, opts ...api.ChangeOption) (api.BlockInfo, error) {
	return api.BlockInfo{Block: policy.Block{Prefix: req.Prefix, MaxBWIn: req.MaxBWIn}}, s.f.record("Shield.Block", []any{req}, opts)
}
func (s fakeShield) Unblock(_ context.Context, p netip.Prefix, opts ...api.ChangeOption) error {
	return s.f.record("Shield.Unblock", []any{p.String()}, opts)
}
func (s fakeShield) Protected(context.Context) ([]api.ProtectedInfo, error) {
	return nil, s.f.record("Shield.Protected", nil, nil)
}
func (s fakeShield) Protect(_ context.Context, req api.ProtectRequest, opts ...api.ChangeOption) (api.ProtectedInfo, error) {
	return api.ProtectedInfo{Addr: req.Addr, Port: req.Port, Class: req.Class}, s.f.record("Shield.Protect", []any{req}, opts)
}
func (s fakeShield) Unprotect(_ context.Context, a netip.Addr, port uint16, opts ...api.ChangeOption) error {
	return s.f.record("Shield.Unprotect", []any{a.String(), port}, opts)
}

func (f *fakeClient) QSockets() api.QSocketsAPI { return nil }

type fakeLinks struct{ f *fakeClient }

func (l fakeLinks) List(context.Context) ([]api.LinkStatus, error) {
	return l.f.links, l.f.record("Links.List", nil, nil)
}
func (l fakeLinks) Set(_ context.Context, name string, f api.Fields, opts ...api.ChangeOption) ([]api.LinkStatus, error) {
	return l.f.links, l.f.record("Links.Set", []any{name, f}, opts)
}
func (l fakeLinks) Replace(_ context.Context, link policy.Link, opts ...api.ChangeOption) ([]api.LinkStatus, error) {
	return l.f.links, l.f.record("Links.Replace", []any{link}, opts)
}
func (l fakeLinks) Remove(_ context.Context, name string, opts ...api.ChangeOption) error {
	return l.f.record("Links.Remove", []any{name}, opts)
}

type fakeClasses struct{ f *fakeClient }

func (c fakeClasses) List(context.Context) ([]api.ClassInfo, error) {
	return c.f.classes, c.f.record("Classes.List", nil, nil)
}
func (c fakeClasses) Get(_ context.Context, name string) (api.ClassInfo, error) {
	if err := c.f.record("Classes.Get", []any{name}, nil); err != nil {
		return api.ClassInfo{}, err
	}
	for _, ci := range c.f.classes {
		if ci.Class.Name == name {
			return ci, nil
		}
	}
	return api.ClassInfo{}, &api.Error{Status: 404, Body: api.ErrorBody{Error: fmt.Sprintf("class %q: not found", name)}}
}
func (c fakeClasses) Add(_ context.Context, class policy.Class, opts ...api.ChangeOption) error {
	return c.f.record("Classes.Add", []any{class}, opts)
}
func (c fakeClasses) AddFields(_ context.Context, name string, fl api.Fields, opts ...api.ChangeOption) error {
	return c.f.record("Classes.AddFields", []any{name, fl}, opts)
}
func (c fakeClasses) Set(_ context.Context, name string, fl api.Fields, opts ...api.ChangeOption) error {
	return c.f.record("Classes.Set", []any{name, fl}, opts)
}
func (c fakeClasses) Remove(_ context.Context, name string, opts ...api.ChangeOption) error {
	return c.f.record("Classes.Remove", []any{name}, opts)
}

type fakeRules struct{ f *fakeClient }

func (r fakeRules) List(context.Context) ([]api.RuleInfo, error) {
	return r.f.rules, r.f.record("Rules.List", nil, nil)
}
func (r fakeRules) Get(_ context.Context, name string) (api.RuleInfo, error) {
	if err := r.f.record("Rules.Get", []any{name}, nil); err != nil {
		return api.RuleInfo{}, err
	}
	for _, ri := range r.f.rules {
		if ri.Rule.Name == name {
			return ri, nil
		}
	}
	return api.RuleInfo{}, &api.Error{Status: 404, Body: api.ErrorBody{Error: fmt.Sprintf("rule %q: not found", name)}}
}
func (r fakeRules) Add(_ context.Context, rule policy.Rule, opts ...api.ChangeOption) error {
	return r.f.record("Rules.Add", []any{rule}, opts)
}
func (r fakeRules) AddFields(_ context.Context, name string, fl api.Fields, opts ...api.ChangeOption) error {
	return r.f.record("Rules.AddFields", []any{name, fl}, opts)
}
func (r fakeRules) Set(_ context.Context, name string, fl api.Fields, opts ...api.ChangeOption) error {
	return r.f.record("Rules.Set", []any{name, fl}, opts)
}
func (r fakeRules) Remove(_ context.Context, name string, opts ...api.ChangeOption) error {
	return r.f.record("Rules.Remove", []any{name}, opts)
}

type fakeRuns struct{ f *fakeClient }

func (r fakeRuns) List(context.Context) ([]api.Run, error) {
	return r.f.runs, r.f.record("Runs.List", nil, nil)
}
func (r fakeRuns) Start(_ context.Context, req api.RunRequest, opts ...api.ChangeOption) (api.Run, error) {
	return api.Run{ID: "run-1", PID: req.PID}, r.f.record("Runs.Start", []any{req.Class}, opts)
}
func (r fakeRuns) End(_ context.Context, id string, opts ...api.ChangeOption) error {
	return r.f.record("Runs.End", []any{id}, opts)
}

type fakeStats struct{ f *fakeClient }

func (s fakeStats) Get(_ context.Context, kind string) (api.Stats, error) {
	return s.f.stats[kind], s.f.record("Stats.Get", []any{kind}, nil)
}
func (s fakeStats) Rules(ctx context.Context) (api.Stats, error) { return s.Get(ctx, api.StatRules) }
func (s fakeStats) Classes(ctx context.Context) (api.Stats, error) {
	return s.Get(ctx, api.StatClasses)
}
func (s fakeStats) Apps(ctx context.Context) (api.Stats, error)  { return s.Get(ctx, api.StatApps) }
func (s fakeStats) Flows(ctx context.Context) (api.Stats, error) { return s.Get(ctx, api.StatFlows) }

func (f *fakeClient) Events() api.EventsAPI { return fakeEvents{f} }

type fakeEvents struct{ f *fakeClient }

func (e fakeEvents) Follow(_ context.Context, o api.EventsOptions, fn func(api.Event) error) error {
	if err := e.f.record("Events.Follow", []any{o}, nil); err != nil {
		return err
	}
	for _, ev := range e.f.events {
		if err := fn(ev); err != nil {
			return err
		}
	}
	return nil
}

func (f *fakeClient) Reservations() api.ReservationsAPI { return fakeResv{f} }

type fakeResv struct{ f *fakeClient }

func (r fakeResv) List(context.Context) ([]api.ReservationInfo, error) {
	return r.f.resvs, r.f.record("Reservations.List", nil, nil)
}
func (r fakeResv) Get(_ context.Context, name string) (api.ReservationInfo, error) {
	if err := r.f.record("Reservations.Get", []any{name}, nil); err != nil {
		return api.ReservationInfo{}, err
	}
	for _, ri := range r.f.resvs {
		if ri.Reservation.Name == name {
			return ri, nil
		}
	}
	return api.ReservationInfo{}, &api.Error{Status: 404, Body: api.ErrorBody{Error: fmt.Sprintf("reservation %q: not found", name)}}
}
func (r fakeResv) Add(_ context.Context, resv policy.Reservation, opts ...api.ChangeOption) (api.ReservationInfo, error) {
	return api.ReservationInfo{Reservation: resv}, r.f.record("Reservations.Add", []any{resv}, opts)
}
func (r fakeResv) Set(_ context.Context, name string, fl api.Fields, opts ...api.ChangeOption) (api.ReservationInfo, error) {
	return api.ReservationInfo{}, r.f.record("Reservations.Set", []any{name, fl}, opts)
}
func (r fakeResv) Remove(_ context.Context, name string, opts ...api.ChangeOption) error {
	return r.f.record("Reservations.Remove", []any{name}, opts)
}
