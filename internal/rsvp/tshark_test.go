package rsvp

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hostqos/hostqos/internal/testutil"
)

// capture is an AF_PACKET socket on one interface of a namespace: the
// frames as they crossed the veth, for tshark.
type capture struct{ fd int }

func openCapture(ns *testutil.NetNS, ifindex int) (*capture, error) {
	c := &capture{fd: -1}
	err := ns.Do(func() error {
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_ALL)))
		if err != nil {
			return err
		}
		c.fd = fd
		tv := unix.Timeval{Usec: 200000}
		if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
			return err
		}
		return unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: ifindex})
	})
	return c, err
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// rsvpFrames reads frames until want RSVP ones (IPv4 protocol 46, or IPv6
// with protocol 46 after at most a hop-by-hop header) arrived or the time is up.
func (c *capture) rsvpFrames(want int, d time.Duration) [][]byte {
	var out [][]byte
	buf := make([]byte, 70000)
	for end := time.Now().Add(d); len(out) < want && time.Now().Before(end); {
		n, _, err := unix.Recvfrom(c.fd, buf, 0)
		if err != nil || n < 14+40 {
			continue
		}
		f := buf[:n]
		switch binary.BigEndian.Uint16(f[12:]) {
		case unix.ETH_P_IP:
			if f[14+9] != Protocol {
				continue
			}
		case unix.ETH_P_IPV6:
			nh := f[14+6]
			if nh == 0 { // hop-by-hop
				nh = f[14+40]
			}
			if nh != Protocol {
				continue
			}
		default:
			continue
		}
		out = append(out, append([]byte(nil), f...))
	}
	return out
}

// writePcap writes Ethernet frames as a classic pcap file.
func writePcap(path string, frames [][]byte) error {
	var b bytes.Buffer
	hdr := []uint32{0xa1b2c3d4, 0x00040002, 0, 0, 65535, 1} // magic, v2.4, zone, sigfigs, snaplen, Ethernet
	for i, v := range hdr {
		if i == 1 {
			binary.Write(&b, binary.LittleEndian, uint16(2))
			binary.Write(&b, binary.LittleEndian, uint16(4))
			continue
		}
		binary.Write(&b, binary.LittleEndian, v)
	}
	for i, f := range frames {
		binary.Write(&b, binary.LittleEndian, []uint32{uint32(i), 0, uint32(len(f)), uint32(len(f))})
		b.Write(f)
	}
	return os.WriteFile(path, b.Bytes(), 0o600)
}

// TestTsharkDecodes sends every sample message, IPv4 and IPv6, over a real
// veth between two namespaces with our raw sockets, checks that our receiver
// gets each one (Path and PathTear with Router Alert) and decodes it to what
// was sent, then has the real tshark decode the captured frames: no
// malformed packet, no bad checksum, no expert warning, and the Tspec and
// Flowspec fields it shows equal the configured ones.
func TestTsharkDecodes(t *testing.T) {
	testutil.NeedRoot(t)
	tshark, err := exec.LookPath("tshark")
	if err != nil {
		t.Skip("tshark not installed (scripts/install-deps.sh installs it)")
	}
	p := testutil.NewPair(t)
	a4, b4 := testutil.PairA4.Addr(), testutil.PairB4.Addr()
	a6, b6 := testutil.PairA6.Addr(), testutil.PairB6.Addr()
	msgs := append(samples(b4, a4, a4, b4), samples(b6, a6, a6, b6)...)

	capt, err := openCapture(p.B, p.IndexB)
	if err != nil {
		t.Fatalf("open capture: %v", err)
	}
	defer unix.Close(capt.fd)
	var send4, send6, recv4, recv6 *Conn
	p.A.MustDo(t, func() (err error) {
		if send4, err = Listen(false); err != nil {
			return err
		}
		send6, err = Listen(true)
		return err
	})
	p.B.MustDo(t, func() (err error) {
		if recv4, err = Listen(false); err != nil {
			return err
		}
		recv6, err = Listen(true)
		return err
	})
	for _, c := range []*Conn{send4, send6, recv4, recv6} {
		defer c.Close()
	}
	type got struct {
		r   Received
		err error
	}
	rcv := func(c *Conn, ch chan<- got) {
		for {
			r, err := c.Recv()
			if err != nil {
				ch <- got{err: err}
				return
			}
			r.Msg = append([]byte(nil), r.Msg...)
			r.IPv4 = append([]byte(nil), r.IPv4...)
			ch <- got{r: r}
		}
	}
	ch4, ch6 := make(chan got, 64), make(chan got, 64)
	go rcv(recv4, ch4)
	go rcv(recv6, ch6)

	for _, m := range msgs {
		b, err := m.Encode()
		if err != nil {
			t.Fatal(err)
		}
		c, ch := send4, ch4
		if m.Session.Dest.Is6() {
			c, ch = send6, ch6
		}
		alert := m.Type == Path || m.Type == PathTear
		if err := c.Send(b, m.Session.Dest, int(m.TTL), alert); err != nil {
			t.Fatal(err)
		}
		select {
		case g := <-ch:
			if g.err != nil {
				t.Fatal(g.err)
			}
			dm, err := Decode(g.r.Msg)
			if err != nil {
				t.Fatalf("%s: our receiver: %v", m.Type, err)
			}
			if !reflect.DeepEqual(dm, m) {
				t.Errorf("%s: received\n%+v\nsent\n%+v", m.Type, dm, m)
			}
			if g.r.Ifindex != p.IndexB || g.r.Src != m.Sender4or6(a4, a6) {
				t.Errorf("%s: arrived on ifindex %d from %s, want %d from the sender", m.Type, g.r.Ifindex, g.r.Src, p.IndexB)
			}
			if g.r.IPv4 != nil && HasRouterAlert4(g.r.IPv4) != alert {
				t.Errorf("%s: IPv4 Router Alert %v, want %v", m.Type, !alert, alert)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s to %s: not received", m.Type, m.Session.Dest)
		}
	}
	frames := capt.rsvpFrames(len(msgs), 5*time.Second)
	if len(frames) != len(msgs) {
		t.Fatalf("captured %d RSVP frames, sent %d", len(frames), len(msgs))
	}
	for i, m := range msgs {
		if m.Session.Dest.Is6() && (m.Type == Path || m.Type == PathTear) && frames[i][14+6] != 0 {
			t.Errorf("frame %d (%s IPv6): no hop-by-hop header (Router Alert)", i+1, m.Type)
		}
	}
	pcap := filepath.Join(t.TempDir(), "rsvp.pcap")
	if err := writePcap(pcap, frames); err != nil {
		t.Fatal(err)
	}

	// Expert info: nothing above "note" (malformed packets are errors, a bad
	// checksum is a warning or error).
	out, err := exec.Command(tshark, "-n", "-r", pcap, "-q", "-z", "expert,warn").CombinedOutput()
	if err != nil {
		t.Fatalf("tshark expert: %v\n%s", err, out)
	}
	if bytes.Contains(out, []byte("Malformed")) || bytes.Contains(out, []byte("Warns (")) || bytes.Contains(out, []byte("Errors (")) {
		t.Errorf("tshark complains:\n%s", out)
	}
	// The full dissection: every message's checksum shown and verified
	// (tshark marks a wrong one "[incorrect, should be ...]", without an
	// expert entry), nothing malformed.
	out, err = exec.Command(tshark, "-n", "-r", pcap, "-V").Output()
	if err != nil {
		t.Fatalf("tshark -V: %v", err)
	}
	if n := bytes.Count(out, []byte("Message Checksum: 0x")); n != len(msgs) {
		t.Errorf("tshark shows %d RSVP checksums, sent %d messages", n, len(msgs))
	}
	for _, bad := range []string{"incorrect", "Malformed", "Unknown object", "Bogus"} {
		if bytes.Contains(out, []byte(bad)) {
			t.Errorf("tshark -V says %q:\n%s", bad, out)
		}
	}
	fields := []string{"rsvp.msg", "rsvp.message_checksum", "rsvp.tspec.token_bucket_rate", "rsvp.tspec.token_bucket_size",
		"rsvp.tspec.peak_data_rate", "rsvp.flowspec.token_bucket_rate", "rsvp.flowspec.token_bucket_size",
		"rsvp.flowspec.peak_data_rate", "rsvp.minimum_policed_unit", "rsvp.maximum_packet_size",
		"rsvp.flowspec.rate", "rsvp.flowspec.slack_term", "_ws.malformed", "ip.opt.ra", "ipv6.opt.router_alert"}
	args := []string{"-n", "-r", pcap, "-T", "fields", "-E", "separator=|", "-E", "occurrence=a", "-E", "aggregator=,"}
	for _, f := range fields {
		args = append(args, "-e", f)
	}
	out, err = exec.Command(tshark, args...).Output()
	if err != nil {
		t.Fatalf("tshark fields: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != len(msgs) {
		t.Fatalf("tshark decoded %d packets, sent %d:\n%s", len(lines), len(msgs), out)
	}
	for i, m := range msgs {
		v := strings.Split(lines[i], "|")
		want := wantFields(m)
		for j, f := range fields {
			w, ok := want[f]
			if !ok {
				continue
			}
			if v[j] != w {
				t.Errorf("packet %d (%s %s): tshark %s = %q, configured %q", i+1, m.Type, m.Session.Dest, f, v[j], w)
			}
		}
	}
	if t.Failed() {
		t.Logf("tshark fields %v:\n%s", fields, out)
	}
}

// Sender4or6 is the sending end of the test pair for m's family.
func (m *Message) Sender4or6(a4, a6 netip.Addr) netip.Addr {
	if m.Session.Dest.Is6() {
		return a6
	}
	return a4
}

// wantFields is what tshark must show for m: message type, the Tspec of a
// sender descriptor, the flowspecs, no malformed marker.
func wantFields(m *Message) map[string]string {
	f32 := func(v float32) string {
		if math.IsInf(float64(v), 1) {
			return "inf"
		}
		return strconv.FormatFloat(float64(v), 'f', -1, 32)
	}
	w := map[string]string{"rsvp.msg": strconv.Itoa(int(m.Type)), "_ws.malformed": "", "ip.opt.ra": "", "ipv6.opt.router_alert": ""}
	if m.Type == Path || m.Type == PathTear {
		// Router Alert: IPv4 value 0 (examine packet), IPv6 value 1 (RSVP).
		if m.Session.Dest.Is6() {
			w["ipv6.opt.router_alert"] = "1"
		} else {
			w["ip.opt.ra"] = "0"
		}
	}
	var mins, maxs []string
	if m.Sender != nil && m.Sender.Tspec != nil {
		ts := m.Sender.Tspec
		w["rsvp.tspec.token_bucket_rate"] = f32(ts.Rate)
		w["rsvp.tspec.token_bucket_size"] = f32(ts.Bucket)
		w["rsvp.tspec.peak_data_rate"] = f32(ts.Peak)
		mins = append(mins, fmt.Sprint(ts.MinUnit))
		maxs = append(maxs, fmt.Sprint(ts.MaxPacket))
	}
	var r, b, p, rr, ss []string
	for _, fd := range m.Flows {
		if fs := fd.Flowspec; fs != nil {
			r = append(r, f32(fs.Tspec.Rate))
			b = append(b, f32(fs.Tspec.Bucket))
			p = append(p, f32(fs.Tspec.Peak))
			mins = append(mins, fmt.Sprint(fs.Tspec.MinUnit))
			maxs = append(maxs, fmt.Sprint(fs.Tspec.MaxPacket))
			if fs.Service == ServiceGuaranteed {
				rr = append(rr, f32(fs.RspecRate))
				ss = append(ss, fmt.Sprint(fs.RspecSlack))
			}
		}
	}
	w["rsvp.flowspec.token_bucket_rate"] = strings.Join(r, ",")
	w["rsvp.flowspec.token_bucket_size"] = strings.Join(b, ",")
	w["rsvp.flowspec.peak_data_rate"] = strings.Join(p, ",")
	w["rsvp.flowspec.rate"] = strings.Join(rr, ",")
	w["rsvp.flowspec.slack_term"] = strings.Join(ss, ",")
	w["rsvp.minimum_policed_unit"] = strings.Join(mins, ",")
	w["rsvp.maximum_packet_size"] = strings.Join(maxs, ",")
	return w
}
