package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/rsvp"
	"github.com/hostqos/hostqos/internal/testbed"
	"github.com/hostqos/hostqos/internal/testutil"
)

// What a remote party on a managed link can do to an RSVP host with
// well-formed messages: the client namespace's hostqosd speaks RSVP as a
// host (not a router) on its shaped link toward the server namespace,
// where the test crafts messages and sends them on raw sockets.

var (
	clientV6 = testutil.PairA6
	// spoofV4 is a second address of the remote party's (the server's)
	// end of the link: another source on the same link.
	spoofV4 = netip.MustParsePrefix("198.18.0.3/24")
)

// newRSVPHost starts the daemon with RSVP on (as a host, with extra keys
// in [rsvp]) and its link toward the server managed and shaped.
func newRSVPHost(t *testing.T, extra string) *env {
	t.Helper()
	e := newEnv(t)
	e.writeConfig(fmt.Sprintf("[rsvp]\nenabled = true\n%s\n[[link]]\nname = %q\negress_rate = \"100mbit\"\n", extra, e.iface()))
	e.startDaemon()
	return e
}

// rsvpStatus is the daemon's RSVP status with every state (root's view).
func (e *env) rsvpStatus() api.RSVPStatus {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := e.cli.RSVP().Status(ctx, api.RSVPListQuery{Limit: api.MaxRSVPStates})
	if err != nil {
		e.t.Fatal(err)
	}
	return st
}

// signalled are the daemon's reservation objects made by RSVP signalling.
func (e *env) signalled() []string {
	e.t.Helper()
	var rs []api.ReservationInfo
	e.hostqosJSON(&rs, "resv", "list")
	var out []string
	for _, r := range rs {
		if strings.HasPrefix(r.Reservation.Name, "rsvp-") {
			out = append(out, r.Reservation.Name)
		}
	}
	return out
}

// rsvpRemote is the remote party: RSVP sockets in a namespace, and the
// messages they receive.
type rsvpRemote struct {
	t     *testing.T
	node  *testbed.Node
	conns map[bool]*rsvp.Conn // by IPv6
	mu    sync.Mutex
	got   []*rsvp.Message
}

func newRSVPRemote(t *testing.T, node *testbed.Node) *rsvpRemote {
	t.Helper()
	r := &rsvpRemote{t: t, node: node, conns: map[bool]*rsvp.Conn{}}
	for _, v6 := range []bool{false, true} {
		var c *rsvp.Conn
		if err := node.Do(func() (err error) { c, err = rsvp.Listen(v6); return err }); err != nil {
			t.Fatalf("RSVP sockets of the remote party: %v", err)
		}
		r.conns[v6] = c
		done := make(chan struct{})
		go func() {
			defer close(done)
			for {
				in, err := c.Recv()
				if err != nil {
					return // closed
				}
				if m, err := rsvp.Decode(in.Msg); err == nil {
					r.mu.Lock()
					r.got = append(r.got, m)
					r.mu.Unlock()
				}
			}
		}()
		t.Cleanup(func() { c.Close(); <-done })
	}
	return r
}

// send sends m to the address to from the party's own address (with
// the Router Alert option when alert is set, as a Path has it).
func (r *rsvpRemote) send(m *rsvp.Message, to netip.Addr, alert bool) {
	r.t.Helper()
	b, err := m.Encode()
	if err != nil {
		r.t.Fatal(err)
	}
	if err := r.conns[to.Is6()].Send(b, to, 64, alert); err != nil {
		r.t.Fatal(err)
	}
}

// sendFrom sends m (IPv4) to the address to from source address src of
// the party's namespace: a raw socket bound to src.
func (r *rsvpRemote) sendFrom(src netip.Addr, m *rsvp.Message, to netip.Addr) {
	r.t.Helper()
	b, err := m.Encode()
	if err != nil {
		r.t.Fatal(err)
	}
	err = r.node.Do(func() error {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, rsvp.Protocol)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: src.As4()}); err != nil {
			return fmt.Errorf("bind to %s: %w", src, err)
		}
		return unix.Sendto(fd, b, 0, &unix.SockaddrInet4{Addr: to.As4()})
	})
	if err != nil {
		r.t.Fatalf("send %s from %s: %v", m.Type, src, err)
	}
}

// addAddr gives the party's end of the link another address.
func (r *rsvpRemote) addAddr(p netip.Prefix, ifc string) {
	r.t.Helper()
	h := r.node.Handle()
	l, err := h.LinkByName(ifc)
	if err != nil {
		r.t.Fatal(err)
	}
	if err := h.AddrAdd(l, &netlink.Addr{IPNet: &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}}); err != nil {
		r.t.Fatal(err)
	}
}

// expect waits for a received message that match accepts.
func (r *rsvpRemote) expect(what string, match func(*rsvp.Message) bool) *rsvp.Message {
	r.t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		r.mu.Lock()
		for _, m := range r.got {
			if match(m) {
				r.mu.Unlock()
				return m
			}
		}
		r.mu.Unlock()
	}
	r.t.Fatalf("the remote party got no %s within 10 s", what)
	return nil
}

var remoteTspec = rsvp.Tspec{Rate: 125000, Bucket: 3000, Peak: float32(math.Inf(1)), MinUnit: 64, MaxPacket: 1500}

func remotePath(sess rsvp.Session, snd rsvp.Filter, hop netip.Addr, refresh uint32) *rsvp.Message {
	ts := remoteTspec
	return &rsvp.Message{Type: rsvp.Path, TTL: 64, Session: sess, Hop: &rsvp.Hop{Addr: hop}, Refresh: refresh,
		Sender: &rsvp.Sender{Template: snd, Tspec: &ts}}
}

func remoteResv(sess rsvp.Session, snd rsvp.Filter, hop netip.Addr, fs rsvp.Flowspec) *rsvp.Message {
	return &rsvp.Message{Type: rsvp.Resv, TTL: 64, Session: sess, Hop: &rsvp.Hop{Addr: hop}, Refresh: 30000, Style: rsvp.StyleFF,
		Flows: []rsvp.FlowDesc{{Flowspec: &fs, Filters: []rsvp.Filter{snd}}}}
}

func hasPath(st api.RSVPStatus, sess rsvp.Session, role string) bool {
	want := netip.AddrPortFrom(sess.Dest, sess.Port).String() + "/udp"
	for _, p := range st.Paths {
		if p.Session == want && (role == "" || p.Role == role) {
			return true
		}
	}
	return false
}

// TestRSVPHostRefusesForeignSessions: a host with [rsvp] router = false
// keeps no path state for a session it neither sends nor receives, and
// installs reservations only for its own senders. The remote party sends
// the host a Path whose SESSION is the party's own address (naming the
// host as the sender), then a guaranteed Resv for 77 Mbit/s of the link's
// 80 reservable: over IPv4 and over IPv6 with Router Alert, the Path is
// dropped and counted, the Resv answered with a ResvErr "no path
// information" naming the host, nothing installed; a Path addressed to the
// host is still kept (it receives that session). A Resv naming a hop the
// host has no route to gets no ResvErr at all (none could be built), is
// counted, and is no send failure.
func TestRSVPHostRefusesForeignSessions(t *testing.T) {
	parallel(t)
	e := newRSVPHost(t, "")
	peer := newRSVPRemote(t, e.server)
	big := rsvp.Flowspec{Service: rsvp.ServiceGuaranteed, Tspec: remoteTspec, RspecRate: 77e6 / 8}
	for i, fam := range []struct {
		name       string
		host, peer netip.Addr
	}{{"IPv4", clientV4.Addr(), serverV4.Addr()}, {"IPv6", clientV6.Addr(), serverV6.Addr()}} {
		foreign := rsvp.Session{Dest: fam.peer, Proto: 17, Port: 5004}
		victim := rsvp.Filter{Src: fam.host, Port: 4000}
		peer.send(remotePath(foreign, victim, fam.peer, 30000), fam.host, true)
		peer.send(remoteResv(foreign, victim, fam.peer, big), fam.host, false)
		m := peer.expect(fam.name+" ResvErr", func(m *rsvp.Message) bool { return m.Type == rsvp.ResvErr && m.Session == foreign })
		if m.Error.Code != rsvp.ErrNoPathInfo || m.Error.Node != fam.host || m.Hop == nil || m.Hop.Addr != fam.host {
			t.Errorf("%s: ResvErr %+v (error %+v); want error code 3 (no path information) naming the host %s as node and hop", fam.name, m, m.Error, fam.host)
		}
		mine := rsvp.Session{Dest: fam.host, Proto: 17, Port: 5006}
		peer.send(remotePath(mine, rsvp.Filter{Src: fam.peer, Port: 4000}, fam.peer, 30000), fam.host, true)
		eventually(t, 10*time.Second, fam.name+" Path addressed to the host kept", func() (bool, string) {
			st := e.rsvpStatus()
			return hasPath(st, mine, "receiver"), fmt.Sprintf("%+v", st.Paths)
		})
		st := e.rsvpStatus()
		if hasPath(st, foreign, "") || st.Counters.NotHere != uint64(i+1) {
			t.Errorf("%s: path states %+v, counters %+v; want none for the foreign session and %d Paths counted not here", fam.name, st.Paths, st.Counters, i+1)
		}
		if rs := e.signalled(); len(rs) != 0 {
			t.Fatalf("%s: a remote party's Resv installed %v on a host that is not its sender", fam.name, rs)
		}
	}

	t.Run("ResvErrWithoutRoute", func(t *testing.T) {
		before := e.rsvpStatus().Counters
		nowhere := netip.MustParseAddr("203.0.113.9") // the host has no route there
		foreign := rsvp.Session{Dest: serverV4.Addr(), Proto: 17, Port: 5008}
		peer.send(remoteResv(foreign, rsvp.Filter{Src: serverV4.Addr(), Port: 4000}, nowhere, big), clientV4.Addr(), false)
		eventually(t, 10*time.Second, "Resv from an unroutable hop counted", func() (bool, string) {
			c := e.rsvpStatus().Counters
			return c.Received > before.Received, fmt.Sprintf("%+v", c)
		})
		c := e.rsvpStatus().Counters
		if c.NoRoute != before.NoRoute+1 || c.SendFail != before.SendFail {
			t.Errorf("counters %+v after a Resv from a hop without a route (before %+v); want one more no_route and no send failure", c, before)
		}
		if strings.Contains(e.d.Log(), "encode RSVP message") {
			t.Errorf("the daemon tried to send a message it could not encode:\n%s", e.d.Log())
		}
	})
}

// TestRSVPRemotePathStateBounds: the lifetime taken from TIME_VALUES is
// capped at 4 × the host's R (here the default 30 s, so 2 minutes: state
// lives at most 5.25 × 2 min = 630 s), and the path states of one previous
// hop and of one source address are capped ([rsvp] max_paths_per_hop,
// max_paths_per_source): Paths over a cap are dropped, counted and
// logged at most once a minute per reason, while another source on the
// link is still served.
func TestRSVPRemotePathStateBounds(t *testing.T) {
	parallel(t)
	e := newRSVPHost(t, "max_paths_per_hop = 20\nmax_paths_per_source = 30\n")
	peer := newRSVPRemote(t, e.server)
	peer.addAddr(spoofV4, e.server.Iface("client"))
	host, src1, src2 := clientV4.Addr(), serverV4.Addr(), spoofV4.Addr()
	hop := func(i byte) netip.Addr { return netip.AddrFrom4([4]byte{198, 18, 9, i}) }
	send := func(n int, port uint16, h, src netip.Addr) {
		for i := range n {
			sess := rsvp.Session{Dest: host, Proto: 17, Port: port + uint16(i)}
			peer.sendFrom(src, remotePath(sess, rsvp.Filter{Src: src1, Port: 4000}, h, math.MaxUint32), host)
		}
	}
	send(25, 5000, hop(1), src1) // 20 kept, 5 over the hop's cap
	send(15, 6000, hop(2), src1) // 10 kept (the source's 30), 5 over the source's cap
	send(5, 7000, hop(3), src2)  // another source: 5 kept
	var st api.RSVPStatus
	eventually(t, 10*time.Second, "45 Paths handled", func() (bool, string) {
		st = e.rsvpStatus()
		c := st.Counters
		return c.Paths+int(c.OverHop+c.OverSource) >= 45, fmt.Sprintf("%+v", c)
	})
	if c := st.Counters; c.Paths != 35 || c.OverHop != 5 || c.OverSource != 5 {
		t.Errorf("counters %+v; want 35 path states kept, 5 over the previous hop's cap, 5 over the source's", c)
	}
	L := rsvp.Lifetime(2 * time.Minute).Seconds()
	if st.MaxPeerRefresh != "2m0s" {
		t.Errorf("max_peer_refresh %q, want 2m0s (4 × R = 30 s)", st.MaxPeerRefresh)
	}
	for _, p := range st.Paths {
		if p.Expires > L {
			t.Fatalf("path state %s from %s expires in %.0f s; a Path with R = 2^32-1 ms must live at most %.0f s", p.Session, p.PrevHop, p.Expires, L)
		}
	}
	log := e.d.Log()
	if n := strings.Count(log, "RSVP message refused"); n < 1 || n > 4 || !strings.Contains(log, "over the previous hop's cap") {
		t.Errorf("%d log lines about 10 refused Paths; want each reason logged once:\n%s", n, log)
	}
}

// TestRSVPTearsFromTheStateHop: the host sends (a reservation installed
// on its link by the remote receiver's Resv) and receives (a remote
// sender's path state). A ResvTear, a ResvErr (which removes a refused
// reservation) and a PathTear from another address of the link, or naming
// another RSVP_HOP, are ignored and counted; the state's own hop's tears
// still remove it at once.
func TestRSVPTearsFromTheStateHop(t *testing.T) {
	parallel(t)
	e := newRSVPHost(t, "")
	peer := newRSVPRemote(t, e.server)
	peer.addAddr(spoofV4, e.server.Iface("client"))
	host, rcv, evil := clientV4.Addr(), serverV4.Addr(), spoofV4.Addr()

	// The host sends toward the remote receiver, which reserves.
	dest := netip.AddrPortFrom(rcv, 5004).String()
	e.hostqos("rsvp", "session", "add", "out", "--dest", dest, "--proto", "udp")
	e.hostqos("rsvp", "sender", "out", "--tspec", "r=125000,b=3000", "--sport", "4000")
	out := rsvp.Session{Dest: rcv, Proto: 17, Port: 5004}
	p := peer.expect("Path of the host's sender", func(m *rsvp.Message) bool { return m.Type == rsvp.Path && m.Session == out })
	snd := p.Sender.Template
	fs := rsvp.Flowspec{Service: rsvp.ServiceCL, Tspec: remoteTspec}
	peer.send(remoteResv(out, snd, rcv, fs), host, false)
	eventually(t, 10*time.Second, "the remote receiver's reservation installed", func() (bool, string) {
		rs := e.signalled()
		return len(rs) == 1, fmt.Sprint(rs)
	})
	// The host receives from the remote sender.
	in := rsvp.Session{Dest: host, Proto: 17, Port: 5006}
	rsnd := rsvp.Filter{Src: rcv, Port: 4000}
	peer.send(remotePath(in, rsnd, rcv, 30000), host, true)
	eventually(t, 10*time.Second, "the remote sender's path state", func() (bool, string) {
		return hasPath(e.rsvpStatus(), in, "receiver"), ""
	})

	resvTear := func(hop netip.Addr) *rsvp.Message {
		return &rsvp.Message{Type: rsvp.ResvTear, TTL: 64, Session: out, Hop: &rsvp.Hop{Addr: hop}, Style: rsvp.StyleFF,
			Flows: []rsvp.FlowDesc{{Filters: []rsvp.Filter{snd}}}}
	}
	pathTear := func(hop netip.Addr) *rsvp.Message {
		return &rsvp.Message{Type: rsvp.PathTear, TTL: 64, Session: in, Hop: &rsvp.Hop{Addr: hop}, Sender: &rsvp.Sender{Template: rsnd}}
	}
	f := fs
	resvErr := &rsvp.Message{Type: rsvp.ResvErr, TTL: 64, Session: out, Hop: &rsvp.Hop{Addr: evil},
		Error: &rsvp.ErrorSpec{Node: evil, Code: rsvp.ErrAdmission, Value: 2}, Style: rsvp.StyleFF,
		Flows: []rsvp.FlowDesc{{Flowspec: &f, Filters: []rsvp.Filter{snd}}}}
	for i, c := range []struct {
		name string
		m    *rsvp.Message
	}{
		{"ResvTear naming the sender of it", resvTear(evil)},
		{"ResvTear naming the reservation's next hop", resvTear(rcv)},
		{"ResvErr of an admission failure", resvErr},
		{"PathTear naming the sender of it", pathTear(evil)},
		{"PathTear naming the state's previous hop", pathTear(rcv)},
	} {
		peer.sendFrom(evil, c.m, host)
		var st api.RSVPStatus
		eventually(t, 10*time.Second, c.name+" from "+evil.String()+" handled", func() (bool, string) {
			st = e.rsvpStatus()
			return st.Counters.BadTear == uint64(i+1) || len(e.signalled()) == 0 || !hasPath(st, in, ""), fmt.Sprintf("%+v", st.Counters)
		})
		if rs := e.signalled(); len(rs) != 1 || !hasPath(st, in, "receiver") {
			t.Fatalf("%s from %s (not the state's hop): reservations %v, receiver's path state kept %v; want both kept", c.name, evil, rs, hasPath(st, in, "receiver"))
		}
	}

	// The state's own hops.
	peer.send(resvTear(rcv), host, false)
	eventually(t, 10*time.Second, "the next hop's ResvTear removes the reservation", func() (bool, string) {
		rs := e.signalled()
		return len(rs) == 0, fmt.Sprint(rs)
	})
	peer.send(pathTear(rcv), host, true)
	eventually(t, 10*time.Second, "the previous hop's PathTear removes the path state", func() (bool, string) {
		return !hasPath(e.rsvpStatus(), in, ""), ""
	})
}

// TestRSVPListingBoundedForNobody: with thousands of signalled states,
// nobody's RSVP listings are bounded like flow statistics: two at once
// (two clients that never read a page of 3,000 states hold both places),
// a third waits a second and gets 503, root is not held back; and nobody
// pages through every state with hostqos rsvp list --limit/--offset.
func TestRSVPListingBoundedForNobody(t *testing.T) {
	parallel(t)
	e := newRSVPHost(t, "")
	openForNobody(t, e)
	peer := newRSVPRemote(t, e.server)
	host, src := clientV4.Addr(), serverV4.Addr()
	const states = 3000
	// In chunks the host's socket buffer holds, each sent again until
	// the host has it.
	for from := 0; from < states; from += 200 {
		for try := 0; ; try++ {
			for i := from; i < from+200; i++ {
				sess := rsvp.Session{Dest: host, Proto: 17, Port: uint16(10000 + i)}
				peer.send(remotePath(sess, rsvp.Filter{Src: src, Port: 4000}, src, 30000), host, false)
			}
			deadline := time.Now().Add(5 * time.Second)
			for e.rsvpStatus().Counters.Paths < from+200 && time.Now().Before(deadline) {
				time.Sleep(50 * time.Millisecond)
			}
			if e.rsvpStatus().Counters.Paths >= from+200 {
				break
			}
			if try == 3 {
				t.Fatalf("the host keeps %d path states after 4 tries of %d", e.rsvpStatus().Counters.Paths, from+200)
			}
		}
	}

	cmd := e.asUser(uidNobody, e.attacker())
	cmd.Env = append(os.Environ(), attackerEnv+"=rsvp-hold", "HQ_IT_SOCKET="+e.d.Socket)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := bufio.NewScanner(stdout)
	var probes []string
	for lines.Scan() && !strings.HasPrefix(lines.Text(), "DONE") {
		t.Logf("nobody: %s", lines.Text())
		if strings.HasPrefix(lines.Text(), "PROBE ") {
			probes = append(probes, lines.Text())
		}
	}
	// Both places held by nobody: root still gets its answer.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if st, err := e.cli.RSVP().Status(ctx, api.RSVPListQuery{Limit: 10}); err != nil || len(st.Paths) != 10 {
		t.Errorf("root's listing while nobody holds both places: %d paths, %v", len(st.Paths), err)
	}
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Errorf("nobody's listings: %v", err)
	}
	if len(probes) != 3 {
		t.Fatalf("nobody's listings beyond the two held: %q; want 3 answers", probes)
	}
	for _, p := range probes {
		if !strings.HasPrefix(p, "PROBE 503 ") || !strings.Contains(p, "busy: 2 large answers") {
			t.Errorf("nobody's listing beyond the two held: %s; want 503 busy", p)
		}
	}

	// Paging, as nobody, through the CLI.
	seen := map[string]bool{}
	pages := 0
	for off := 0; pages <= states/1000; pages++ {
		out, err := e.userHostqos(uidNobody, "rsvp", "list", "--limit", "1000", "--offset", strconv.Itoa(off), "-o", "json")
		if err != nil {
			t.Fatalf("rsvp list --offset %d as nobody: %v\n%s", off, err, out)
		}
		var st api.RSVPStatus
		if err := json.Unmarshal([]byte(out), &st); err != nil {
			t.Fatalf("rsvp list -o json: %v\n%s", err, out)
		}
		if len(st.Paths) > 1000 {
			t.Fatalf("a page of --limit 1000 lists %d path states", len(st.Paths))
		}
		for _, p := range st.Paths {
			seen[p.Session+" "+p.Sender] = true
		}
		if !st.Truncated {
			pages++
			break
		}
		if st.NextOffset != off+1000 {
			t.Fatalf("the page at %d names the next at %d, want %d", off, st.NextOffset, off+1000)
		}
		off = st.NextOffset
	}
	if len(seen) != states || pages != states/1000 {
		t.Errorf("nobody paged through %d distinct path states in %d pages; want %d in %d", len(seen), pages, states, states/1000)
	}
}

// rsvpHoldMain is the attacker of TestRSVPListingBoundedForNobody: as an
// ordinary user, it asks for a page of 10,000 RSVP states on two
// connections and reads only the first bytes of each (holding both
// places), then asks three more listings at once and prints their status
// codes ("PROBE code message"), "DONE", and keeps holding until its input
// closes.
func rsvpHoldMain(sock string) int {
	for range 2 {
		c, err := net.Dial("unix", sock)
		if err != nil {
			fmt.Println("dial:", err)
			return 1
		}
		defer c.Close()
		fmt.Fprintf(c, "GET %s?limit=%d HTTP/1.1\r\nHost: hostqosd\r\n\r\n", api.Path(api.RouteRSVP), api.MaxRSVPStates)
		if _, err := io.ReadFull(c, make([]byte, 64)); err != nil { // the answer has begun: the place is taken
			fmt.Println("read:", err)
			return 1
		}
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			_, err := api.NewClient(sock).RSVP().Status(ctx, api.RSVPListQuery{Limit: 10})
			mu.Lock()
			defer mu.Unlock()
			if ae, ok := err.(*api.Error); ok {
				fmt.Printf("PROBE %d %s\n", ae.Status, ae.Body.Error)
			} else {
				fmt.Printf("PROBE 200 %v\n", err)
			}
		}()
	}
	wg.Wait()
	fmt.Println("DONE")
	_, _ = io.Copy(io.Discard, os.Stdin)
	return 0
}
