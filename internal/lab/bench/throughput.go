package bench

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/hostqos/hostqos/internal/testbed"
)

// benchThroughput: bulk TCP through a veth whose egress is shaped by HTB
// at 1, 10 and 40 Gbit/s, with and without hostqos, beside plain tc HTB
// and no QoS in the same run: the goodput, the CPU the whole machine
// spent (cores busy), and that CPU per Gbit/s carried.
func benchThroughput(e *env, r *Report) error {
	rates := []float64{1e9, 10e9, 40e9}
	if e.quick {
		rates = []float64{1e9, 10e9}
	}
	dur := e.dur(3*time.Second, time.Second)
	rounds := e.n(2, 1)
	const streams = 4
	const sinkAddr = "198.18.0.2:5800"
	tb, err := e.pair("benchtput", "tx", "rx")
	if err != nil {
		return err
	}
	defer tb.Close()
	tx, rx := tb.Node("tx"), tb.Node("rx")
	txIf := tx.Iface("rx")
	sink, err := listenTCP(rx, sinkAddr, false)
	if err != nil {
		return err
	}
	defer sink.Close()
	exe, err := e.app("hqb-bulk")
	if err != nil {
		return err
	}
	r.setup("%s", hostLine())
	r.setup("bulk TCP, %d connections from one sender process in namespace tx to an in-process reader in rx across a veth, %v per measurement, %d round(s), alternatives interleaved within a round; goodput = bytes the reader got over the run", streams, dur, rounds)
	r.setup("CPU: the whole machine's busy time over the run (/proc/stat: all but idle and iowait) in cores; CPU per Gbit/s = cores / goodput. The veth's receive path runs in softirq on the sending core, so sender, HTB and receiver share the figure")
	r.setup("tc HTB: `htb default 10`, one class 1:10 at rate = ceil = the rate; hostqos: real hostqosd managing the veth with egress_rate = the rate (its HTB tree: classes under the link's rate) and a rule `--exe <sender> --class bulk` classifying and counting every packet")

	type measure struct{ gbps, cores float64 }
	got := map[string][]measure{}
	measureAlt := func(alt string) error {
		c0, err := cpuBusy()
		if err != nil {
			return err
		}
		b0, t0 := sink.bytes.Load(), time.Now()
		var res tcpResult
		if err := e.helper(tx, exe, &res, "tcp", "--to", sinkAddr, "--duration", dur.String(), "--streams", strconv.Itoa(streams)); err != nil {
			return fmt.Errorf("%s: %w", alt, err)
		}
		el := time.Since(t0).Seconds()
		c1, err := cpuBusy()
		if err != nil {
			return err
		}
		sink.drained(2 * time.Second)
		got[alt] = append(got[alt], measure{gbps: float64(sink.bytes.Load()-b0) * 8 / el / 1e9, cores: (c1 - c0) / el})
		return nil
	}
	altName := func(kind string, rate float64) string {
		if kind == "none" {
			return "no QoS"
		}
		return fmt.Sprintf("%s, HTB %g Gbit/s", kind, rate/1e9)
	}
	for round := 0; round < rounds; round++ {
		if err := measureAlt(altName("none", 0)); err != nil {
			return err
		}
		for _, rate := range rates {
			if err := e.ctx.Err(); err != nil {
				return err
			}
			bits := fmt.Sprintf("%.0fgbit", rate/1e9)
			if err := tcHTB(tx, txIf, bits); err != nil {
				return err
			}
			err := measureAlt(altName("tc", rate))
			if derr := run(tx, "tc", "qdisc", "del", "dev", txIf, "root"); err == nil && derr != nil {
				err = derr
			}
			if err != nil {
				return err
			}
			d, err := e.daemon(tx, fmt.Sprintf("[[link]]\nname = %q\negress_rate = %q\n\n[[rule]]\nname = \"bulk\"\nexe = %q\nclass = \"bulk\"\n", txIf, bits, exe))
			if err != nil {
				return err
			}
			err = measureAlt(altName("hostqos", rate))
			if _, derr := d.CLI("down"); err == nil && derr != nil {
				err = derr
			}
			if serr := d.Stop(); err == nil && serr != nil {
				err = serr
			}
			if err != nil {
				return err
			}
		}
	}
	r.Columns = []string{"alternative", "goodput Gbit/s", "of the HTB rate", "CPU cores busy", "CPU per Gbit/s", "hostqos vs tc HTB (CPU per Gbit/s)"}
	med := func(ms []measure) (g, c float64) {
		var gs, cs []float64
		for _, m := range ms {
			gs, cs = append(gs, m.gbps), append(cs, m.cores)
		}
		return median(gs), median(cs)
	}
	per := func(g, c float64) float64 {
		if g <= 0 {
			return 0
		}
		return c / g
	}
	g, c := med(got[altName("none", 0)])
	r.row("no QoS", f2(g), "—", f2(c), f3(per(g, c)), "")
	r.metric("gbps_none", g)
	r.metric("cores_per_gbps_none", per(g, c))
	for _, rate := range rates {
		tg, tcores := med(got[altName("tc", rate)])
		hg, hcores := med(got[altName("hostqos", rate)])
		r.row(altName("tc", rate), f2(tg), pct(tg*1e9/rate), f2(tcores), f3(per(tg, tcores)), "")
		vs := "—"
		if per(tg, tcores) > 0 {
			vs = fmt.Sprintf("%+.1f %%", 100*(per(hg, hcores)-per(tg, tcores))/per(tg, tcores))
		}
		r.row(altName("hostqos", rate), f2(hg), pct(hg*1e9/rate), f2(hcores), f3(per(hg, hcores)), vs)
		k := fmt.Sprintf("%gg", rate/1e9)
		r.metric("gbps_tc_"+k, tg)
		r.metric("gbps_hostqos_"+k, hg)
		r.metric("cores_per_gbps_tc_"+k, per(tg, tcores))
		r.metric("cores_per_gbps_hostqos_"+k, per(hg, hcores))
	}
	r.note("a rate above what the veth carries (here the no-QoS row) leaves HTB and hostqos unconstrained: their rows then show what shaping and classification cost at full speed, not the rate held")
	r.note("the CPU figure is the whole machine's: other load (see the load average above) adds to every row alike within a round, which is why alternatives are interleaved")
	return nil
}

// tcHTB puts a plain HTB root on iface in node: one class at rate = ceil,
// the default for everything.
func tcHTB(node *testbed.Node, iface, rate string) error {
	for _, c := range [][]string{
		{"qdisc", "add", "dev", iface, "root", "handle", "1:", "htb", "default", "10"},
		{"class", "add", "dev", iface, "parent", "1:", "classid", "1:10", "htb", "rate", rate, "ceil", rate},
	} {
		if err := run(node, "tc", c...); err != nil {
			return err
		}
	}
	return nil
}

// cpuBusy is the machine's busy CPU time so far, in seconds (/proc/stat:
// all time but idle and iowait, over every CPU).
func cpuBusy() (float64, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, fmt.Errorf("read /proc/stat: %w", err)
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 8 || f[0] != "cpu" {
		return 0, fmt.Errorf("read /proc/stat: first line %q is not the cpu totals", line)
	}
	var total, idle float64
	for i, s := range f[1:] {
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return 0, fmt.Errorf("read /proc/stat: field %d %q: %w", i+1, s, err)
		}
		if i >= 8 { // guest time is counted in user time already
			break
		}
		total += v
		if i == 3 || i == 4 {
			idle += v
		}
	}
	return (total - idle) / clockTicks, nil
}

// clockTicks is USER_HZ, the unit of /proc/stat (100 on Linux).
const clockTicks = 100
