package bench

import (
	"fmt"
	"time"

	"github.com/hostqos/hostqos/internal/policy"
)

// benchResvScale: reservations held on one host from 1 to 10,000 — the
// latency of one more add at each decade and the daemon's memory there.
func benchResvScale(e *env, r *Report) error {
	top := e.n(10000, 1000)
	const window = 50 // the adds timed before each decade
	r.setup("%s", hostLine())
	r.setup("real hostqosd in a namespace; one managed link (egress_rate 100gbit, resv_buffer 4GiB, an HTB tree); guaranteed reservations added one by one through the typed client over the Unix socket (UDP remote port each its own, r = 1 mbit, b = 3000 B, each its own HTB leaf and datapath reservation, the state file written with fsync) and kept, up to %d; at 1, 10, 100, 1,000 and 10,000 held: the add latency (p50 and p90 of the last ≤ %d adds before it) and VmRSS of hostqosd", top, window)
	r.Columns = []string{"reservations held", "add p50", "add p90", "RSS", "target"}
	tb, err := e.pair("benchrscale", "app", "peer")
	if err != nil {
		return err
	}
	defer tb.Close()
	app := tb.Node("app")
	cfg := fmt.Sprintf("[[link]]\nname = %q\negress_rate = \"100gbit\"\nresv_buffer = \"4GiB\"\n\n", app.Iface("peer"))
	d, err := e.daemon(app, cfg)
	if err != nil {
		return err
	}
	defer d.Stop()
	var lat []float64
	held := 0
	t0 := time.Now()
	for decade := 1; decade <= top; decade *= 10 {
		for ; held < decade; held++ {
			if err := e.ctx.Err(); err != nil {
				return err
			}
			rv := policy.NewReservation(fmt.Sprintf("s%d", held))
			port := uint16(20000 + held)
			rv.Proto, rv.RPort = "udp", policy.PortRange{From: port, To: port}
			rv.Service, rv.Rate, rv.Burst = policy.ServiceGuaranteed, 1_000_000, 3000
			t := time.Now()
			if _, err := d.Client.Reservations().Add(e.ctx, rv); err != nil {
				return fmt.Errorf("add reservation %s (%d held): %w", rv.Name, held, err)
			}
			if held >= decade-window {
				lat = append(lat, float64(time.Since(t).Microseconds())/1000)
			}
		}
		rss, err := procRSS(d.PID())
		if err != nil {
			return err
		}
		target := "—"
		if decade == 10000 {
			target = "≥ 10,000 admitted " + mark(true)
		}
		r.row(fmt.Sprint(decade), fmt.Sprintf("%.2f ms", median(lat)), fmt.Sprintf("%.2f ms", percentile(lat, 90)),
			fmt.Sprintf("%.1f MiB", float64(rss)/(1<<20)), target)
		r.metric(fmt.Sprintf("add_ms_p50_%d", decade), median(lat))
		r.metric(fmt.Sprintf("rss_bytes_%d", decade), float64(rss))
		lat = lat[:0]
	}
	r.note("%d reservations added in %.1f s", held, time.Since(t0).Seconds())
	return nil
}
