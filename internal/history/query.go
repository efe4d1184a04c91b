package history

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/policy"
)

// QueryError is a query the store cannot answer as asked: it names the
// parameter, the value and the fix.
type QueryError struct{ Param, Value, Reason string }

func (e *QueryError) Error() string {
	return fmt.Sprintf("history query: %s = %q: %s", e.Param, e.Value, e.Reason)
}

// maxNameLen bounds the name a query filters by.
const maxNameLen = 4096

// resolution is one stored table: its name, its step and how far back it
// reaches.
type resolution struct {
	table, label string
	step         int64
	keep         time.Duration
}

func (s *Store) resolutions() []resolution {
	return []resolution{
		{"s1", "1s", 1, s.opt.Raw},
		{"m1", "1m", 60, s.opt.Minutes},
		{"h1", "1h", 3600, s.opt.Hours},
	}
}

// normalize fills in the defaults of q and checks it.
func normalize(q *api.HistoryQuery, now time.Time) error {
	switch q.Kind {
	case KindLinks, KindClasses, KindRules, KindApps, api.HistoryFlows:
	default:
		return &QueryError{"kind", q.Kind, "want links, classes, rules, apps or flows"}
	}
	if len(q.Name) > maxNameLen {
		return &QueryError{"name", q.Name[:32] + "…", fmt.Sprintf("longer than %d bytes", maxNameLen)}
	}
	if q.Until.IsZero() {
		q.Until = now
	}
	if q.Since.IsZero() {
		q.Since = q.Until.Add(-time.Hour)
	}
	if !q.Since.Before(q.Until) {
		return &QueryError{"since", q.Since.Format(time.RFC3339), "not before until (" + q.Until.Format(time.RFC3339) + "); give an earlier since"}
	}
	if q.Step < 0 {
		return &QueryError{"step", q.Step.String(), "negative"}
	}
	if q.Limit < 0 {
		return &QueryError{"limit", fmt.Sprint(q.Limit), "negative"}
	}
	return nil
}

// pick chooses the finest stored resolution that still holds since and is
// no finer than the step asked for, and the step: a multiple of the
// resolution's, wide enough for at most api.MaxHistoryPoints points.
func (s *Store) pick(q api.HistoryQuery, now time.Time) (resolution, int64) {
	step := int64((q.Step + time.Second - 1) / time.Second)
	span := int64(q.Until.Sub(q.Since)/time.Second) + 1
	if least := (span + api.MaxHistoryPoints - 1) / api.MaxHistoryPoints; step < least {
		step = least
	}
	rs := s.resolutions()
	r := rs[len(rs)-1]
	for i, c := range rs {
		covers := !q.Since.Before(now.Add(-c.keep))
		if covers && (i == len(rs)-1 || step < rs[i+1].step) {
			r = c
			break
		}
	}
	if step < r.step {
		step = r.step
	}
	step = (step + r.step - 1) / r.step * r.step
	return r, step
}

// Query answers a history query of links, classes, rules or apps (see
// Flows for flows). owner ≥ 0 limits the answer to what that ordinary
// user may see (series of everyone and their own); -1 is everything.
func (s *Store) Query(ctx context.Context, q api.HistoryQuery, owner int64) (api.History, error) {
	now := time.Now()
	if err := normalize(&q, now); err != nil {
		return api.History{}, err
	}
	if q.Kind == api.HistoryFlows {
		return s.Flows(ctx, q, owner)
	}
	r, step := s.pick(q, now)
	out := api.History{Kind: q.Kind, Since: q.Since, Until: q.Until, Step: float64(step), Resolution: r.label}
	limit := q.Limit
	if limit == 0 || limit > api.MaxHistorySeries {
		limit = api.MaxHistorySeries
	}
	// The range covers whole stored rows: a row at t holds [t, t+res).
	from := q.Since.Unix() - q.Since.Unix()%r.step
	to := q.Until.Unix()
	// Each point's busiest second each way: the largest per-second row
	// (s1), or the largest busiest second of its roll-up rows (m1, h1;
	// rows of an older store know none: their mean).
	peaks := `MAX(d.bi), MAX(d.bo)`
	if r.table != "s1" {
		peaks = fmt.Sprintf(`MAX(CASE WHEN d.pbi > 0 THEN d.pbi ELSE d.bi / %[1]d END), MAX(CASE WHEN d.pbo > 0 THEN d.pbo ELSE d.bo / %[1]d END)`, r.step)
	}
	args := []any{step, step, q.Kind, owner, owner}
	where := `s.kind = ? AND (? < 0 OR s.owner < 0 OR s.owner = ?)`
	if q.Name != "" {
		where += ` AND s.name = ?`
		args = append(args, q.Name)
	}
	args = append(args, from, to)
	rows, err := s.db.QueryContext(ctx, `SELECT s.name, s.owner, s.image, (d.t / ?) * ? AS b,
		SUM(d.bi), SUM(d.bo), SUM(d.pi), SUM(d.po), SUM(d.di), SUM(d.do), `+peaks+`
		FROM `+r.table+` d JOIN series s ON s.id = d.series
		WHERE `+where+` AND d.t >= ? AND d.t <= ?
		GROUP BY s.id, b ORDER BY s.id, b`, args...)
	if err != nil {
		return out, fmt.Errorf("query history: %w", err)
	}
	defer rows.Close()
	type key struct {
		name  string
		owner int64
	}
	idx := map[key]int{}
	points := 0
	for rows.Next() {
		var k key
		var image string
		var b, peakIn, peakOut int64
		var f [6]int64
		if err := rows.Scan(&k.name, &k.owner, &image, &b, &f[0], &f[1], &f[2], &f[3], &f[4], &f[5], &peakIn, &peakOut); err != nil {
			return out, fmt.Errorf("query history: %w", err)
		}
		i, ok := idx[k]
		if !ok {
			i = len(out.Series)
			idx[k] = i
			se := api.HistorySeries{Name: k.name}
			if rt, name, ok := ParseContainerApp(k.name); ok && q.Kind == KindApps {
				se.Container, se.Runtime, se.Image = name, rt, image
			} else if q.Kind == KindApps && k.owner >= 0 {
				u := uint32(k.owner)
				se.UID = &u
			}
			out.Series = append(out.Series, se)
		}
		c := apiCounters(f)
		se := &out.Series[i]
		if points < api.MaxHistoryTotalPoints {
			se.Points = append(se.Points, api.HistoryPoint{Time: time.Unix(b, 0).UTC(), HistoryCounters: c,
				PeakBytesIn: uint64(peakIn), PeakBytesOut: uint64(peakOut)})
			points++
		} else {
			out.Truncated = true
		}
		addAPI(&se.Total, c)
	}
	if err := rows.Err(); err != nil {
		return out, fmt.Errorf("query history: %w", err)
	}
	sort.SliceStable(out.Series, func(i, j int) bool {
		a, b := out.Series[i].Total, out.Series[j].Total
		return a.BytesIn+a.BytesOut > b.BytesIn+b.BytesOut
	})
	if len(out.Series) > limit {
		out.Series, out.Truncated = out.Series[:limit], true
	}
	return out, nil
}

func apiCounters(f [6]int64) api.HistoryCounters {
	return api.HistoryCounters{BytesIn: uint64(f[0]), BytesOut: uint64(f[1]), PacketsIn: uint64(f[2]),
		PacketsOut: uint64(f[3]), DropsIn: uint64(f[4]), DropsOut: uint64(f[5])}
}

func addAPI(t *api.HistoryCounters, c api.HistoryCounters) {
	t.BytesIn += c.BytesIn
	t.BytesOut += c.BytesOut
	t.PacketsIn += c.PacketsIn
	t.PacketsOut += c.PacketsOut
	t.DropsIn += c.DropsIn
	t.DropsOut += c.DropsOut
}

// Flows answers a query of flow records: those that ended in [Since,
// Until], newest first, at most api.MaxHistoryFlows. A name selects the
// flows whose comm, exe, container (ContainerApp), rule, class or unit it
// is.
func (s *Store) Flows(ctx context.Context, q api.HistoryQuery, owner int64) (api.History, error) {
	if err := normalize(&q, time.Now()); err != nil {
		return api.History{}, err
	}
	out := api.History{Kind: api.HistoryFlows, Since: q.Since, Until: q.Until}
	limit := q.Limit
	if limit == 0 || limit > api.MaxHistoryFlows {
		limit = api.MaxHistoryFlows
	}
	where := `end_ms >= ? AND end_ms <= ? AND (? < 0 OR uid = ?)`
	args := []any{q.Since.UnixMilli(), q.Until.UnixMilli(), owner, owner}
	if q.Name != "" {
		where += ` AND (comm = ? OR exe = ? OR rule = ? OR class = ? OR unit = ? OR container = ?)`
		args = append(args, q.Name, q.Name, q.Name, q.Name, q.Name, q.Name)
	}
	args = append(args, limit+1)
	rows, err := s.db.QueryContext(ctx, `SELECT proto, local, remote, pid, comm, exe, uid, cgroup, unit, rule, class,
		start_ms, end_ms, bi, bo, pi, po, di, do, container, image FROM flows WHERE `+where+` ORDER BY end_ms DESC, id DESC LIMIT ?`, args...)
	if err != nil {
		return out, fmt.Errorf("query flow records: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var r api.FlowRecord
		var start, end int64
		var f [6]int64
		var ctr string
		if err := rows.Scan(&r.Proto, &r.Local, &r.Remote, &r.PID, &r.Comm, &r.Exe, &r.UID, &r.Cgroup, &r.Unit,
			&r.Rule, &r.Class, &start, &end, &f[0], &f[1], &f[2], &f[3], &f[4], &f[5], &ctr, &r.Image); err != nil {
			return out, fmt.Errorf("query flow records: %w", err)
		}
		r.Runtime, r.Container, _ = ParseContainerApp(ctr)
		r.Start, r.End = time.UnixMilli(start).UTC(), time.UnixMilli(end).UTC()
		r.HistoryCounters = apiCounters(f)
		out.Flows = append(out.Flows, r)
	}
	if err := rows.Err(); err != nil {
		return out, fmt.Errorf("query flow records: %w", err)
	}
	if len(out.Flows) > limit {
		out.Flows, out.Truncated = out.Flows[:limit], true
	}
	return out, nil
}

// Events are the recorded events in [since, until], oldest first, at most
// limit (≤ 0: 1000); owner ≥ 0 limits them to what that ordinary user may
// see.
func (s *Store) Events(ctx context.Context, since, until time.Time, owner int64, limit int) ([]Event, error) {
	if limit <= 0 || limit > 1000 {
		limit = 1000
	}
	rows, err := s.db.QueryContext(ctx, `SELECT t_ms, kind, subject, message, owner, fields FROM events
		WHERE t_ms >= ? AND t_ms <= ? AND (? < 0 OR owner < 0 OR owner = ?) ORDER BY t_ms, id LIMIT ?`,
		since.UnixMilli(), until.UnixMilli(), owner, owner, limit)
	if err != nil {
		return nil, fmt.Errorf("query events: %w", err)
	}
	defer rows.Close()
	var out []Event
	for rows.Next() {
		var ev Event
		var t int64
		var fields string
		if err := rows.Scan(&t, &ev.Kind, &ev.Subject, &ev.Message, &ev.Owner, &fields); err != nil {
			return nil, fmt.Errorf("query events: %w", err)
		}
		if fields != "" {
			_ = json.Unmarshal([]byte(fields), &ev.Fields)
		}
		ev.Time = time.UnixMilli(t).UTC()
		out = append(out, ev)
	}
	return out, rows.Err()
}

// Describe says in a line what the store keeps, for logs and status.
func (s *Store) Describe() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: per second for %s, per minute for %s, per hour for %s; flow records and events for %s (at most %d flows, %d events of %s); at most %s, leaving %s free",
		s.path, policy.FormatSpan(s.opt.Raw), policy.FormatSpan(s.opt.Minutes), policy.FormatSpan(s.opt.Hours),
		policy.FormatSpan(s.opt.Flows), s.opt.MaxFlows, s.opt.MaxEvents, policy.Size(s.opt.MaxEventBytes),
		policy.Size(s.opt.MaxBytes), policy.Size(s.opt.MinFree))
	return b.String()
}
