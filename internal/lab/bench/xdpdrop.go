package bench

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/hostqos/hostqos/internal/datapath"
	"github.com/hostqos/hostqos/internal/testbed"
)

// benchXDPDrop: how many packets per second a drop list drops, hostqos's
// XDP shield against an nftables drop rule (netdev ingress, the earliest
// nftables hook) on the same prefixes, with 10 and 100,000 entries. A
// flood of 64-byte UDP from one sender thread (sendmmsg) crosses a veth;
// on a veth the receive path runs on the sending core, so the cheaper the
// drop, the more the sender gets out: dropped packets per second is the
// figure, and the undropped baseline (delivered to an unread socket) is
// beside it.
func benchXDPDrop(e *env, r *Report) error {
	dur := e.dur(2*time.Second, 500*time.Millisecond)
	rounds := e.n(3, 1)
	tb, err := e.pair("benchxdp", "tx", "rx")
	if err != nil {
		return err
	}
	defer tb.Close()
	tx, rx := tb.Node("tx"), tb.Node("rx")
	rxIf := rx.Iface("tx")
	sender, err := e.app("hqb-flood")
	if err != nil {
		return err
	}
	const dst = "198.18.0.2:5201"
	matched := netip.MustParsePrefix("198.18.0.0/24") // holds the sender, 198.18.0.1
	sizes := []int{10, 100_000}

	r.setup("%s", hostLine())
	r.setup("sender: one thread, sendmmsg batches of 64 UDP datagrams of 64 B payload (106 B frames), as fast as it can, in namespace tx (198.18.0.1); receiver namespace rx; the veth receive path runs on the sending core")
	r.setup("drop list: N−1 IPv4 /32s in 10.0.0.0/8 plus %v (which holds the sender); nftables: `table netdev`, chain on hook ingress of the receiving veth, priority −500, `ip saddr @blk counter drop` with an interval set; hostqos: the XDP shield (the daemon's code, loaded in-process) in native veth XDP mode", matched)
	r.setup("dropped/s = the drop's own counter over the sender's run time; %v per measurement, %d round(s), alternatives interleaved", dur, rounds)
	r.setup("no pktgen on this kernel (no module loading): a user-space sender limits every row; a cheaper drop shows as a higher rate because sender and drop share the core")

	type alt struct {
		name          string
		up            func(n int) error
		down          func() error
		dropped       func() (uint64, error)
		isBaseline    bool
		entriesMatter bool
	}
	// nftables.
	nftFile := filepath.Join(e.scratch, "xdpdrop.nft")
	nftUp := func(n int) error {
		var b strings.Builder
		fmt.Fprintf(&b, "table netdev hqxbench {\n\tset blk {\n\t\ttype ipv4_addr\n\t\tflags interval\n\t\telements = { %s", matched)
		for i := 0; i < n-1; i++ {
			fmt.Fprintf(&b, ", 10.%d.%d.%d", byte(i>>16), byte(i>>8), byte(i))
		}
		fmt.Fprintf(&b, " }\n\t}\n\tchain in {\n\t\ttype filter hook ingress device %q priority -500; policy accept;\n\t\tip saddr @blk counter drop\n\t}\n}\n", rxIf)
		if err := os.WriteFile(nftFile, []byte(b.String()), 0o644); err != nil {
			return fmt.Errorf("write nftables ruleset: %w", err)
		}
		return run(rx, "nft", "-f", nftFile)
	}
	nftDown := func() error { return run(rx, "nft", "delete", "table", "netdev", "hqxbench") }
	counterRE := regexp.MustCompile(`"packets":\s*(\d+)`)
	nftDropped := func() (uint64, error) {
		out, err := rx.Command("nft", "-j", "list", "chain", "netdev", "hqxbench", "in").CombinedOutput()
		if err != nil {
			return 0, fmt.Errorf("read nftables counter: %w: %s", err, out)
		}
		m := counterRE.FindSubmatch(out)
		if m == nil {
			return 0, fmt.Errorf("read nftables counter: none in %s", out)
		}
		return strconv.ParseUint(string(m[1]), 10, 64)
	}
	// hostqos's XDP shield.
	var sh *datapath.Shield
	pins := filepath.Join("/sys/fs/bpf", fmt.Sprintf("hqbench-xdp-%d", os.Getpid()))
	xdpUp := func(n int) error {
		return rx.Do(func() error {
			var err error
			if sh, err = datapath.OpenShield(pins, e.log); err != nil {
				return err
			}
			es := []datapath.BlockEntry{{Prefix: matched}}
			for i := 0; i < n-1; i++ {
				es = append(es, datapath.BlockEntry{Prefix: netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}), 32)})
			}
			if err := sh.SetBlocks(es); err != nil {
				return err
			}
			ifi, err := net.InterfaceByName(rxIf)
			if err != nil {
				return err
			}
			return sh.AttachXDP(ifi.Index, datapath.SynLimits{})
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
	xdpDropped := func() (uint64, error) {
		cs, err := sh.BlockCounters()
		if err != nil {
			return 0, err
		}
		for _, c := range cs {
			if c.Prefix == matched {
				return c.Dropped, nil
			}
		}
		return 0, fmt.Errorf("read XDP counters: no entry %v", matched)
	}
	nop := func(int) error { return nil }
	alts := []alt{
		{name: "no drop (delivered to an unread socket)", up: nop, down: func() error { return nil }, isBaseline: true},
		{name: "nftables netdev ingress drop, interval set", up: nftUp, down: nftDown, dropped: nftDropped, entriesMatter: true},
		{name: "hostqos XDP drop list (host hash + LPM tries)", up: xdpUp, down: xdpDown, dropped: xdpDropped, entriesMatter: true},
	}

	type key struct{ alt, n int }
	rate := map[key][]float64{}
	sent := map[key][]float64{}
	for round := 0; round < rounds; round++ {
		for _, n := range sizes {
			for ai, a := range alts {
				if !a.entriesMatter && n != sizes[0] {
					continue
				}
				if err := e.ctx.Err(); err != nil {
					return err
				}
				if err := a.up(n); err != nil {
					_ = a.down()
					return fmt.Errorf("set up %q with %d entries: %w", a.name, n, err)
				}
				d, s, err := xdpDropOnce(e, tx, rx, rxIf, sender, dst, dur, a.dropped)
				if derr := a.down(); err == nil && derr != nil {
					err = derr
				}
				if err != nil {
					return fmt.Errorf("%s, %d entries: %w", a.name, n, err)
				}
				rate[key{ai, n}] = append(rate[key{ai, n}], d)
				sent[key{ai, n}] = append(sent[key{ai, n}], s)
			}
		}
	}
	r.Columns = []string{"alternative", "entries", "dropped (baseline: delivered) pkt/s", "sent pkt/s", "vs nftables", "target"}
	for _, n := range sizes {
		nft := median(rate[key{1, n}])
		for ai, a := range alts {
			k := key{ai, n}
			if len(rate[k]) == 0 {
				continue
			}
			m := median(rate[k])
			vs, target := "—", "—"
			if ai == 2 && nft > 0 {
				vs = fmt.Sprintf("%.2f×", m/nft)
				target = "≥ 3× " + mark(m/nft >= 3)
			}
			entries := strconv.Itoa(n)
			if a.isBaseline {
				entries = "—"
			}
			r.row(a.name, entries, fmt.Sprintf("%.0f k", m/1e3), fmt.Sprintf("%.0f k", median(sent[k])/1e3), vs, target)
			r.metric(fmt.Sprintf("pps_%s_%d", key2(ai), n), m)
		}
	}
	r.note("both drops see every packet of the flood (the counters match what the sender got out), so every row is limited by the one sender thread, and the ratio shows only how much of the shared core each drop leaves to it. On a veth the sender already built the skb, which XDP (native veth mode) converts; on a NIC, XDP runs before any skb exists, which this setup cannot show. Crossbow (§4) gives no figures for its hardware drop (\"at no cost\"); no pktgen here to saturate either drop")
	return nil
}

// xdpDropOnce runs one flood; it returns the drop rate (or, without a
// drop counter, the receiver's packet rate) and the sender's rate.
func xdpDropOnce(e *env, tx, rx *testbed.Node, rxIf, sender, dst string, dur time.Duration, dropped func() (uint64, error)) (float64, float64, error) {
	hole, err := bindUDP(rx, dst, false)
	if err != nil {
		return 0, 0, err
	}
	defer hole.Close()
	var before uint64
	var nd0 ifStats
	if dropped != nil {
		if before, err = dropped(); err != nil {
			return 0, 0, err
		}
	} else if nd0, err = netdev(rx, rxIf); err != nil {
		return 0, 0, err
	}
	var res floodResult
	if err := e.helper(tx, sender, &res, "flood", "--to", dst, "--size", "64", "--duration", dur.String()); err != nil {
		return 0, 0, err
	}
	time.Sleep(50 * time.Millisecond)
	if res.DurationS <= 0 {
		return 0, 0, fmt.Errorf("flood helper reported no duration")
	}
	var got uint64
	if dropped != nil {
		after, err := dropped()
		if err != nil {
			return 0, 0, err
		}
		got = after - before
	} else {
		nd1, err := netdev(rx, rxIf)
		if err != nil {
			return 0, 0, err
		}
		got = nd1.RxPackets - nd0.RxPackets
	}
	return float64(got) / res.DurationS, float64(res.Sent) / res.DurationS, nil
}
