package bench

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/hostqos/hostqos/internal/datapath"
	"github.com/hostqos/hostqos/internal/datapath/xdp"
	"github.com/hostqos/hostqos/internal/traffic"
)

// benchSYNFlood: a SYN flood at the generator's full rate from one
// spoofed source against a listening port; meanwhile an unlisted client
// opens connections one after another. Completed connections and their
// connect times without throttling, with an nftables SYN limit (what
// users do today) and with hostqos's XDP SYN throttling.
func benchSYNFlood(e *env, r *Report) error {
	conns := e.n(200, 50)
	rounds := e.n(2, 1)
	tb, err := e.pair("benchsyn", "tx", "rx")
	if err != nil {
		return err
	}
	defer tb.Close()
	tx, rx := tb.Node("tx"), tb.Node("rx")
	txIf, rxIf := tx.Iface("rx"), rx.Iface("tx")
	legit := netip.MustParseAddr("198.18.0.3")
	spoofed := netip.MustParseAddr("198.18.0.66") // no host has it
	server := netip.MustParseAddrPort("198.18.0.2:8080")
	if err := run(tx, "ip", "addr", "add", legit.String()+"/24", "dev", txIf); err != nil {
		return err
	}
	var ln net.Listener
	if err := rx.Do(func() (err error) {
		ln, err = net.Listen("tcp", server.String())
		return err
	}); err != nil {
		return err
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	const linkRate, srcRate = 2000, 100

	r.setup("%s", hostLine())
	r.setup("flood: pure SYNs from one spoofed source (%v, whose SYN-ACKs go nowhere) at the generator's full rate (raw socket, one thread) to %v in namespace rx (kernel defaults: tcp_syncookies=1)", spoofed, server)
	r.setup("client: %d sequential connects from %v (10 ms apart, 3 s timeout each) while the flood runs; %d round(s)", conns, legit, rounds)
	r.setup("limits: link %d SYN/s, per source %d SYN/s; nftables: netdev ingress, `tcp flags & (syn|ack) == syn` then `meter` per source and a global `limit`, drop over", linkRate, srcRate)

	nftFile := filepath.Join(e.scratch, "syn.nft")
	nftUp := func() error {
		rules := fmt.Sprintf(`table netdev hqsynbench {
	chain in {
		type filter hook ingress device %q priority -500; policy accept;
		ip protocol tcp tcp flags & (syn|ack) == syn meter synsrc { ip saddr limit rate over %d/second burst %d packets } counter drop
		ip protocol tcp tcp flags & (syn|ack) == syn limit rate over %d/second burst %d packets counter drop
	}
}
`, rxIf, srcRate, max(1, srcRate/10), linkRate, linkRate/10)
		if err := os.WriteFile(nftFile, []byte(rules), 0o644); err != nil {
			return fmt.Errorf("write nftables ruleset: %w", err)
		}
		return run(rx, "nft", "-f", nftFile)
	}
	nftDown := func() error { return run(rx, "nft", "delete", "table", "netdev", "hqsynbench") }
	var sh *xdp.Shield
	pins := filepath.Join("/sys/fs/bpf", fmt.Sprintf("hqbench-syn-%d", os.Getpid()))
	xdpUp := func() error {
		return rx.Do(func() error {
			var err error
			if sh, err = xdp.OpenShield(pins, e.log); err != nil {
				return err
			}
			ifi, err := net.InterfaceByName(rxIf)
			if err != nil {
				return err
			}
			return sh.AttachXDP(ifi.Index, xdp.SynLimits{Rate: linkRate, PerSource: srcRate})
		})
	}
	xdpDown := func() error {
		if sh == nil {
			return nil
		}
		sh.Close()
		sh = nil
		return datapath.Remove(pins)
	}
	defer xdpDown()
	nop := func() error { return nil }
	alts := []struct {
		name     string
		up, down func() error
	}{
		{"no throttling (SYN cookies only)", nop, nop},
		{"nftables SYN limit (per-source meter + global limit)", nftUp, nftDown},
		{"hostqos XDP SYN throttling (--syn-rate 2000/s --syn-rate-per-source 100/s)", xdpUp, xdpDown},
	}
	type res struct {
		done, total int
		times       []float64 // ms
		floodRate   float64
	}
	results := make([]res, len(alts))
	for round := 0; round < rounds; round++ {
		for ai, a := range alts {
			if err := e.ctx.Err(); err != nil {
				return err
			}
			if err := a.up(); err != nil {
				_ = a.down()
				return fmt.Errorf("set up %q: %w", a.name, err)
			}
			ctx, stop := context.WithCancel(e.ctx)
			flood := make(chan *traffic.SYNFloodResult, 1)
			go func() {
				var fr *traffic.SYNFloodResult
				_ = tx.Do(func() (err error) {
					fr, err = traffic.SendSYNFlood(ctx, traffic.SYNFloodConfig{To: server, From: spoofed, Duration: time.Minute})
					return err
				})
				flood <- fr
			}()
			time.Sleep(500 * time.Millisecond)
			rs := &results[ai]
			_ = tx.Do(func() error {
				d := net.Dialer{LocalAddr: &net.TCPAddr{IP: legit.AsSlice()}, Timeout: 3 * time.Second}
				for i := 0; i < conns; i++ {
					t0 := time.Now()
					c, err := d.Dial("tcp", server.String())
					rs.total++
					if err == nil {
						rs.done++
						rs.times = append(rs.times, float64(time.Since(t0).Microseconds())/1000)
						c.Close()
					}
					time.Sleep(10 * time.Millisecond)
				}
				return nil
			})
			stop()
			if fr := <-flood; fr != nil {
				rs.floodRate = max(rs.floodRate, fr.Rate)
			}
			if err := a.down(); err != nil {
				return fmt.Errorf("tear down %q: %w", a.name, err)
			}
		}
	}
	r.Columns = []string{"alternative", "connections completed", "connect p50 ms", "connect p99 ms", "flood SYN/s", "target"}
	for ai, a := range alts {
		rs := results[ai]
		sort.Float64s(rs.times)
		frac := float64(rs.done) / float64(max(1, rs.total))
		target := "—"
		if ai == 2 {
			target = "≥ 99 % " + mark(frac >= 0.99)
		}
		r.row(a.name, fmt.Sprintf("%d/%d (%s)", rs.done, rs.total, pct(frac)), f2(percentile(rs.times, 50)), f2(percentile(rs.times, 99)), fmt.Sprintf("%.0f k", rs.floodRate/1e3), target)
		r.metric(fmt.Sprintf("completed_%s", key2(ai)), frac)
	}
	r.note("SYN cookies let the listener answer a flooded SYN queue, so even without throttling the client completes; the cost is CPU (the kernel answers every flood SYN with a SYN-ACK) and, with a queue full, connections without TCP options")
	return nil
}
