package bench

import (
	"fmt"
	"time"

	"github.com/hostqos/hostqos/internal/lab"
)

// benchConnect: sequential TCP connects from an app an exe rule matches
// vs one it does not (same daemon), and with no hostqos at all; p50/p99
// and their difference, and whether any SYN was dropped or held.
func benchConnect(e *env, r *Report) error {
	count := e.n(2000, 300)
	if e.opts.ConnectCount > 0 {
		count = e.opts.ConnectCount
	}
	chunks := 4
	per := max(1, count/chunks)
	count = per * chunks
	tb, err := e.pair("benchconn", "cli", "srv")
	if err != nil {
		return err
	}
	defer tb.Close()
	cli, srv := tb.Node("cli"), tb.Node("srv")
	managed, err := e.app("hqb-conn-managed")
	if err != nil {
		return err
	}
	unmanaged, err := e.app("hqb-conn-other")
	if err != nil {
		return err
	}
	const dst = "198.18.0.2:5100"
	ln, err := listenTCP(srv, dst, true)
	if err != nil {
		return err
	}
	defer ln.Close()

	r.setup("%s", hostLine())
	r.setup("two network namespaces joined by a veth (198.18.0.1 → 198.18.0.2), listener in the far namespace accepting and closing")
	r.setup("%d sequential connects per alternative in %d interleaved chunks, each timed from socket() to connect() returning (blocking, raw syscalls, one locked thread)", count, chunks)
	r.setup("hostqos: real hostqosd managing the client's veth (no rate), rule `--exe <managed copy> --class interactive`; the unmanaged app is a byte-identical copy with another inode")

	lat := map[string][]float64{}
	var attempted, ok, failed int
	do := func(alt, exe string, n int) error {
		var res connectResult
		if err := e.helper(cli, exe, &res, "connect", "--to", dst, "--count", fmt.Sprint(n)); err != nil {
			return err
		}
		attempted += n
		ok += res.OK
		failed += res.Failed
		if res.Failed > 0 {
			r.note("%s: %d of %d connects failed (first: %s)", alt, res.Failed, n, res.FirstErr)
		}
		lat[alt] = append(lat[alt], res.LatencyUS...)
		return nil
	}
	before, err := snmp(cli)
	if err != nil {
		return err
	}
	srvBefore, err := snmp(srv)
	if err != nil {
		return err
	}
	const (
		altNone  = "no hostqos"
		altOther = "hostqos running, unmanaged app"
		altMgd   = "hostqos running, managed app (exe rule)"
	)
	// Baseline chunks before and after the daemon's run.
	for i := 0; i < chunks/2; i++ {
		if err := do(altNone, unmanaged, per); err != nil {
			return err
		}
	}
	iface := cli.Iface("srv")
	d, err := e.daemon(cli, fmt.Sprintf("[[link]]\nname = %q\n\n[[rule]]\nname = \"bench-managed\"\nexe = %q\nclass = \"interactive\"\n", iface, managed))
	if err != nil {
		return err
	}
	var ruleErr error
	func() {
		defer d.Stop()
		for i := 0; i < chunks; i++ {
			if err := do(altMgd, managed, per); err != nil {
				ruleErr = err
				return
			}
			if err := do(altOther, unmanaged, per); err != nil {
				ruleErr = err
				return
			}
		}
		pk, err := rulePackets(d, "bench-managed")
		if err != nil {
			ruleErr = err
			return
		}
		r.metric("managed_rule_packets", float64(pk))
		if pk == 0 {
			r.note("WARNING: the exe rule counted no packets: the managed app was not classified")
		}
	}()
	if ruleErr != nil {
		return ruleErr
	}
	for i := 0; i < chunks/2; i++ {
		if err := do(altNone, unmanaged, per); err != nil {
			return err
		}
	}
	after, err := snmp(cli)
	if err != nil {
		return err
	}
	srvAfter, err := snmp(srv)
	if err != nil {
		return err
	}
	retrans := after["Tcp.RetransSegs"] - before["Tcp.RetransSegs"]
	synRetrans := after["TcpExt.TCPSynRetrans"] - before["TcpExt.TCPSynRetrans"]
	listenDrops := srvAfter["TcpExt.ListenDrops"] - srvBefore["TcpExt.ListenDrops"]
	// The listener may still be accepting the last connections.
	for i := 0; i < 100 && int(ln.accepted.Load()) < ok; i++ {
		time.Sleep(20 * time.Millisecond)
	}
	accepted := int(ln.accepted.Load())

	r.Columns = []string{"alternative", "connects", "p50 µs", "p99 µs", "added p50 µs", "added p99 µs", "target", "anchor"}
	base := lat[altOther]
	for _, alt := range []string{altNone, altOther, altMgd} {
		xs := lat[alt]
		p50, p99 := percentile(xs, 50), percentile(xs, 99)
		add50, add99, target := "—", "—", "—"
		if alt == altMgd {
			d50, d99 := p50-percentile(base, 50), p99-percentile(base, 99)
			add50, add99 = f1(d50), f1(d99)
			target = "≤ 10 µs " + mark(d50 <= 10)
			r.metric("added_p50_us", d50)
			r.metric("added_p99_us", d99)
		}
		if alt == altOther {
			d50 := p50 - percentile(lat[altNone], 50)
			add50 = f1(d50) + " vs no hostqos"
			add99 = f1(p99-percentile(lat[altNone], 99)) + " vs no hostqos"
		}
		anchor := ""
		if alt == altMgd {
			anchor = "Q-Pod ≈ 7 ms (7000 µs)"
		}
		r.row(alt, fmt.Sprint(len(xs)), f1(p50), f1(p99), add50, add99, target, anchor)
		r.metric("p50_us_"+key(alt), p50)
		r.metric("p99_us_"+key(alt), p99)
	}
	r.metric("attempted", float64(attempted))
	r.metric("connected", float64(ok))
	r.metric("failed", float64(failed))
	r.metric("accepted", float64(accepted))
	r.metric("syn_retransmits", float64(synRetrans))
	r.metric("listen_drops", float64(listenDrops))
	held := failed == 0 && accepted == ok && synRetrans == 0 && listenDrops == 0
	r.note("SYNs dropped or held: connects %d, connected %d, accepted by the listener %d, failed %d; client SYN retransmits %d, all TCP retransmits %d, listener drops %d → %s",
		attempted, ok, accepted, failed, synRetrans, retrans, listenDrops,
		map[bool]string{true: "zero packets held or dropped ✓", false: "SOME CONNECTS WERE DELAYED OR LOST ✗"}[held])
	r.note("a held or dropped SYN would cost a 1 s retransmission timeout and show as a SYN retransmit and in p99")
	return nil
}

// rulePackets is the packet count of a rule from the daemon's stats.
func rulePackets(d *lab.Daemon, name string) (uint64, error) {
	st, err := d.Stats("rules")
	if err != nil {
		return 0, fmt.Errorf("read rule stats: %w", err)
	}
	for _, rs := range st.Rules {
		if rs.Rule == name {
			return rs.Packets, nil
		}
	}
	return 0, fmt.Errorf("read rule stats: no rule %q", name)
}

// key makes a metric-name fragment of a label.
func key(s string) string {
	out := make([]rune, 0, len(s))
	for _, c := range s {
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
			out = append(out, c)
		case c >= 'A' && c <= 'Z':
			out = append(out, c+'a'-'A')
		default:
			if len(out) > 0 && out[len(out)-1] != '_' {
				out = append(out, '_')
			}
		}
	}
	for len(out) > 0 && out[len(out)-1] == '_' {
		out = out[:len(out)-1]
	}
	return string(out)
}
