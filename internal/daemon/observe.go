package daemon

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/events"
	"github.com/hostqos/hostqos/internal/history"
	"github.com/hostqos/hostqos/internal/metrics"
	"github.com/hostqos/hostqos/internal/observe"
	"github.com/hostqos/hostqos/internal/policy"
)

// historyPath is the history database: --history-db, or next to the
// persistent state.
func (d *Daemon) historyPath() string {
	if d.cfg.HistoryPath != "" {
		return d.cfg.HistoryPath
	}
	return filepath.Join(d.cfg.StateDir, "history.db")
}

// settings are the config file's settings with the flags' over them.
func (d *Daemon) settings() policy.Settings {
	s := d.eng.Settings()
	o := d.cfg.Settings
	if o.MetricsListen != "" {
		s.MetricsListen = o.MetricsListen
	}
	if o.MaxApps != 0 {
		s.MaxApps = o.MaxApps
	}
	for _, f := range []struct{ dst, src *string }{
		{&s.HistoryRaw, &o.HistoryRaw}, {&s.HistoryMinutes, &o.HistoryMinutes}, {&s.HistoryHours, &o.HistoryHours},
		{&s.HistoryFlows, &o.HistoryFlows}, {&s.FlowIdle, &o.FlowIdle},
		{&s.HistoryMaxEventBytes, &o.HistoryMaxEventBytes}, {&s.HistoryMaxBytes, &o.HistoryMaxBytes}, {&s.HistoryMinFree, &o.HistoryMinFree},
	} {
		if *f.src != "" {
			*f.dst = *f.src
		}
	}
	for _, f := range []struct{ dst, src *int }{
		{&s.HistoryMaxFlows, &o.HistoryMaxFlows}, {&s.HistoryMaxEvents, &o.HistoryMaxEvents},
		{&s.EventRate, &o.EventRate}, {&s.EventBurst, &o.EventBurst},
	} {
		if *f.src != 0 {
			*f.dst = *f.src
		}
	}
	return s
}

// startObservability opens the history store (a failure is logged: the
// daemon runs on without history) and starts the metrics listener when
// one is configured (a failure is an error).
func (d *Daemon) startObservability() error {
	s := d.settings()
	rate, burst := s.Events()
	d.eng.SetEventLimits(events.Limits{Rate: rate, Burst: burst})
	ho := observe.HistoryOptions{FlowIdle: s.Span("flow_idle"), MaxApps: s.Apps()}
	var st *history.Store
	if !d.cfg.NoHistory {
		var err error
		if err = os.MkdirAll(filepath.Dir(d.historyPath()), 0o755); err == nil {
			st, err = history.Open(d.historyPath(), history.Options{
				Raw: s.Span("history_raw"), Minutes: s.Span("history_minutes"), Hours: s.Span("history_hours"),
				Flows: s.Span("history_flows"), MaxFlows: s.MaxFlowRecords(),
				MaxEvents: s.MaxEventRecords(), MaxEventBytes: s.Bytes("history_max_event_bytes"),
				MaxBytes: s.Bytes("history_max_bytes"), MinFree: s.Bytes("history_min_free"),
				Logger: d.cfg.Logger.With("component", "history"),
			})
		}
		if err != nil {
			d.log.Error("history store not opened; running without history", "err", err)
			st = nil
		} else {
			d.log.Info("history", "store", st.Describe(), "flow_idle", ho.FlowIdle, "max_apps", ho.MaxApps)
		}
	}
	d.hist = st
	if st != nil || s.MetricsListen != "" {
		// Without either, nothing reads the flows every second.
		d.eng.SetHistory(st, ho)
	}
	if s.MetricsListen != "" {
		m, err := metrics.Listen(s.MetricsListen, metrics.Source{Engine: d.eng, History: st, Version: Version}, d.log)
		if err != nil {
			return err
		}
		d.metrics = m
		d.log.Info("metrics listener", "addr", m.Addr().String())
	}
	return nil
}

// stopObservability closes the metrics listener and the history store.
func (d *Daemon) stopObservability() {
	d.eng.FlushEvents(true) // the counts of held events, before history closes
	if d.metrics != nil {
		_ = d.metrics.Close()
		d.metrics = nil
	}
	if d.hist != nil {
		if err := d.hist.Close(); err != nil {
			d.log.Warn("close history store", "err", err)
		}
		d.hist = nil
	}
}

// maxUserHistoryAnswers bounds the history queries of ordinary users under
// way at once (each reads the database); historyTimeout bounds any one.
const (
	maxUserHistoryAnswers = 4
	historyTimeout        = 10 * time.Second
)

// handleHistory answers GET /v1/history/{kind}.
func (d *Daemon) handleHistory() http.HandlerFunc {
	places := make(chan struct{}, maxUserHistoryAnswers)
	return func(w http.ResponseWriter, r *http.Request) {
		who := callerOf(r)
		q, err := api.ParseHistoryQuery(r.PathValue("kind"), r.URL.Query())
		if err != nil {
			writeErr(w, &badRequest{Err: err})
			return
		}
		if !who.Privileged {
			select {
			case places <- struct{}{}:
				defer func() { <-places }()
			case <-time.After(largeAnswerWait):
				writeJSON(w, http.StatusServiceUnavailable, api.ErrorBody{Error: fmt.Sprintf(
					"busy: %d history answers to ordinary users are under way (the limit); try again", maxUserHistoryAnswers)})
				return
			case <-r.Context().Done():
				return
			}
		}
		ctx, cancel := context.WithTimeout(r.Context(), historyTimeout)
		defer cancel()
		h, err := d.eng.History(ctx, *who, q)
		if err != nil {
			writeErr(w, err)
			return
		}
		writeJSON(w, http.StatusOK, h)
	}
}

// handleExplain answers GET /v1/explain: why a flow or an app gets what
// it gets. It walks the flow table and reads /proc: an ordinary user's
// request takes a place of the large answers (routes).
func (d *Daemon) handleExplain(w http.ResponseWriter, r *http.Request) {
	q, err := api.ParseExplainQuery(r.URL.Query())
	if err != nil {
		writeErr(w, &badRequest{Err: err})
		return
	}
	x, err := d.eng.Explain(r.Context(), *callerOf(r), q)
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, x)
}
