package daemon

import (
	"context"
	"net/netip"
	"slices"
	"time"

	"github.com/hostqos/hostqos/internal/autorate"
	"github.com/hostqos/hostqos/internal/engine"
	"github.com/hostqos/hostqos/internal/shaper"
)

// The link-rate estimator loop (docs/autorate.md): every autorateTick it
// reads, for each link with an automatic rate, the signals of its
// direction(s) — from the established TCP connections through the link
// (TCP_INFO through sock_diag, one dump for all links): round trips over
// their minimum (the sender's for egress, the receiver's for ingress),
// delivery rates and bytes received; the link's bytes sent; whether
// hostqos's own queue on it holds packets — feeds them to the direction's
// estimator and hands a changed rate to the engine.

const (
	autorateTick = 200 * time.Millisecond
	// maxTCPPaths bounds the connections read per tick, maxRoutes the
	// route cache (cleared when full and every routeCacheTTL).
	maxTCPPaths   = 20000
	maxRoutes     = 4096
	routeCacheTTL = 30 * time.Second
	// tcpFrameShare turns TCP payload rates into frame rates (1448 of a
	// 1514-byte frame).
	tcpFrameShare = 1514.0 / 1448.0
	// saturatedDelay: hostqos's queue on a link holding more than this
	// at the rate in force means the rate held the link's flows back (a
	// GSO burst or two holds less); less is taken off the round trips.
	saturatedDelay = 5 * time.Millisecond
)

// autorateDir is the estimator state of one direction of one link.
type autorateDir struct {
	est     *autorate.Estimator
	ifindex int
	tx      uint64
	at      time.Time
}

// connState is what the last tick saw of one connection.
type connState struct {
	acked, received uint64
	minRcvRTT       time.Duration
}

// dirSignals are one tick's signals of one direction of one link.
type dirSignals struct {
	delays    []time.Duration
	delivered float64 // bits/s of frames
}

type autorateLoop struct {
	dirs   map[string]*[2]*autorateDir
	conns  map[uint64]connState
	routes map[netip.Addr]int
	routed time.Time
	last   time.Time
}

func (d *Daemon) autorateLoop(ctx context.Context) {
	t := time.NewTicker(autorateTick)
	defer t.Stop()
	s := &autorateLoop{dirs: map[string]*[2]*autorateDir{}, conns: map[uint64]connState{}, routes: map[netip.Addr]int{}}
	for {
		select {
		case <-ctx.Done():
			return
		case <-d.down:
			return
		case now := <-t.C:
			s.tick(d, now)
		}
	}
}

func (s *autorateLoop) tick(d *Daemon, now time.Time) {
	links := d.eng.AutoLinks()
	for name := range s.dirs {
		if !slices.ContainsFunc(links, func(l engine.AutoLink) bool { return l.Name == name }) {
			delete(s.dirs, name)
		}
	}
	if len(links) == 0 {
		clear(s.conns)
		s.last = time.Time{}
		return
	}
	sigs := s.read(d, now)
	for _, l := range links {
		st := s.dirs[l.Name]
		if st == nil {
			st = &[2]*autorateDir{}
			s.dirs[l.Name] = st
		}
		for dir := range 2 {
			if !l.Auto[dir] {
				st[dir] = nil
				continue
			}
			ds := st[dir]
			if ds == nil || ds.ifindex != l.Ifindex {
				est, err := autorate.New(autorate.Params{Min: l.Min[dir], Max: l.Max[dir], Start: l.Rate[dir]})
				if err != nil {
					d.log.Warn("autorate: start estimator", "link", l.Name, "direction", dir, "err", err)
					continue
				}
				ds = &autorateDir{est: est, ifindex: l.Ifindex}
				st[dir] = ds
			}
			ds.est.SetBounds(l.Min[dir], l.Max[dir])
			smp := s.sample(d, ds, l, dir, sigs[[2]int{l.Ifindex, dir}], now)
			dec := ds.est.Step(now, smp)
			d.log.Debug("autorate sample", "link", l.Name, "direction", dir, "rtt_over_min", smp.Delay, "flows", smp.Flows,
				"delivered", smp.Delivered, "sent", smp.Sent, "saturated", smp.Saturated, "rate", dec.Rate, "reason", dec.Reason)
			if dec.Changed || dec.Estimate != 0 {
				if err := d.eng.SetAutoRate(l.Name, dir, dec.Rate, dec.Estimate, dec.Reason); err != nil {
					d.log.Warn("autorate: set rate", "link", l.Name, "direction", dir, "rate", dec.Rate, "err", err)
				}
			}
		}
	}
}

// read dumps the TCP connections and sorts the active ones' signals by
// (ifindex, direction).
func (s *autorateLoop) read(d *Daemon, now time.Time) map[[2]int]*dirSignals {
	paths, err := shaper.TCPPaths(maxTCPPaths)
	if err != nil {
		d.log.Debug("autorate: read TCP connections", "err", err)
	}
	if now.Sub(s.routed) > routeCacheTTL || len(s.routes) > maxRoutes {
		clear(s.routes)
		s.routed = now
	}
	dt := now.Sub(s.last).Seconds()
	s.last = now
	conns := make(map[uint64]connState, len(paths))
	sigs := map[[2]int]*dirSignals{}
	add := func(ifx, dir int) *dirSignals {
		g := sigs[[2]int{ifx, dir}]
		if g == nil {
			g = &dirSignals{}
			sigs[[2]int{ifx, dir}] = g
		}
		return g
	}
	for _, p := range paths {
		prev, seen := s.conns[p.Cookie]
		cs := connState{acked: p.BytesAcked, received: p.BytesReceived, minRcvRTT: prev.minRcvRTT}
		if p.RcvRTT > 0 && (cs.minRcvRTT == 0 || p.RcvRTT < cs.minRcvRTT) {
			cs.minRcvRTT = p.RcvRTT
		}
		conns[p.Cookie] = cs
		if !seen || dt <= 0 {
			continue
		}
		sending := p.BytesAcked > prev.acked && p.MinRTT > 0
		receiving := p.BytesReceived > prev.received && p.RcvRTT > 0
		if !sending && !receiving {
			continue // idle: its round trips are stale
		}
		ifx, ok := s.routes[p.Remote]
		if !ok {
			ifx, _ = shaper.RouteIfindex(p.Remote)
			s.routes[p.Remote] = ifx
		}
		if sending {
			g := add(ifx, engine.AutoEgress)
			g.delays = append(g.delays, p.RTT-p.MinRTT)
			if !p.AppLimited {
				g.delivered += float64(p.DeliveryRate) * 8 * tcpFrameShare
			}
		}
		if receiving {
			g := add(ifx, engine.AutoIngress)
			g.delays = append(g.delays, p.RcvRTT-cs.minRcvRTT)
			g.delivered += float64(p.BytesReceived-prev.received) * 8 / dt * tcpFrameShare
		}
	}
	s.conns = conns
	return sigs
}

// sample is one direction's sample: egress adds the link's bytes sent and
// whether hostqos's queue held packets; ingress has no queue of the
// host's (the budget works through the receive window) and counts what
// its connections received as both sent and delivered.
func (s *autorateLoop) sample(d *Daemon, ds *autorateDir, l engine.AutoLink, dir int, g *dirSignals, now time.Time) autorate.Sample {
	var smp autorate.Sample
	if g != nil && len(g.delays) > 0 {
		slices.Sort(g.delays)
		smp.Flows = len(g.delays)
		smp.Delay = g.delays[len(g.delays)/2]
		smp.Delivered = uint64(g.delivered)
	}
	if dir == engine.AutoIngress {
		smp.Sent = smp.Delivered
		if !ds.at.IsZero() {
			smp.Dt = now.Sub(ds.at)
		}
		ds.at = now
		return smp
	}
	tx, err := shaper.LinkTxBytes(l.Ifindex)
	if err != nil {
		return autorate.Sample{}
	}
	if !ds.at.IsZero() && tx >= ds.tx {
		smp.Dt = now.Sub(ds.at)
		if sec := smp.Dt.Seconds(); sec > 0 {
			smp.Sent = uint64(float64(tx-ds.tx) * 8 / sec)
		}
	}
	ds.tx, ds.at = tx, now
	if queued, err := d.eng.LinkQueued(l.Ifindex); err == nil {
		host := time.Duration(float64(queued) * 8 / float64(max(ds.est.Rate(), 1)) * float64(time.Second))
		smp.Saturated = host > saturatedDelay
		smp.Delay = max(0, smp.Delay-host)
	}
	return smp
}
