package daemon

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/engine"
	"github.com/hostqos/hostqos/internal/rsvp"
	"github.com/hostqos/hostqos/internal/rsvpfront"
	"github.com/hostqos/hostqos/internal/shaper"
)

// RSVP in the daemon: with [rsvp] enabled = true the daemon runs an RSVP
// agent (internal/rsvp) on raw IP protocol 46 sockets; messages are
// accepted only when they arrive on a managed link (others are dropped and
// counted), malformed ones are counted and dropped. The RSVP front door
// (internal/rsvpfront) keeps the API's sessions and installs what
// signalling asks for as the engine's reservation objects (docs/rsvp.md).

// rsvpAgent is the daemon's running agent.
type rsvpAgent struct {
	front *rsvpfront.Front
	agent *rsvp.Agent
	stop  context.CancelFunc
	done  chan struct{}
	// managed are the ifindexes of managed links, addrs this host's
	// addresses: both refreshed every second off the message path.
	managed atomic.Pointer[map[int]bool]
	addrMu  sync.Mutex
	addrs   []netip.Addr
}

// startRSVP starts the agent when the config enables it.
func (d *Daemon) startRSVP() error {
	cfg := d.eng.RSVPSettings()
	if !cfg.Enabled {
		return nil
	}
	ra := &rsvpAgent{done: make(chan struct{})}
	ra.refresh(d)
	refresh := cfg.RefreshPeriod()
	log := d.cfg.Logger.With("component", "rsvp")
	ra.front = rsvpfront.New(d.eng, rsvpfront.Options{
		Router: cfg.Router, Refresh: refresh, MaxSessions: cfg.SessionLimit(), StatePath: filepath.Join(d.cfg.StateDir, "rsvp.json"),
		Local: rsvp.LocalFunc(ra.localAddrs), Route: shaper.RouteIfindex,
		MaxPathsPerHop: cfg.PathsPerHop(), MaxPathsPerSource: cfg.PathsPerSource(), Log: log,
		Counters: func() api.RSVPCounters {
			a := ra.agent
			return api.RSVPCounters{Received: a.Received.Load(), Malformed: a.Malformed.Load(), Foreign: a.Foreign.Load(), SendFail: a.SendFail.Load()}
		},
	})
	v4, err := rsvp.Listen(false)
	if err != nil {
		return fmt.Errorf("start RSVP: %w", err)
	}
	v6, err := rsvp.Listen(true)
	if err != nil {
		d.log.Warn("RSVP over IPv6 unavailable", "err", err)
		v6 = nil
	}
	if cfg.Router {
		if err := v4.InterceptRouterAlert(); err != nil {
			v4.Close()
			if v6 != nil {
				v6.Close()
			}
			return fmt.Errorf("start RSVP router: intercept Router Alert packets: %w", err)
		}
		if v6 != nil {
			if err := v6.InterceptRouterAlert(); err != nil {
				d.log.Warn("RSVP router over IPv6 unavailable: cannot intercept IPv6 Router Alert packets", "err", err)
				v6.Close()
				v6 = nil
			}
		}
	}
	period := min(max(refresh/10, 20*time.Millisecond), time.Second)
	ra.agent = &rsvp.Agent{Node: ra.front.Node, V4: v4, V6: v6, Log: log, Period: period,
		Managed: func(ifindex int) bool { return (*ra.managed.Load())[ifindex] }}
	if v6 == nil {
		ra.agent.V6 = nil
	}
	ra.front.SetSend(ra.agent.Send)
	if err := ra.front.Restore(); err != nil {
		d.log.Error("RSVP sessions of the last run not all restored", "err", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ra.stop = cancel
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { defer wg.Done(); ra.agent.Run(ctx) }()
	go func() { defer wg.Done(); ra.front.Run(ctx) }()
	go func() {
		defer wg.Done()
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				ra.refresh(d)
			}
		}
	}()
	go func() { wg.Wait(); close(ra.done) }()
	d.rsvp = ra
	d.log.Info("RSVP agent running", "router", cfg.Router, "refresh", refresh, "lifetime", rsvp.Lifetime(refresh), "ipv6", v6 != nil,
		"max_peer_refresh", ra.front.Node.MaxPeerRefresh(), "max_paths_per_hop", cfg.PathsPerHop(), "max_paths_per_source", cfg.PathsPerSource())
	return nil
}

// stopRSVP stops the agent (the installed reservations stay until the
// daemon stops; peers time the state out).
func (d *Daemon) stopRSVP() {
	if d.rsvp == nil {
		return
	}
	d.rsvp.stop()
	<-d.rsvp.done
}

// refresh reads the managed links' interfaces and this host's addresses.
func (ra *rsvpAgent) refresh(d *Daemon) {
	m := map[int]bool{}
	for _, i := range d.eng.ManagedIfindexes() {
		m[i] = true
	}
	ra.managed.Store(&m)
	var addrs []netip.Addr
	if as, err := net.InterfaceAddrs(); err == nil {
		for _, a := range as {
			if n, ok := a.(*net.IPNet); ok {
				if ip, ok := netip.AddrFromSlice(n.IP); ok {
					addrs = append(addrs, ip.Unmap())
				}
			}
		}
	}
	ra.addrMu.Lock()
	ra.addrs = addrs
	ra.addrMu.Unlock()
}

func (ra *rsvpAgent) localAddrs() []netip.Addr {
	ra.addrMu.Lock()
	defer ra.addrMu.Unlock()
	return ra.addrs
}

// The RSVP routes: thin. Without the agent they answer that RSVP is off.

func (d *Daemon) rsvpFront(w http.ResponseWriter) *rsvpfront.Front {
	if d.rsvp == nil {
		writeErr(w, &engine.BadRequestError{Err: fmt.Errorf("RSVP is not running on this host: %s", d.rsvpOff())})
		return nil
	}
	return d.rsvp.front
}

// rsvpOff says why the RSVP agent is not running, and what starts it.
func (d *Daemon) rsvpOff() string {
	if d.eng.RSVPSettings().Enabled {
		return fmt.Sprintf("[rsvp] enabled = true in %s was read by a reload after hostqosd started with it off; RSVP starts when hostqosd restarts", d.cfg.ConfigPath)
	}
	return fmt.Sprintf("%s does not set enabled = true in its [rsvp] section; set it and restart hostqosd", d.cfg.ConfigPath)
}

// rsvpRestartNeeded are the [rsvp] settings changed since the start.
func (d *Daemon) rsvpRestartNeeded() []string {
	var out []string
	for _, c := range d.restartNeeded() {
		if strings.HasPrefix(c, "[rsvp] ") {
			out = append(out, c)
		}
	}
	return out
}

func (d *Daemon) handleRSVP(w http.ResponseWriter, r *http.Request) {
	q, err := api.ParseRSVPListQuery(r.URL.Query())
	if err != nil {
		writeErr(w, &badRequest{Err: err})
		return
	}
	if d.rsvp == nil {
		writeJSON(w, http.StatusOK, api.RSVPStatus{NotRunning: d.rsvpOff(), RestartNeeded: d.rsvpRestartNeeded(),
			Sessions: []api.RSVPSession{}, Paths: []api.RSVPPath{}, Resvs: []api.RSVPResv{}})
		return
	}
	st := d.rsvp.front.Status(*callerOf(r), q)
	st.RestartNeeded = d.rsvpRestartNeeded()
	writeJSON(w, http.StatusOK, st)
}

func (d *Daemon) handleRSVPSession(w http.ResponseWriter, r *http.Request) {
	f := d.rsvpFront(w)
	if f == nil {
		return
	}
	s, err := f.Session(*callerOf(r), r.PathValue("name"))
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, s)
}

func (d *Daemon) handleAddRSVPSession(w http.ResponseWriter, r *http.Request) {
	f := d.rsvpFront(w)
	if f == nil {
		return
	}
	var req api.RSVPSessionRequest
	if err := decode(r, &req); err != nil {
		writeErr(w, err)
		return
	}
	s, err := f.AddSession(*callerOf(r), req)
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, s)
}

func (d *Daemon) handleRSVPSender(w http.ResponseWriter, r *http.Request) {
	f := d.rsvpFront(w)
	if f == nil {
		return
	}
	var req api.RSVPSenderRequest
	if err := decode(r, &req); err != nil {
		writeErr(w, err)
		return
	}
	s, err := f.Sender(*callerOf(r), r.PathValue("name"), req)
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, s)
}

func (d *Daemon) handleRSVPReserve(w http.ResponseWriter, r *http.Request) {
	f := d.rsvpFront(w)
	if f == nil {
		return
	}
	var req api.RSVPReserveRequest
	if err := decode(r, &req); err != nil {
		writeErr(w, err)
		return
	}
	s, err := f.Reserve(*callerOf(r), r.PathValue("name"), req)
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, s)
}

func (d *Daemon) handleRemoveRSVPSession(w http.ResponseWriter, r *http.Request) {
	f := d.rsvpFront(w)
	if f == nil {
		return
	}
	name := r.PathValue("name")
	if err := f.Remove(*callerOf(r), name); err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"removed": name})
}

// rsvpRoutes registers the RSVP routes.
func (d *Daemon) rsvpRoutes(mux *http.ServeMux) {
	// A listing sorts the signalled states (up to 65,536 of each kind)
	// and holds a page while its client reads, or does not: a large
	// answer, bounded with the others (large.go).
	mux.HandleFunc(api.RouteRSVP, d.large.bound(d.handleRSVP))
	mux.HandleFunc(api.RouteRSVPSession, d.large.bound(d.handleRSVPSession))
	mux.HandleFunc(api.RouteAddRSVPSession, mutating(d.handleAddRSVPSession))
	mux.HandleFunc(api.RouteRSVPSender, mutating(d.handleRSVPSender))
	mux.HandleFunc(api.RouteRSVPReserve, mutating(d.handleRSVPReserve))
	mux.HandleFunc(api.RouteRemoveRSVPSession, mutating(d.handleRemoveRSVPSession))
}
