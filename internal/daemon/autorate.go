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
// reads the signals of each link with an automatic egress rate — the
// delivery rates of the established TCP connections that send through it
// (TCP_INFO through sock_diag, one dump for all links; their round trips
// are logged), the link's bytes sent, whether hostqos's own queue on it
// holds packets — feeds them to the link's estimator and hands a changed
// rate to the engine.

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
)

// autorateLink is the estimator state of one link.
type autorateLink struct {
	est     *autorate.Estimator
	ifindex int
	tx      uint64
	at      time.Time
}

// saturatedBytes: hostqos's queue on a link holding more than this means
// the rate in force held the link's flows back.
const saturatedBytes = 3 * 1514

type autorateLoop struct {
	links  map[string]*autorateLink
	acked  map[uint64]uint64 // connection cookie → bytes acked at the last tick
	routes map[netip.Addr]int
	routed time.Time
}

func (d *Daemon) autorateLoop(ctx context.Context) {
	t := time.NewTicker(autorateTick)
	defer t.Stop()
	s := &autorateLoop{links: map[string]*autorateLink{}, acked: map[uint64]uint64{}, routes: map[netip.Addr]int{}}
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
	var egress []engine.AutoLink
	for _, l := range links {
		if l.Auto[engine.AutoEgress] {
			egress = append(egress, l)
		}
	}
	for name := range s.links {
		if !slices.ContainsFunc(egress, func(l engine.AutoLink) bool { return l.Name == name }) {
			delete(s.links, name)
		}
	}
	if len(egress) == 0 {
		clear(s.acked)
		return
	}
	paths, err := shaper.TCPPaths(maxTCPPaths)
	if err != nil {
		d.log.Debug("autorate: read TCP connections", "err", err)
	}
	if now.Sub(s.routed) > routeCacheTTL || len(s.routes) > maxRoutes {
		clear(s.routes)
		s.routed = now
	}
	acked := make(map[uint64]uint64, len(paths))
	type sig struct {
		delays    []time.Duration
		delivered float64
	}
	sigs := map[int]*sig{}
	for _, p := range paths {
		acked[p.Cookie] = p.BytesAcked
		prev, seen := s.acked[p.Cookie]
		if !seen || p.BytesAcked <= prev || p.MinRTT == 0 {
			continue // not sending now: its round trip is stale
		}
		ifx, ok := s.routes[p.Remote]
		if !ok {
			ifx, _ = shaper.RouteIfindex(p.Remote)
			s.routes[p.Remote] = ifx
		}
		g := sigs[ifx]
		if g == nil {
			g = &sig{}
			sigs[ifx] = g
		}
		g.delays = append(g.delays, p.RTT-p.MinRTT)
		if !p.AppLimited {
			g.delivered += float64(p.DeliveryRate) * 8 * tcpFrameShare
		}
	}
	s.acked = acked

	for _, l := range egress {
		st := s.links[l.Name]
		if st == nil || st.ifindex != l.Ifindex {
			est, err := autorate.New(autorate.Params{Min: l.Min[engine.AutoEgress], Max: l.Max[engine.AutoEgress], Start: l.Rate[engine.AutoEgress]})
			if err != nil {
				d.log.Warn("autorate: start estimator", "link", l.Name, "err", err)
				continue
			}
			st = &autorateLink{est: est, ifindex: l.Ifindex}
			s.links[l.Name] = st
		}
		st.est.SetBounds(l.Min[engine.AutoEgress], l.Max[engine.AutoEgress])
		tx, err := shaper.LinkTxBytes(l.Ifindex)
		if err != nil {
			continue
		}
		var smp autorate.Sample
		if !st.at.IsZero() && tx >= st.tx {
			smp.Dt = now.Sub(st.at)
			if dt := smp.Dt.Seconds(); dt > 0 {
				smp.Sent = uint64(float64(tx-st.tx) * 8 / dt)
			}
		}
		st.tx, st.at = tx, now
		queued, err := d.eng.LinkQueued(l.Ifindex)
		smp.Saturated = err == nil && queued > saturatedBytes
		var rtt time.Duration
		if g := sigs[l.Ifindex]; g != nil && len(g.delays) > 0 {
			slices.Sort(g.delays)
			smp.Flows = len(g.delays)
			rtt = g.delays[len(g.delays)/2]
			smp.Delay = rtt
			smp.Delivered = uint64(g.delivered)
		}
		dec := st.est.Step(now, smp)
		d.log.Debug("autorate sample", "link", l.Name, "rtt_over_min", rtt, "flows", smp.Flows, "delivered", smp.Delivered,
			"sent", smp.Sent, "queued", queued, "rate", dec.Rate, "reason", dec.Reason)
		if dec.Changed || dec.Estimate != 0 {
			if err := d.eng.SetAutoRate(l.Name, engine.AutoEgress, dec.Rate, dec.Estimate, dec.Reason); err != nil {
				d.log.Warn("autorate: set rate", "link", l.Name, "rate", dec.Rate, "err", err)
			}
		}
	}
}
