package bench

import (
	"fmt"
	"time"

	"github.com/hostqos/hostqos/internal/policy"
)

// benchResvAPI: seed Table IV, the control path — the latency of adding
// (ADDRESSV) and removing (DELRESV) a reservation through the real
// daemon's API, as an application sees it.
func benchResvAPI(e *env, r *Report) error {
	n := e.n(200, 20)
	r.setup("%s", hostLine())
	r.setup("real hostqosd in a namespace; one managed link (egress_rate 100mbit, an HTB tree) and 10 rules; %d times: add a guaranteed reservation (UDP remote port, r = 1 mbit, b = 16 kb, its own HTB leaf with a ⌈b/m⌉ queue, a datapath reservation) through the typed client over the Unix socket, then remove it; each call timed in the client (validation, admission, compile, datapath write, HTB change, state write with fsync, answer)", n)
	r.Columns = []string{"operation", "p50", "p90", "p99", "target", "seed (tapti / tista)"}
	tb, err := e.pair("benchresvapi", "app", "peer")
	if err != nil {
		return err
	}
	defer tb.Close()
	app := tb.Node("app")
	cfg := fmt.Sprintf("[[link]]\nname = %q\negress_rate = \"100mbit\"\n\n", app.Iface("peer"))
	for i := 0; i < 10; i++ {
		cfg += fmt.Sprintf("[[rule]]\nname = \"r%d\"\nproto = \"udp\"\nrport = %d\nclass = \"bulk\"\n\n", i, 1+i)
	}
	d, err := e.daemon(app, cfg)
	if err != nil {
		return err
	}
	defer d.Stop()
	var add, del []float64
	for i := 0; i < n; i++ {
		if err := e.ctx.Err(); err != nil {
			return err
		}
		rv := policy.NewReservation(fmt.Sprintf("v%d", i))
		rv.Proto, rv.RPort = "udp", policy.PortRange{From: uint16(20000 + i), To: uint16(20000 + i)}
		rv.Service, rv.Rate, rv.Burst = policy.ServiceGuaranteed, 1_000_000, 16<<10
		t0 := time.Now()
		if _, err := d.Client.Reservations().Add(e.ctx, rv); err != nil {
			return fmt.Errorf("add reservation %s: %w", rv.Name, err)
		}
		add = append(add, float64(time.Since(t0).Microseconds())/1000)
		t0 = time.Now()
		if err := d.Client.Reservations().Remove(e.ctx, rv.Name); err != nil {
			return fmt.Errorf("remove reservation %s: %w", rv.Name, err)
		}
		del = append(del, float64(time.Since(t0).Microseconds())/1000)
	}
	ms := func(v float64) string { return fmt.Sprintf("%.2f ms", v) }
	r.row("add (ADDRESSV)", ms(median(add)), ms(percentile(add, 90)), ms(percentile(add, 99)), "≤ 1 ms "+mark(median(add) <= 1), "16.5 ms / 27.0 ms")
	r.row("remove (DELRESV)", ms(median(del)), ms(percentile(del, 90)), ms(percentile(del, 99)), "≤ 0.3 ms "+mark(median(del) <= 0.3), "0.27 ms / 3.40 ms")
	r.metric("add_ms_p50", median(add))
	r.metric("remove_ms_p50", median(del))
	r.note("the seed's add includes ATM signalling for the VC; ours is local only (no RSVP signalling), and includes what the seed's does not: the state file written with fsync before the answer (a crash loses no admitted reservation)")
	return nil
}
