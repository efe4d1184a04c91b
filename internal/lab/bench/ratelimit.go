package bench

import (
	"fmt"
	"time"

	"github.com/hostqos/hostqos/internal/lab"
	"github.com/hostqos/hostqos/internal/testbed"
	"github.com/hostqos/hostqos/internal/traffic"
)

// TCP payload per full frame on a 1500-byte MTU with timestamps: MSS 1448
// in a 1514-byte Ethernet frame (what HTB counts).
const (
	tcpMSS       = 1448
	tcpFrame     = 1514
	udpPayload   = 1400
	udpFrame     = udpPayload + 8 + 20 + 14
	rateListen   = "198.18.0.2:5400"
	rateRuleName = "bench-rate"
)

type rateCase struct {
	label string
	bps   float64
	full  time.Duration
	quick time.Duration
}

// benchRateLimit: achieved/configured for a rule's maxbw, TCP and UDP,
// 128 kbit … 1 gbit, measured at the receiver over a steady window.
func benchRateLimit(e *env, r *Report) error {
	cases := []rateCase{
		{"128kbit", 128e3, 20 * time.Second, 6 * time.Second},
		{"1mbit", 1e6, 10 * time.Second, 3 * time.Second},
		{"10mbit", 10e6, 5 * time.Second, 2 * time.Second},
		{"100mbit", 100e6, 5 * time.Second, 2 * time.Second},
		{"1gbit", 1e9, 5 * time.Second, 2 * time.Second},
	}
	tb, err := e.pair("benchrate", "snd", "rcv")
	if err != nil {
		return err
	}
	defer tb.Close()
	snd, rcv := tb.Node("snd"), tb.Node("rcv")
	sndIf, rcvIf := snd.Iface("rcv"), rcv.Iface("snd")
	exe, err := e.app("hqb-rate")
	if err != nil {
		return err
	}
	d, err := e.daemon(snd, fmt.Sprintf("[[link]]\nname = %q\negress_rate = \"5gbit\"\n\n[[rule]]\nname = %q\nexe = %q\nmaxbw = \"1gbit\"\n", sndIf, rateRuleName, exe))
	if err != nil {
		return err
	}
	defer d.Stop()

	r.setup("%s", hostLine())
	r.setup("real hostqosd in namespace snd managing its veth with egress_rate 5gbit; rule `%s --exe <sender copy> --maxbw R` (changed with `hostqos rule set` per rate); receiver in namespace rcv", rateRuleName)
	r.setup("UDP: %d-byte payloads from one blocking socket as fast as it accepts them (the sender is held back by its send buffer once HTB's queue fills: back-pressure, not drops); achieved = bytes of Ethernet frames (IP + 14-byte header, what HTB counts: %d B per datagram) at the receiver's veth (rx_bytes) over the window / R", udpPayload, udpFrame)
	r.setup("TCP: one bulk connection; achieved = goodput read by the receiving app over the window / (R × %d/%d), the payload share of a full frame (MSS %d, 1514-byte frames)", tcpMSS, tcpFrame, tcpMSS)
	r.setup("window: from 20 %% of the run (after slow start and HTB's initial burst) to its end, sampled every 100 ms; runs of %s", runsDesc(e, cases))
	r.setup("TCP is run twice: with the veth's default GSO (64 KB super-packets) and with `ip link set %s gso_max_size 1514 gso_max_segs 1` on the sender's veth (one MSS per packet)", sndIf)

	r.Columns = []string{"R", "protocol", "achieved / configured", "offered (sender)", "1-s windows min … max", "target [0.97, 1.01]", "anchor"}
	for _, c := range cases {
		if err := e.ctx.Err(); err != nil {
			return err
		}
		if _, err := d.CLI("rule", "set", rateRuleName, "--maxbw", c.label); err != nil {
			return err
		}
		dur := e.dur(c.full, c.quick)
		kinds := []string{"udp", "tcp", "tcp-gso1"}
		if e.quick && c.bps > 1e6 {
			kinds = []string{"udp", "tcp"}
		}
		for _, kind := range kinds {
			res, err := rateOnce(e, d, snd, rcv, sndIf, rcvIf, exe, kind, c.bps, dur)
			if err != nil {
				return fmt.Errorf("%s at %s: %w", kind, c.label, err)
			}
			proto := map[string]string{"udp": "UDP", "tcp": "TCP (GSO 64 KB)", "tcp-gso1": "TCP (gso_max_size 1514)"}[kind]
			ok := res.ratio >= 0.97 && res.ratio <= 1.01
			verdict := mark(ok)
			if !ok && res.offBps < c.bps {
				verdict = "n/a: sender-limited (offered < R)"
			}
			anchor := ""
			if c.bps < 1.2e6 {
				anchor = "Crossbow: no limit below 1.2 Mbit/s"
			} else if c.bps >= 1e9 {
				anchor = "Carousel 0.5 %"
			}
			r.row(c.label, proto, f3(res.ratio), res.offered, res.windows, verdict, anchor)
			r.metric(fmt.Sprintf("ratio_%s_%s", key(kind), c.label), res.ratio)
		}
	}
	r.note("offered: what the sender pushed into its socket (UDP: datagrams × frame size; TCP: bytes the kernel accepted), over the whole run")
	r.note("1-s windows: achieved/configured in consecutive 1-second windows of the measurement window — how bursty the delivery is")
	return nil
}

func runsDesc(e *env, cases []rateCase) string {
	s := ""
	for i, c := range cases {
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprintf("%v at %s", e.dur(c.full, c.quick), c.label)
	}
	return s
}

type rateResult struct {
	ratio   float64
	offBps  float64 // offered, in the unit of the measurement
	offered string
	windows string
}

func rateOnce(e *env, d *lab.Daemon, snd, rcv *testbed.Node, sndIf, rcvIf, exe, kind string, bps float64, dur time.Duration) (rateResult, error) {
	var res rateResult
	if kind == "tcp-gso1" {
		if err := run(snd, "ip", "link", "set", "dev", sndIf, "gso_max_size", "1514", "gso_max_segs", "1"); err != nil {
			return res, err
		}
		defer run(snd, "ip", "link", "set", "dev", sndIf, "gso_max_size", "65536", "gso_max_segs", "65535")
	}
	var s *series
	var wait func(any) error
	var err error
	var start time.Time
	switch kind {
	case "udp":
		hole, herr := bindUDP(rcv, rateListen, false)
		if herr != nil {
			return res, herr
		}
		defer hole.Close()
		s = sample(100*time.Millisecond, func() (uint64, error) {
			st, err := netdev(rcv, rcvIf)
			return st.RxBytes, err
		})
		// Unpaced: the blocking socket sends as fast as the shaper drains
		// (once HTB's queue holds the socket's send buffer, send blocks).
		start = time.Now()
		wait, err = e.startHelper(snd, exe, "flood", "--to", rateListen, "--size", fmt.Sprint(udpPayload),
			"--duration", dur.String(), "--batch", "8")
	default:
		m, merr := listenTCP(rcv, rateListen, false)
		if merr != nil {
			return res, merr
		}
		defer m.Close()
		defer m.drained(30 * time.Second) // the next run starts on an idle link
		s = sample(100*time.Millisecond, func() (uint64, error) { return m.bytes.Load(), nil })
		start = time.Now()
		wait, err = e.startHelper(snd, exe, "tcp", "--to", rateListen, "--duration", dur.String())
	}
	if err != nil {
		s.Stop()
		return res, err
	}
	var out struct {
		Sent      uint64  `json:"sent"`
		Bytes     uint64  `json:"bytes"`
		DurationS float64 `json:"duration_s"`
	}
	werr := wait(&out)
	end := time.Now()
	s.Stop()
	if werr != nil {
		return res, werr
	}
	// Expected bytes per second at the measuring point for a perfect limiter.
	var want float64
	if kind == "udp" {
		want = bps / 8
		if out.DurationS > 0 {
			res.offBps = float64(out.Sent) * udpFrame * 8 / out.DurationS
			res.offered = traffic.FormatRate(res.offBps)
		}
	} else {
		want = bps / 8 * tcpMSS / tcpFrame
		if out.DurationS > 0 {
			res.offBps = float64(out.Bytes) * 8 / out.DurationS * tcpFrame / tcpMSS
			res.offered = traffic.FormatRate(float64(out.Bytes) * 8 / out.DurationS)
		}
	}
	from := start.Add(dur / 5)
	to := start.Add(dur)
	if end.Before(to) {
		to = end
	}
	got, window := s.rate(from, to)
	if window < dur/2 {
		return res, fmt.Errorf("measurement window only %v of a %v run", window, dur)
	}
	res.ratio = got / want
	lo, hi := -1.0, -1.0
	for t := from; !t.Add(time.Second).After(to); t = t.Add(time.Second) {
		v, w := s.rate(t, t.Add(time.Second))
		if w < 800*time.Millisecond {
			continue
		}
		x := v / want
		if lo < 0 || x < lo {
			lo = x
		}
		if hi < 0 || x > hi {
			hi = x
		}
	}
	if lo >= 0 {
		res.windows = fmt.Sprintf("%.2f … %.2f", lo, hi)
	} else {
		res.windows = "—"
	}
	return res, nil
}
