package integration

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/lab"
	"github.com/hostqos/hostqos/internal/rsvp"
	"github.com/hostqos/hostqos/internal/testbed"
	"github.com/hostqos/hostqos/internal/testutil"
	"github.com/hostqos/hostqos/internal/testutil/daemontest"
	"github.com/hostqos/hostqos/internal/traffic"
	"github.com/hostqos/hostqos/qsock"
)

// The three-host RSVP test's figures. The router's link toward the
// receiver is shaped at 10 Mbit/s (8 Mbit/s reservable); the reserved
// flow sends r = 250000 B/s (2 Mbit/s of IP packets) from port 4000 and
// asks guaranteed service at R = 275000 B/s (R covers the 14 bytes of
// Ethernet header HTB counts per packet); the cross traffic sends
// 20 Mbit/s from the same host. R = 1 s: state lives L = 5.25 s.
const (
	rsvpRefresh   = time.Second
	rsvpRate      = 250000 // r, bytes/s
	rsvpBucket    = 3000   // b, bytes
	rsvpMaxPacket = 1500   // M
	rsvpR         = 275000 // guaranteed service rate R, bytes/s
	rsvpRouterBps = 10_000_000
	rsvpPayload   = 1000 // UDP payload of the reserved flow (1028-byte IP packets)
	rsvpCrossBps  = 20_000_000
	rsvpRunTime   = 3 * time.Second
)

// rsvpDelayBound is the p99 one-way delay the reserved flow must stay
// under: the guaranteed-service bound of RFC 2212 over the two hops that
// shape it (sender host and router, each an HTB leaf at R with a queue of
// ⌈b/m⌉ packets), b/R + 2·M/R + 2·(M+14)/C, C the router's link rate,
// plus 20 ms for scheduling on a loaded test machine.
func rsvpDelayBound() time.Duration {
	sec := float64(rsvpBucket)/rsvpR + 2*float64(rsvpMaxPacket)/rsvpR + 2*float64(rsvpMaxPacket+14)*8/rsvpRouterBps
	return time.Duration(sec*float64(time.Second)) + 20*time.Millisecond
}

// rsvpHost is one of the three hosts: its node, daemon and upcalls.
type rsvpHost struct {
	node *testbed.Node
	d    *lab.Daemon
	mu   sync.Mutex
	evs  []api.Event
}

// follow collects the host's rsvp.* events until the test ends.
func (h *rsvpHost) follow(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	since := uint64(0)
	go func() {
		defer close(done)
		_ = h.d.Client.Events().Follow(ctx, api.EventsOptions{Kinds: []string{"rsvp"}, Since: &since, NoResume: true}, func(ev api.Event) error {
			h.mu.Lock()
			h.evs = append(h.evs, ev)
			h.mu.Unlock()
			return nil
		})
	}()
}

// event waits for an event of kind newer than seq.
func (h *rsvpHost) event(t *testing.T, kind string, seq uint64) api.Event {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		h.mu.Lock()
		for _, ev := range h.evs {
			if ev.Kind == kind && ev.Seq > seq {
				h.mu.Unlock()
				return ev
			}
		}
		h.mu.Unlock()
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s: no %s event within 5 s", h.node.Name, kind)
	return api.Event{}
}

func (h *rsvpHost) lastSeq() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.evs) == 0 {
		return 0
	}
	return h.evs[len(h.evs)-1].Seq
}

// reservations are the host's reservation objects made by signalling.
func (h *rsvpHost) reservations(t *testing.T) []api.ReservationInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rs, err := h.d.Client.Reservations().List(ctx)
	if err != nil {
		t.Fatalf("%s: %v", h.node.Name, err)
	}
	var out []api.ReservationInfo
	for _, r := range rs {
		if strings.HasPrefix(r.Reservation.Name, "rsvp-") {
			out = append(out, r)
		}
	}
	return out
}

func (h *rsvpHost) cli(t *testing.T, args ...string) string {
	t.Helper()
	out, err := h.d.CLI(args...)
	if err != nil {
		t.Fatalf("%s: %v", h.node.Name, err)
	}
	return out
}

// TestRSVPThreeHosts is the acceptance test of RSVP signalling: sender
// (client) — router — receiver (server), each with its own hostqosd, on
// one testbed; subtests share it and run in order.
func TestRSVPThreeHosts(t *testing.T) {
	testutil.NeedRoot(t)
	p := testutil.NewPath(t, 0)
	snd := &rsvpHost{node: p.Client.Node}
	rtr := &rsvpHost{node: p.Router.Node}
	rcv := &rsvpHost{node: p.Server.Node}
	S, D := p.ClientV4, p.ServerV4
	R2 := testutil.PathRouterS.Addr()
	rsvpConf := fmt.Sprintf("[rsvp]\nenabled = true\nrefresh = %q\n", rsvpRefresh)
	// The unreserved flow's baseline is one FIFO per class on the
	// router's bottleneck: with flow queueing it would be a flow of its
	// own beside the cross traffic and would not collapse.
	configs := map[*rsvpHost]string{
		snd: rsvpConf + fmt.Sprintf("[[link]]\nname = %q\negress_rate = \"100mbit\"\n", snd.node.Iface("router")),
		rtr: "flow_queueing = \"off\"\n" + strings.Replace(rsvpConf, "enabled = true\n", "enabled = true\nrouter = true\n", 1) +
			fmt.Sprintf("[[link]]\nname = %q\n[[link]]\nname = %q\negress_rate = \"%dbit\"\n", rtr.node.Iface("client"), rtr.node.Iface("server"), rsvpRouterBps),
		rcv: rsvpConf + fmt.Sprintf("[[link]]\nname = %q\n", rcv.node.Iface("router")),
	}
	// Every RSVP message crosses the router: capture them all there.
	capture := startRSVPCapture(t, rtr.node)
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	for h, conf := range configs {
		h.d = daemontest.New(t, h.node, binDir)
		if err := h.d.WriteConfig(conf); err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := h.d.Start(); err != nil {
				errs <- fmt.Errorf("%s: %w", h.node.Name, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for _, h := range []*rsvpHost{snd, rtr, rcv} {
		h.follow(t)
	}
	dest := fmt.Sprintf("%s:5004", D)
	tspec := fmt.Sprintf("r=%d,b=%d,M=%d", rsvpRate, rsvpBucket, rsvpMaxPacket)
	flowspec := fmt.Sprintf("r=%d,b=%d,M=%d,R=%d", rsvpRate, rsvpBucket, rsvpMaxPacket, rsvpR)
	snd.cli(t, "rsvp", "session", "add", "rtp", "--dest", dest, "--proto", "udp")
	rcv.cli(t, "rsvp", "session", "add", "rtp", "--dest", dest, "--proto", "udp")
	snd.cli(t, "rsvp", "sender", "rtp", "--tspec", tspec, "--sport", "4000")
	if ev := rcv.event(t, "rsvp.path", 0); fmt.Sprint(ev.Fields["r"]) != fmt.Sprint(rsvpRate) {
		t.Fatalf("Path upcall at the receiver: %+v", ev)
	}

	var unprotected float64
	t.Run("WithoutReservationCollapses", func(t *testing.T) {
		res := rsvpTraffic(t, p, S, D)
		unprotected = res.ratio
		t.Logf("no reservation: goodput %.3f of r, p99 %.1f ms, loss %.3f", res.ratio, res.p99, res.loss)
		if res.ratio > 0.8 {
			t.Errorf("without a reservation the flow got %.3f of its rate under 20 Mbit/s of cross traffic on a 10 Mbit/s link; want it to collapse (< 0.8)", res.ratio)
		}
	})

	t.Run("ReserveInstallsOnSenderAndRouter", func(t *testing.T) {
		seq := rcv.lastSeq()
		start := time.Now()
		rcv.cli(t, "rsvp", "reserve", "rtp", "--service", "guaranteed", "--flowspec", flowspec, "--confirm")
		ev := rcv.event(t, "rsvp.confirm", seq)
		t.Logf("reserve → confirmed by %v in %v", ev.Fields["node"], time.Since(start).Round(time.Millisecond))
		if fmt.Sprint(ev.Fields["node"]) != S.String() {
			t.Errorf("confirmed by %v, want the sender %s", ev.Fields["node"], S)
		}
		for _, h := range []*rsvpHost{snd, rtr} {
			rs := h.reservations(t)
			if len(rs) != 1 {
				t.Fatalf("%s: %d signalled reservations, want 1", h.node.Name, len(rs))
			}
			r := rs[0]
			if r.Tspec.Rate != rsvpRate || r.Tspec.Bucket != rsvpBucket || r.Tspec.ServiceRate != rsvpR || r.Reservation.Proto != "udp" ||
				r.Reservation.Local.Addr() != S || r.Reservation.Remote.Addr() != D || r.Reservation.LPort.From != 4000 || r.Reservation.RPort.From != 5004 {
				t.Errorf("%s: reservation %+v, tspec %+v: want the flow's 5-tuple with r, b, R as signalled", h.node.Name, r.Reservation, r.Tspec)
			}
		}
		// Admitted on the outgoing link toward the receiver only.
		if l := rtr.reservations(t)[0].Reservation.Link; l != rtr.node.Iface("server") {
			t.Errorf("router admitted the reservation on link %q, want its link toward the receiver %q", l, rtr.node.Iface("server"))
		}
		var st api.RSVPStatus
		if err := rtr.d.CLIJSON(&st, "rsvp", "list"); err != nil {
			t.Fatal(err)
		}
		if !st.Router || len(st.Resvs) != 1 || st.Resvs[0].Role != "router" || st.Resvs[0].NextHop != D.String() {
			t.Errorf("router's rsvp list: %+v", st)
		}
	})

	t.Run("ReservedFlowProtected", func(t *testing.T) {
		bound := rsvpDelayBound()
		measured(t, "reserved flow under cross traffic", func(int) (bool, string) {
			res := rsvpTraffic(t, p, S, D)
			t.Logf("reserved: goodput %.4f of r (%.3f without), p99 %.1f ms (bound %v), loss %.4f", res.ratio, unprotected, res.p99, bound, res.loss)
			if res.ratio < 0.98 || res.ratio > 1.01 {
				return false, fmt.Sprintf("goodput %.4f of the reserved rate, want 0.98–1.01", res.ratio)
			}
			if res.p99 > float64(bound)/float64(time.Millisecond) {
				return false, fmt.Sprintf("p99 one-way delay %.1f ms above the bound %v", res.p99, bound)
			}
			return true, ""
		})
		var rs []api.ReservationInfo
		if err := rtr.d.CLIJSON(&rs, "resv", "list"); err == nil && len(rs) == 1 && rs[0].Counters != nil {
			t.Logf("router's reservation: %d conformant packets, queue drops %d", rs[0].Counters.ConformantPackets, rs[0].Counters.QueueDrops)
		}
	})

	t.Run("ResvTearRemovesAtOnce", func(t *testing.T) {
		start := time.Now()
		rcv.cli(t, "rsvp", "remove", "rtp")
		for _, h := range []*rsvpHost{rtr, snd} {
			for len(h.reservations(t)) != 0 {
				if time.Since(start) > rsvpRefresh {
					t.Fatalf("%s still holds the reservation %v after the ResvTear", h.node.Name, time.Since(start))
				}
				time.Sleep(10 * time.Millisecond)
			}
		}
		t.Logf("gone on router and sender %v after rsvp remove", time.Since(start).Round(time.Millisecond))
	})

	t.Run("OverCapacityRefusedByRouter", func(t *testing.T) {
		rcv.cli(t, "rsvp", "session", "add", "rtp", "--dest", dest, "--proto", "udp")
		seq, rseq := rcv.lastSeq(), rtr.lastSeq()
		over := fmt.Sprintf("r=%d,b=%d,M=%d,R=%d", rsvpRate, rsvpBucket, rsvpMaxPacket, 1_250_000) // 10 Mbit/s
		rcv.cli(t, "rsvp", "reserve", "rtp", "--service", "guaranteed", "--flowspec", over)
		ev := rcv.event(t, "rsvp.resv-error", seq)
		if fmt.Sprint(ev.Fields["node"]) != R2.String() || fmt.Sprint(ev.Fields["error_code"]) != "1" || fmt.Sprint(ev.Fields["error_value"]) != "2" ||
			!strings.Contains(ev.Message, "R=1250000 B/s") {
			t.Errorf("ResvErr at the receiver: %s (fields %v); want the router %s, admission failure (1, 2) and R=1250000 B/s", ev.Message, ev.Fields, R2)
		}
		if r := rtr.event(t, "rsvp.resv-refused", rseq); !strings.Contains(r.Message, "exceed reservable capacity 8mbit") {
			t.Errorf("router's refusal: %s", r.Message)
		}
		t.Logf("receiver: %s", ev.Message)
		time.Sleep(200 * time.Millisecond)
		for _, h := range []*rsvpHost{snd, rtr} {
			if rs := h.reservations(t); len(rs) != 0 {
				t.Errorf("%s: %d reservations installed after the refusal", h.node.Name, len(rs))
			}
		}
	})

	// IPv6 end to end on the same hosts: the router intercepts the Path
	// by its hop-by-hop Router Alert option (value 1, RSVP), installs,
	// the sender confirms, ResvTear removes; no traffic run. The
	// applications' calls: the sender's through libhostqos (C), the
	// receiver's through the Go package qsock.
	t.Run("IPv6ReserveConfirmTear", func(t *testing.T) {
		S6, D6 := p.ClientV6, p.ServerV6
		dest6 := fmt.Sprintf("[%s]:5004", D6)
		seq := rcv.lastSeq()
		prog := filepath.Join(t.TempDir(), "rsvp_rapi")
		mustRun(t, exec.Command("cc", "-std=gnu11", "-Wall", "-Werror", "-I../../libhostqos/include", "-o", prog,
			"testdata/rsvp_rapi.c", "../../libhostqos/src/qsock.c", "-lpthread"))
		rapi := func(args ...string) string {
			cmd := exec.Command(prog, args...)
			cmd.Env = append(os.Environ(), "HOSTQOS_SOCKET="+snd.d.Socket)
			return mustRun(t, cmd)
		}
		out := rapi("send", "rtp6", dest6, "udp", "4000", fmt.Sprint(rsvpRate), fmt.Sprint(rsvpBucket), fmt.Sprint(rsvpMaxPacket))
		t.Logf("C RAPI calls on the sender:\n%s", out)
		if !strings.Contains(out, "bad proto refused errno=22: ") || !strings.Contains(out, "sctp") {
			t.Errorf("libhostqos: a refused rsvp_session does not carry EINVAL and the daemon's reason:\n%s", out)
		}
		qsock.Client = rcv.d.Client
		t.Cleanup(func() { qsock.Client = nil })
		if err := qsock.RSVPSession("rtp6", dest6, "udp"); err != nil {
			t.Fatal(err)
		}
		if err := qsock.RSVPSession("rtp6", dest6, "udp"); !errors.Is(err, syscall.EEXIST) && !errors.Is(err, syscall.EINVAL) {
			t.Errorf("qsock.RSVPSession of an existing name: %v, want EEXIST or EINVAL", err)
		}
		if ev := rcv.event(t, "rsvp.path", seq); fmt.Sprint(ev.Fields["dest"]) != D6.String() {
			t.Fatalf("Path upcall at the receiver: %+v, want the IPv6 session's", ev)
		}
		// Consumed at the router and re-sent with its own RSVP_HOP.
		var st api.RSVPStatus
		if err := rcv.d.CLIJSON(&st, "rsvp", "list"); err != nil {
			t.Fatal(err)
		}
		R6 := testutil.PathRouterS6.Addr().String()
		if !slices.ContainsFunc(st.Paths, func(p api.RSVPPath) bool { return strings.HasPrefix(p.Session, "["+D6.String()) && p.PrevHop == R6 }) {
			t.Errorf("receiver's path states %+v: want the IPv6 session's with previous hop %s (the router)", st.Paths, R6)
		}
		seq = rcv.lastSeq()
		fs := api.Tspec{Rate: rsvpRate, Bucket: rsvpBucket, MaxUnit: rsvpMaxPacket, MinUnit: 64, ServiceRate: rsvpR}
		if err := qsock.RSVPReserve("rtp6", "guaranteed", fs, "", true); err != nil {
			t.Fatal(err)
		}
		if ev := rcv.event(t, "rsvp.confirm", seq); fmt.Sprint(ev.Fields["node"]) != S6.String() {
			t.Errorf("IPv6 reservation confirmed by %v, want the sender %s", ev.Fields["node"], S6)
		}
		if s, err := qsock.RSVPGet("rtp6"); err != nil || len(s.Resvs) != 1 || s.Reserve == nil {
			t.Errorf("qsock.RSVPGet: %+v, %v; want the session with its reservation", s, err)
		}
		for _, h := range []*rsvpHost{snd, rtr} {
			rs := h.reservations(t)
			if len(rs) != 1 || rs[0].Reservation.Local.Addr() != S6 || rs[0].Reservation.Remote.Addr() != D6 || rs[0].Tspec.ServiceRate != rsvpR {
				t.Fatalf("%s: signalled reservations %+v, want the IPv6 flow's at R=%d", h.node.Name, rs, rsvpR)
			}
		}
		if err := qsock.RSVPRemove("rtp6"); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		for _, h := range []*rsvpHost{rtr, snd} {
			for len(h.reservations(t)) != 0 {
				if time.Since(start) > rsvpRefresh {
					t.Fatalf("%s still holds the IPv6 reservation %v after the ResvTear", h.node.Name, time.Since(start))
				}
				time.Sleep(10 * time.Millisecond)
			}
		}
		if out := rapi("remove", "rtp6"); !strings.Contains(out, "rsvp_remove ok") {
			t.Errorf("rsvp_remove: %s", out)
		}
	})

	t.Run("ReceiverKilledTimesOut", func(t *testing.T) {
		seq := rcv.lastSeq()
		rcv.cli(t, "rsvp", "reserve", "rtp", "--service", "guaranteed", "--flowspec", flowspec, "--confirm")
		rcv.event(t, "rsvp.confirm", seq)
		if len(snd.reservations(t)) != 1 || len(rtr.reservations(t)) != 1 {
			t.Fatal("reservation not installed on sender and router")
		}
		if err := rcv.d.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		killed := time.Now()
		L := rsvp.Lifetime(rsvpRefresh)
		gone := map[string]time.Duration{}
		for len(gone) < 2 {
			for _, h := range []*rsvpHost{snd, rtr} {
				if _, ok := gone[h.node.Name]; !ok && len(h.reservations(t)) == 0 {
					gone[h.node.Name] = time.Since(killed)
				}
			}
			if time.Since(killed) > L+time.Second {
				t.Fatalf("reservation still installed %v after the receiver's daemon was killed (gone: %v; L = %v for R = %v)", time.Since(killed), gone, L, rsvpRefresh)
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Logf("gone after kill -9 of the receiver's daemon: %v (L = %v for R = %v)", gone, L, rsvpRefresh)
	})

	t.Run("TsharkDecodesEveryMessage", func(t *testing.T) {
		frames := capture()
		v6 := 0
		for _, f := range frames {
			if binary.BigEndian.Uint16(f[12:]) == unix.ETH_P_IPV6 {
				v6++
			}
		}
		if v6 == 0 {
			t.Error("no IPv6 RSVP message captured (the IPv6 subtest's Path, Resv, ResvConf and ResvTear cross the router)")
		}
		t.Logf("captured %d messages, %d of them IPv6", len(frames), v6)
		checkRSVPWithTshark(t, frames, map[string]string{
			"rsvp.tspec.token_bucket_rate": fmt.Sprint(rsvpRate), "rsvp.tspec.token_bucket_size": fmt.Sprint(rsvpBucket),
			"rsvp.maximum_packet_size": fmt.Sprint(rsvpMaxPacket), "rsvp.flowspec.token_bucket_rate": fmt.Sprint(rsvpRate),
			"rsvp.flowspec.rate": fmt.Sprint(rsvpR) + "|1250000",
		})
	})
	for _, h := range []*rsvpHost{snd, rtr} {
		var st api.RSVPStatus
		if err := h.d.CLIJSON(&st, "rsvp", "list"); err == nil && (st.Counters.Malformed != 0 || st.Counters.Foreign != 0) {
			t.Errorf("%s: %d malformed, %d foreign messages", h.node.Name, st.Counters.Malformed, st.Counters.Foreign)
		}
	}
}

// rsvpResult is one traffic run: the reserved flow's goodput over its
// rate, p99 one-way delay (ms) and loss.
type rsvpResult struct{ ratio, p99, loss float64 }

// rsvpTraffic sends the reserved flow (S:4000 → D:5004 at r) and the
// cross traffic (S → D:5005 at 20 Mbit/s) at once for rsvpRunTime and
// measures the reserved flow at D.
func rsvpTraffic(t *testing.T, p *testutil.Path, S, D netip.Addr) rsvpResult {
	t.Helper()
	sinks := make([]*traffic.Sink, 2)
	for i, port := range []int{5004, 5005} {
		p.Server.MustDo(t, func() (err error) {
			sinks[i], err = traffic.ListenSink(context.Background(), traffic.SinkConfig{Listen: fmt.Sprintf("%s:%d", D, port), Duration: rsvpRunTime + 5*time.Second, Flows: 1, Idle: time.Second})
			return err
		})
	}
	results := make(chan *traffic.SinkResult, 1)
	go func() {
		r, _ := sinks[0].Run(context.Background())
		results <- r
	}()
	go func() { _, _ = sinks[1].Run(context.Background()) }()
	defer sinks[1].Close()
	var wg sync.WaitGroup
	var sent *traffic.SendResult
	for i, cfg := range []traffic.CBRConfig{
		{To: fmt.Sprintf("%s:5004", D), From: fmt.Sprintf("%s:4000", S), Size: rsvpPayload, BitRate: rsvpRate * 8, Duration: rsvpRunTime, DSCP: traffic.NoDSCP},
		{To: fmt.Sprintf("%s:5005", D), Size: 1400, BitRate: rsvpCrossBps, Duration: rsvpRunTime, DSCP: traffic.NoDSCP},
	} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = p.Client.Do(func() error {
				r, err := traffic.SendCBR(context.Background(), cfg)
				if err != nil {
					t.Errorf("send: %v", err)
				}
				if i == 0 {
					sent = r
				}
				return nil
			})
		}()
	}
	wg.Wait()
	res := <-results
	if res == nil || sent == nil || len(res.Flows) == 0 {
		t.Fatalf("no traffic measured (sent %+v, received %+v)", sent, res)
	}
	f := res.Flows[0]
	return rsvpResult{ratio: f.IPBitRate / (rsvpRate * 8), p99: f.Latency.P99, loss: f.Loss}
}

// startRSVPCapture records every RSVP packet (IP protocol 46, IPv4 or IPv6) that
// node's interfaces send or receive (AF_PACKET); the returned function
// stops and returns the frames (Ethernet, outgoing and incoming).
func startRSVPCapture(t *testing.T, node *testbed.Node) func() [][]byte {
	t.Helper()
	var fd int
	if err := node.Do(func() (err error) {
		fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_ALL)))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	_ = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Usec: 100000})
	var mu sync.Mutex
	var frames [][]byte
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 65536)
		for {
			select {
			case <-stop:
				return
			default:
			}
			n, from, err := unix.Recvfrom(fd, buf, 0)
			if err != nil || !isRSVPFrame(buf[:n]) {
				continue
			}
			// A forwarded packet is seen arriving and leaving: keep what
			// arrives, and what the router itself sends.
			if ll, ok := from.(*unix.SockaddrLinklayer); ok && ll.Pkttype == unix.PACKET_OUTGOING && !isFromRouter(buf[:n]) {
				continue
			}
			mu.Lock()
			frames = append(frames, slices.Clone(buf[:n]))
			mu.Unlock()
		}
	}()
	var once sync.Once
	finish := func() [][]byte {
		once.Do(func() { close(stop); <-done; unix.Close(fd) })
		mu.Lock()
		defer mu.Unlock()
		return frames
	}
	t.Cleanup(func() { finish() })
	return finish
}

// isRSVPFrame reports whether an Ethernet frame carries RSVP: IPv4 with
// protocol 46, or IPv6 whose next header is 46 directly or after the
// hop-by-hop options header that carries a Path's Router Alert.
func isRSVPFrame(frame []byte) bool {
	if len(frame) < 14 {
		return false
	}
	switch binary.BigEndian.Uint16(frame[12:]) {
	case unix.ETH_P_IP:
		return len(frame) >= 34 && frame[14+9] == rsvp.Protocol
	case unix.ETH_P_IPV6:
		if len(frame) < 54 {
			return false
		}
		next := frame[14+6]
		if next == unix.IPPROTO_HOPOPTS && len(frame) >= 56 {
			next = frame[54]
		}
		return next == rsvp.Protocol
	}
	return false
}

// isFromRouter reports whether a frame's source is one of the path's
// router addresses (IPv4 or IPv6).
func isFromRouter(frame []byte) bool {
	if binary.BigEndian.Uint16(frame[12:]) == unix.ETH_P_IPV6 {
		src := netip.AddrFrom16([16]byte(frame[14+8 : 14+24]))
		return src == testutil.PathRouterC6.Addr() || src == testutil.PathRouterS6.Addr()
	}
	src := netip.AddrFrom4([4]byte(frame[14+12 : 14+16]))
	return src == testutil.PathRouterC.Addr() || src == testutil.PathRouterS.Addr()
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// sameNumber compares tshark's rendering of a number ("1.25e+06") with
// a configured one.
func sameNumber(a, b string) bool {
	x, err1 := strconv.ParseFloat(a, 64)
	y, err2 := strconv.ParseFloat(b, 64)
	return err1 == nil && err2 == nil && x == y
}

// checkRSVPWithTshark writes frames to a pcap and has tshark decode them:
// no malformed packet, no incorrect checksum, and every value of each
// field in want (alternatives separated by |) is one of the wanted ones.
func checkRSVPWithTshark(t *testing.T, frames [][]byte, want map[string]string) {
	t.Helper()
	tshark, err := exec.LookPath("tshark")
	if err != nil {
		t.Skip("tshark not installed (scripts/install-deps.sh installs it)")
	}
	if len(frames) == 0 {
		t.Fatal("no RSVP message captured")
	}
	pcap := filepath.Join(t.TempDir(), "rsvp.pcap")
	var b bytes.Buffer
	hdr := make([]byte, 24)
	binary.LittleEndian.PutUint32(hdr[0:], 0xa1b2c3d4)
	binary.LittleEndian.PutUint16(hdr[4:], 2)
	binary.LittleEndian.PutUint16(hdr[6:], 4)
	binary.LittleEndian.PutUint32(hdr[16:], 65535)
	binary.LittleEndian.PutUint32(hdr[20:], 1) // Ethernet
	b.Write(hdr)
	for i, f := range frames {
		rec := make([]byte, 16)
		binary.LittleEndian.PutUint32(rec[0:], uint32(i))
		binary.LittleEndian.PutUint32(rec[8:], uint32(len(f)))
		binary.LittleEndian.PutUint32(rec[12:], uint32(len(f)))
		b.Write(rec)
		b.Write(f)
	}
	if err := os.WriteFile(pcap, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(tshark, "-n", "-r", pcap, "-V").Output()
	if err != nil {
		t.Fatalf("tshark -V: %v", err)
	}
	if n := bytes.Count(out, []byte("Message Checksum: 0x")); n != len(frames) {
		t.Errorf("tshark shows %d RSVP checksums for %d captured messages", n, len(frames))
	}
	for _, bad := range []string{"incorrect", "Malformed", "Unknown object", "Bogus"} {
		if bytes.Contains(out, []byte(bad)) {
			t.Errorf("tshark -V says %q", bad)
		}
	}
	fields := []string{"rsvp.msg"}
	for f := range want {
		fields = append(fields, f)
	}
	slices.Sort(fields[1:])
	args := []string{"-n", "-r", pcap, "-T", "fields", "-E", "separator=;", "-E", "occurrence=a", "-E", "aggregator=,"}
	for _, f := range fields {
		args = append(args, "-e", f)
	}
	out, err = exec.Command(tshark, args...).Output()
	if err != nil {
		t.Fatalf("tshark fields: %v", err)
	}
	types := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		v := strings.Split(line, ";")
		types[v[0]]++
		for j, f := range fields[1:] {
			for _, x := range strings.Split(v[j+1], ",") {
				if x != "" && !slices.ContainsFunc(strings.Split(want[f], "|"), func(w string) bool { return sameNumber(w, x) }) {
					t.Errorf("tshark decoded %s = %s in a message of type %s; configured %s", f, x, v[0], want[f])
				}
			}
		}
	}
	t.Logf("tshark decoded %d messages by type (1 Path, 2 Resv, 4 ResvErr, 6 ResvTear, 7 ResvConf): %v", len(frames), types)
	for _, typ := range []string{"1", "2", "4", "6", "7"} {
		if types[typ] == 0 {
			t.Errorf("no message of type %s captured", typ)
		}
	}
}
