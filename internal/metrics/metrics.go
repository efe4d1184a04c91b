// Package metrics is hostqosd's Prometheus front door: an opt-in HTTP
// listener (config metrics_listen, flag --metrics-listen) serving the
// engine's counters in the Prometheus / OpenMetrics text format through
// the official client library. Every scrape reads the engine afresh; the
// package keeps no state and holds no engine lock while it writes.
//
// Series are bounded: rules, classes and links by the policy, apps by the
// engine's max_apps (the others are app "other" of their user). A
// container is one app (labels container, runtime and image; empty for a
// process) and counts against max_apps like any app.
package metrics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"regexp"
	"runtime"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/engine"
	"github.com/hostqos/hostqos/internal/history"
)

// Source is what the collector reads: the engine (and the history store's
// own counters, when there is one).
type Source struct {
	Engine  *engine.Engine
	History *history.Store // nil: none
	Version string
}

// every reader of the engine sees what a privileged caller sees.
var admin = engine.Caller{Privileged: true}

var (
	buildInfo = prometheus.NewDesc("hostqos_build_info", "hostqosd's version and Go version (always 1).", []string{"version", "goversion"}, nil)

	ruleBytes   = prometheus.NewDesc("hostqos_rule_bytes_total", "Bytes of the rule's packets (L2 frames), by direction.", []string{"rule", "class", "direction"}, nil)
	rulePackets = prometheus.NewDesc("hostqos_rule_packets_total", "Packets of the rule, by direction.", []string{"rule", "class", "direction"}, nil)
	ruleDrops   = prometheus.NewDesc("hostqos_rule_drops_total", "Packets of the rule dropped by hostqos (drop rules, policers), by direction.", []string{"rule", "class", "direction"}, nil)
	rulePolice  = prometheus.NewDesc("hostqos_rule_police_rate_bits_per_second", "The rule's policer rate.", []string{"rule"}, nil)
	ruleBurst   = prometheus.NewDesc("hostqos_rule_police_burst_bytes", "The rule's policer bucket depth.", []string{"rule"}, nil)
	ruleMin     = prometheus.NewDesc("hostqos_rule_minbw_bits_per_second", "The rule's guaranteed rate (its reservation on each shaped link).", []string{"rule"}, nil)
	ruleMax     = prometheus.NewDesc("hostqos_rule_maxbw_bits_per_second", "The rule's rate limit.", []string{"rule"}, nil)

	classBytes   = prometheus.NewDesc("hostqos_class_bytes_total", "Bytes the class's HTB subtree sent on the link.", []string{"link", "class", "direction"}, nil)
	classPackets = prometheus.NewDesc("hostqos_class_packets_total", "Packets the class's HTB subtree sent on the link.", []string{"link", "class", "direction"}, nil)
	classDrops   = prometheus.NewDesc("hostqos_class_drops_total", "Packets the class's HTB subtree dropped on the link.", []string{"link", "class", "direction"}, nil)

	linkBytes      = prometheus.NewDesc("hostqos_link_bytes_total", "Bytes of the managed link's interface, by direction.", []string{"link", "direction"}, nil)
	linkPackets    = prometheus.NewDesc("hostqos_link_packets_total", "Packets of the managed link's interface, by direction.", []string{"link", "direction"}, nil)
	linkDrops      = prometheus.NewDesc("hostqos_link_drops_total", "Packets the managed link's interface dropped, by direction.", []string{"link", "direction"}, nil)
	linkReserved   = prometheus.NewDesc("hostqos_link_reserved_bits_per_second", "Guaranteed rates admitted on the link.", []string{"link"}, nil)
	linkReservable = prometheus.NewDesc("hostqos_link_reservable_bits_per_second", "The link's capacity for guarantees.", []string{"link"}, nil)
	linkAutoRate   = prometheus.NewDesc("hostqos_link_rate_bits_per_second", "The automatic rate in force of a link whose rate is auto, by direction.", []string{"link", "direction"}, nil)
	linkAutoEst    = prometheus.NewDesc("hostqos_link_capacity_estimate_bits_per_second", "The capacity estimate of a link whose rate is auto (0: none yet), by direction.", []string{"link", "direction"}, nil)
	linkAutoChg    = prometheus.NewDesc("hostqos_link_rate_changes_total", "Changes of the automatic rate of a link whose rate is auto, by direction.", []string{"link", "direction"}, nil)

	appLabels  = []string{"app", "uid", "container", "runtime", "image", "direction"}
	appBytes   = prometheus.NewDesc("hostqos_app_bytes_total", "Bytes of the app (executable and user, or a container) since hostqosd started, by direction.", appLabels, nil)
	appPackets = prometheus.NewDesc("hostqos_app_packets_total", "Packets of the app since hostqosd started, by direction.", appLabels, nil)
	appDrops   = prometheus.NewDesc("hostqos_app_drops_total", "Packets of the app dropped by hostqos since hostqosd started, by direction.", appLabels, nil)

	dpPackets     = prometheus.NewDesc("hostqos_datapath_packets_total", "Packets the datapath saw.", nil, nil)
	dpClassified  = prometheus.NewDesc("hostqos_datapath_classified_total", "Packets that matched a rule.", nil, nil)
	dpParseErrors = prometheus.NewDesc("hostqos_datapath_parse_errors_total", "Packets the datapath could not parse (passed unclassified).", nil, nil)
	dpInsertFail  = prometheus.NewDesc("hostqos_datapath_flow_insert_failures_total", "Flows the datapath could not add to its flow table.", nil, nil)
	dpNoIdentity  = prometheus.NewDesc("hostqos_datapath_no_identity_total", "Packets of local sockets without an app identity.", nil, nil)
	dpLoaded      = prometheus.NewDesc("hostqos_datapath_loaded", "1 when the datapath is loaded.", nil, nil)

	histDropped = prometheus.NewDesc("hostqos_history_dropped_total", "Samples and events the history store's full queue refused.", nil, nil)
	histErrors  = prometheus.NewDesc("hostqos_history_write_errors_total", "History write transactions that failed.", nil, nil)
	histRefused = prometheus.NewDesc("hostqos_history_refused_total", "Samples and events history did not record for want of room (its budget, free space, a full disk).", nil, nil)
	histRecord  = prometheus.NewDesc("hostqos_history_recording", "1 while history records, 0 while it is out of room.", nil, nil)
	histEvents  = prometheus.NewDesc("hostqos_history_events", "Events held in the history database.", nil, nil)

	evSuppressed = prometheus.NewDesc("hostqos_events_suppressed_total", "Events over a user's or remote host's limits, counted in summaries instead of published one by one.", nil, nil)
)

// collector reads the engine at every scrape.
type collector struct{ src Source }

// Describe sends nothing: the collector is unchecked (its series come and
// go with the policy).
func (c collector) Describe(chan<- *prometheus.Desc) {}

func counter(ch chan<- prometheus.Metric, d *prometheus.Desc, v uint64, labels ...string) {
	ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
}

func gauge(ch chan<- prometheus.Metric, d *prometheus.Desc, v float64, labels ...string) {
	ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
}

// directions emits a counter for "in" and "out".
func directions(ch chan<- prometheus.Metric, d *prometheus.Desc, in, out uint64, labels ...string) {
	counter(ch, d, in, append(labels, "in")...)
	counter(ch, d, out, append(labels, "out")...)
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	e := c.src.Engine
	gauge(ch, buildInfo, 1, c.src.Version, runtime.Version())

	var st api.Status
	e.Status(admin, &st)
	loaded := 0.0
	if st.Datapath.Loaded {
		loaded = 1
	}
	gauge(ch, dpLoaded, loaded)
	counter(ch, dpPackets, st.Datapath.Packets)
	counter(ch, dpClassified, st.Datapath.Classified)
	counter(ch, dpParseErrors, st.Datapath.ParseErrors)
	counter(ch, dpInsertFail, st.Datapath.FlowInsertFail)
	counter(ch, dpNoIdentity, st.Datapath.NoIdentity)

	var rs api.Stats
	if e.Stats(admin, "rules", &rs) == nil {
		for _, r := range rs.Rules {
			directions(ch, ruleBytes, r.In.Bytes, r.Bytes, r.Rule, r.Class)
			directions(ch, rulePackets, r.In.Packets, r.Packets, r.Rule, r.Class)
			directions(ch, ruleDrops, r.In.Drops, r.Drops, r.Rule, r.Class)
		}
	}
	if infos, err := e.Rules(admin, ""); err == nil {
		for _, ri := range infos {
			r := ri.Rule
			if r.Police > 0 {
				gauge(ch, rulePolice, float64(r.Police), r.Name)
				gauge(ch, ruleBurst, float64(r.PoliceBurst()), r.Name)
			}
			if r.MinBW > 0 {
				gauge(ch, ruleMin, float64(r.MinBW), r.Name)
			}
			if r.MaxBW > 0 {
				gauge(ch, ruleMax, float64(r.MaxBW), r.Name)
			}
		}
	}
	var cs api.Stats
	if e.Stats(admin, "classes", &cs) == nil {
		for _, cl := range cs.Classes {
			directions(ch, classBytes, 0, cl.Bytes, cl.Link, cl.Class)
			directions(ch, classPackets, 0, cl.Packets, cl.Link, cl.Class)
			directions(ch, classDrops, 0, cl.Drops, cl.Link, cl.Class)
		}
	}
	for _, l := range e.LinkTotals() {
		directions(ch, linkBytes, l.BytesIn, l.BytesOut, l.Name)
		directions(ch, linkPackets, l.PacketsIn, l.PacketsOut, l.Name)
		directions(ch, linkDrops, l.DropsIn, l.DropsOut, l.Name)
		gauge(ch, linkReserved, float64(l.Reserved), l.Name)
		gauge(ch, linkReservable, float64(l.Reservable), l.Name)
		for dir, a := range l.Auto {
			gauge(ch, linkAutoRate, float64(a.InForce), l.Name, dir)
			gauge(ch, linkAutoEst, float64(a.Estimate), l.Name, dir)
			counter(ch, linkAutoChg, a.Changes, l.Name, dir)
		}
	}
	for _, a := range e.AppTotals() {
		// A container: app runtime/name, no uid (its processes' users
		// are not its own); a process: container, runtime and image
		// empty (absent to PromQL).
		app, uid := a.Name, strconv.FormatUint(uint64(a.UID), 10)
		if a.Container != "" {
			app, uid = a.Runtime+"/"+a.Container, ""
		}
		l := []string{app, uid, a.Container, a.Runtime, a.Image}
		directions(ch, appBytes, a.BytesIn, a.BytesOut, l...)
		directions(ch, appPackets, a.PacketsIn, a.PacketsOut, l...)
		directions(ch, appDrops, a.DropsIn, a.DropsOut, l...)
	}
	if h := c.src.History; h != nil {
		s := h.Stats()
		counter(ch, histDropped, s.Dropped)
		counter(ch, histErrors, s.WriteErrors)
		counter(ch, histRefused, s.Refused)
		rec := 0.0
		if s.Recording {
			rec = 1
		}
		gauge(ch, histRecord, rec)
		gauge(ch, histEvents, float64(s.Events))
	}
	counter(ch, evSuppressed, e.EventLimitStats().Suppressed)
}

// Handler serves the metrics of src at any path, with the daemon's own
// memory and CPU: the Go runtime's (go_*, among them the live heap,
// go_gc_heap_live_bytes) and the process's (process_*: resident memory,
// CPU time, descriptors), a fixed set of series.
func Handler(src Source) http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collector{src},
		collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(
			collectors.GoRuntimeMetricsRule{Matcher: regexp.MustCompile(`^/gc/heap/live:bytes$`)})),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		// A scrape that cannot be answered whole fails (Prometheus
		// marks the target down) rather than serving part of it.
		ErrorHandling:       promhttp.HTTPErrorOnError,
		MaxRequestsInFlight: 4,
		Timeout:             10 * time.Second,
		EnableOpenMetrics:   true,
	})
}

// Server is a running metrics listener.
type Server struct {
	srv  *http.Server
	addr net.Addr
}

// Listen starts serving src's metrics on addr (host:port) at /metrics.
func Listen(addr string, src Source, log *slog.Logger) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics listener: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", Handler(src))
	mux.HandleFunc("GET /", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprintln(w, "hostqosd metrics: /metrics")
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
		WriteTimeout: 30 * time.Second, IdleTimeout: time.Minute, MaxHeaderBytes: 16 << 10}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics listener stopped", "err", err)
		}
	}()
	return &Server{srv: srv, addr: ln.Addr()}, nil
}

// Addr is the address the listener is bound to.
func (s *Server) Addr() net.Addr { return s.addr }

// Close stops the listener.
func (s *Server) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return s.srv.Shutdown(ctx)
}
