package bench

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hostqos/hostqos/internal/lab"
	"github.com/hostqos/hostqos/internal/testbed"
	"github.com/hostqos/hostqos/internal/traffic"
)

// The receive-side benchmarks (Crossbow's Table 1, Fig. 3 and Table 2):
// downloads into apps on a host hostqosd manages, from a server behind a
// router whose delay line gives the path its round trip.

// Addresses of the download path: client — router — server.
var (
	dlClient4 = netip.MustParsePrefix("198.18.1.1/24")
	dlRouterC = netip.MustParsePrefix("198.18.1.2/24")
	dlRouterS = netip.MustParsePrefix("198.18.2.1/24")
	dlServer4 = netip.MustParsePrefix("198.18.2.2/24")
)

// dlPath is a client — router — server testbed; the delay line in the
// router gives it rtt (0: none, the router just forwards).
type dlPath struct {
	tb                     *testbed.Testbed
	client, router, server *testbed.Node
	clientIf               string // the client's interface (the managed link)
	routerIfC              string // the router's interface toward the client
	rtt                    time.Duration
}

// path builds a dlPath. downlink > 0 puts an HTB bottleneck of that many
// bits/s on the router's egress toward the client.
func (e *env) path(name string, rtt time.Duration, downlink uint64) (*dlPath, error) {
	q := rtt / 4
	tb, err := testbed.Build(testbed.Topology{
		Name:  name,
		Nodes: []testbed.NodeSpec{{Name: "client"}, {Name: "router", Router: true}, {Name: "server"}},
		Links: []testbed.LinkSpec{
			{A: "client", B: "router", AAddrs: []netip.Prefix{dlClient4}, BAddrs: []netip.Prefix{dlRouterC},
				DelayAtoB: q, DelayBtoA: q, RateBtoA: downlink},
			{A: "router", B: "server", AAddrs: []netip.Prefix{dlRouterS}, BAddrs: []netip.Prefix{dlServer4},
				DelayAtoB: q, DelayBtoA: q},
		},
	}, testbed.WithLogger(e.log))
	if err != nil {
		return nil, fmt.Errorf("build testbed %s: %w", name, err)
	}
	p := &dlPath{tb: tb, client: tb.Node("client"), router: tb.Node("router"), server: tb.Node("server"), rtt: rtt}
	p.clientIf = p.client.Iface("router")
	p.routerIfC = p.router.Iface("client")
	return p, nil
}

func (p *dlPath) Close() { p.tb.Close() }

// bulkSender is an in-process TCP server on the path's server: it writes
// to every connection as fast as TCP lets it until the peer goes away, then
// adds the connection's own TCP_INFO counts (retransmitted and sent data
// segments) to its totals.
type bulkSender struct {
	ln            net.Listener
	wg            sync.WaitGroup
	retrans, segs atomic.Uint64
}

func startBulkSender(node *testbed.Node, addr netip.Addr) (*bulkSender, error) {
	b := &bulkSender{}
	if err := node.Do(func() (err error) {
		b.ln, err = net.Listen("tcp", netip.AddrPortFrom(addr, 0).String())
		return err
	}); err != nil {
		return nil, fmt.Errorf("listen for downloads in %s: %w", node.Name, err)
	}
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		for {
			c, err := b.ln.Accept()
			if err != nil {
				return
			}
			b.wg.Add(1)
			go func() {
				defer b.wg.Done()
				defer c.Close()
				buf := make([]byte, 64<<10)
				_ = c.SetWriteDeadline(time.Now().Add(5 * time.Minute))
				for {
					if _, err := c.Write(buf); err != nil {
						break
					}
				}
				rc, err := c.(*net.TCPConn).SyscallConn()
				if err != nil {
					return
				}
				_ = rc.Control(func(fd uintptr) {
					if ti, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO); err == nil {
						b.retrans.Add(uint64(ti.Total_retrans))
						b.segs.Add(uint64(ti.Data_segs_out))
					}
				})
			}()
		}
	}()
	return b, nil
}

func (b *bulkSender) addr() string { return b.ln.Addr().String() }

// Close stops accepting, waits for the connections to end (their peers
// are gone) and returns the summed retransmitted and sent data segments.
func (b *bulkSender) Close() (retrans, segs uint64) {
	b.ln.Close()
	b.wg.Wait()
	return b.retrans.Load(), b.segs.Load()
}

// downloadResult is what the download helper read.
type downloadResult struct {
	TotalBps   float64   `json:"total_bps"`   // goodput after the warm-up, all streams
	StreamsBps []float64 `json:"streams_bps"` // per stream
	Bytes      uint64    `json:"bytes"`
	// Samples are (unix ms, cumulative bytes of each stream), when asked.
	Samples []dlSample `json:"samples,omitempty"`
}

type dlSample struct {
	UnixMS int64    `json:"t"`
	Bytes  []uint64 `json:"b"`
}

// helperDownload opens streams TCP connections to ap, reads for dur and
// reports the goodput (TCP payload read) after warmup; with every > 0 it
// also samples the bytes read.
func helperDownload(ap netip.AddrPort, dur, warmup, every time.Duration, streams int) (*downloadResult, error) {
	streams = max(1, streams)
	counts := make([]atomic.Uint64, streams)
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range streams {
		c, err := net.DialTimeout("tcp", ap.String(), 5*time.Second)
		if err != nil {
			return nil, fmt.Errorf("connect to %v: %w", ap, err)
		}
		conns = append(conns, c)
	}
	start := time.Now()
	for i, c := range conns {
		go func() {
			buf := make([]byte, 256<<10)
			for {
				n, err := c.Read(buf)
				counts[i].Add(uint64(n))
				if err != nil {
					return
				}
			}
		}()
	}
	res := &downloadResult{}
	snap := func() []uint64 {
		out := make([]uint64, streams)
		for i := range counts {
			out[i] = counts[i].Load()
		}
		return out
	}
	var base []uint64
	var t0 time.Time
	end := start.Add(dur)
	warmAt := start.Add(min(warmup, dur))
	tick := every
	if tick <= 0 {
		tick = 10 * time.Millisecond
	}
	next := start
	if every <= 0 {
		next = end.Add(time.Hour)
	}
	for {
		now := time.Now()
		if base == nil && !now.Before(warmAt) {
			base, t0 = snap(), now
		}
		if every > 0 && !now.Before(next) {
			res.Samples = append(res.Samples, dlSample{UnixMS: now.UnixMilli(), Bytes: snap()})
			next = next.Add(every)
		}
		if !now.Before(end) {
			break
		}
		time.Sleep(min(time.Until(end), time.Until(next), tick))
	}
	last := snap()
	if base == nil {
		base, t0 = make([]uint64, streams), start
	}
	el := time.Since(t0).Seconds()
	for i := range last {
		b := last[i] - base[i]
		res.Bytes += b
		res.StreamsBps = append(res.StreamsBps, float64(b)*8/el)
		res.TotalBps += float64(b) * 8 / el
	}
	return res, nil
}

// dlRun is one measured download.
type dlRun struct {
	downloadResult
	retrans, segs uint64
	ping          *traffic.VoiceResult // nil when not asked
}

// download runs app on the path's client: streams connections to a fresh
// bulk sender on the server, for warm+measure; with ping, a 50 pkt/s UDP
// echo to the server runs during the measured part.
func (e *env) download(p *dlPath, app string, streams int, warm, measure time.Duration, ping bool) (*dlRun, error) {
	bs, err := startBulkSender(p.server, dlServer4.Addr())
	if err != nil {
		return nil, err
	}
	wait, err := e.startHelper(p.client, app, "download", "--to", bs.addr(), "--streams", strconv.Itoa(streams),
		"--duration", (warm + measure).String(), "--warmup", warm.String())
	if err != nil {
		bs.Close()
		return nil, err
	}
	var pr func() (*traffic.VoiceResult, error)
	if ping {
		time.Sleep(warm)
		pr = e.pingPath(p, measure-500*time.Millisecond)
	}
	run := &dlRun{}
	err = wait(&run.downloadResult)
	run.retrans, run.segs = bs.Close()
	if pr != nil {
		r, perr := pr()
		if err == nil {
			err = perr
		}
		run.ping = r
	}
	if err != nil {
		return nil, err
	}
	return run, nil
}

// pingPath measures the round trip of a 50 pkt/s UDP echo from the client
// to the server for dur, in the background.
func (e *env) pingPath(p *dlPath, dur time.Duration) func() (*traffic.VoiceResult, error) {
	var echo *traffic.Echo
	if err := p.server.Do(func() (err error) {
		echo, err = traffic.ListenEcho(e.ctx, netip.AddrPortFrom(dlServer4.Addr(), 0).String())
		return err
	}); err != nil {
		return func() (*traffic.VoiceResult, error) { return nil, fmt.Errorf("start echo: %w", err) }
	}
	ctx, stop := context.WithCancel(e.ctx)
	go func() { _, _ = echo.Run(ctx, dur+5*time.Second) }()
	type out struct {
		r   *traffic.VoiceResult
		err error
	}
	ch := make(chan out, 1)
	go func() {
		var o out
		o.err = p.client.Do(func() (err error) {
			o.r, err = traffic.RunVoice(e.ctx, traffic.VoiceConfig{To: echo.Addr().String(), Calls: 1, PacketRate: 50,
				Duration: dur, DSCP: traffic.NoDSCP, Drain: time.Second})
			return err
		})
		ch <- o
	}()
	return func() (*traffic.VoiceResult, error) {
		o := <-ch
		stop()
		if o.err != nil {
			return nil, fmt.Errorf("ping the server: %w", o.err)
		}
		return o.r, nil
	}
}

// ifbHTB shapes what node receives on ifc with an IFB and an HTB of rate
// bits/s (what Linux users do today for a download limit): the ingress
// qdisc redirects every packet to the IFB, whose root HTB class holds
// them to the rate. It returns the remover.
func ifbHTB(node *testbed.Node, ifc string, rate float64) (func() error, error) {
	const ifb = "hqbifb"
	r := fmt.Sprintf("%.0fbit", rate)
	steps := [][]string{
		{"ip", "link", "add", ifb, "type", "ifb"},
		{"ip", "link", "set", ifb, "up"},
		{"tc", "qdisc", "add", "dev", ifb, "root", "handle", "1:", "htb", "default", "1"},
		{"tc", "class", "add", "dev", ifb, "parent", "1:", "classid", "1:1", "htb", "rate", r, "ceil", r},
		{"tc", "qdisc", "add", "dev", ifc, "handle", "ffff:", "ingress"},
		{"tc", "filter", "add", "dev", ifc, "parent", "ffff:", "protocol", "all", "prio", "1", "u32", "match", "u32", "0", "0",
			"action", "mirred", "egress", "redirect", "dev", ifb},
	}
	remove := func() error {
		_ = run(node, "tc", "qdisc", "del", "dev", ifc, "handle", "ffff:", "ingress")
		return run(node, "ip", "link", "del", ifb)
	}
	for _, s := range steps {
		if err := run(node, s[0], s[1:]...); err != nil {
			_ = remove()
			return nil, err
		}
	}
	return remove, nil
}

// policeProbe tries the tc police action at ingress on ifc and returns
// the kernel's answer ("" when it works; the probe filter is removed).
func policeProbe(node *testbed.Node, ifc string) string {
	if err := run(node, "tc", "qdisc", "add", "dev", ifc, "handle", "ffff:", "ingress"); err != nil {
		return err.Error()
	}
	defer run(node, "tc", "qdisc", "del", "dev", ifc, "handle", "ffff:", "ingress")
	out, err := node.Command("tc", "filter", "add", "dev", ifc, "parent", "ffff:", "protocol", "ip", "prio", "1",
		"u32", "match", "ip", "protocol", "6", "0xff", "police", "rate", "1mbit", "burst", "10k", "drop", "flowid", ":1").CombinedOutput()
	if err != nil {
		return strings.Join(strings.Fields(string(out)), " ")
	}
	return ""
}

// tcPolice limits what node receives on ifc with the tc police action
// (where the kernel has it): TCP over the rate is dropped on arrival.
func tcPolice(node *testbed.Node, ifc string, rate float64) (func() error, error) {
	if err := run(node, "tc", "qdisc", "add", "dev", ifc, "handle", "ffff:", "ingress"); err != nil {
		return nil, err
	}
	remove := func() error { return run(node, "tc", "qdisc", "del", "dev", ifc, "handle", "ffff:", "ingress") }
	burst := max(10_000, int(rate/8/50)) // 20 ms at the rate, ≥ 10 KB
	if err := run(node, "tc", "filter", "add", "dev", ifc, "parent", "ffff:", "protocol", "ip", "prio", "1",
		"u32", "match", "ip", "protocol", "6", "0xff", "police", "rate", fmt.Sprintf("%.0fbit", rate),
		"burst", strconv.Itoa(burst), "drop", "flowid", ":1"); err != nil {
		_ = remove()
		return nil, err
	}
	return remove, nil
}

// dlDaemon starts hostqosd on the path's client managing its link, with
// the given rules (TOML [[rule]] tables).
func (e *env) dlDaemon(p *dlPath, rules string) (*lab.Daemon, error) {
	return e.daemon(p.client, fmt.Sprintf("[[link]]\nname = %q\n\n%s", p.clientIf, rules))
}
