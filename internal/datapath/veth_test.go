package datapath

import (
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hostqos/hostqos/internal/shaper"
	"github.com/hostqos/hostqos/internal/testutil"
)

// A container (the path's client namespace) reaches the server through
// the host (the router, where the datapath runs): its packets are
// classified at the host side of its veth, with its socket's identity
// when the socket was made after its namespace was known, else with the
// veth's; marked there, counted once, and put in their HTB class on the
// host's uplink although forwarding and NAT clear everything but
// skb->tc_index.
func TestContainerVeth(t *testing.T) {
	if HTBMajor != shaper.Handle {
		t.Fatalf("the datapath hands on classes under major %#x, the shaper's root is %#x", HTBMajor, shaper.Handle)
	}
	// Every minor the shaper gives a class can be handed on in tc_index.
	for _, id := range []uint32{shaper.AckClassID(shaper.MaxRuleSlot), shaper.RTClassID(), shaper.QSchedBandClassID(shaper.QSchedBands - 1),
		shaper.SessionClassID(shaper.MaxSessionGroups, shaper.MaxSessionLeaves-1), shaper.RuleClassID(shaper.MaxRuleSlot)} {
		if m := uint16(id); m == 0 || m == tciNoClass {
			t.Errorf("class %#x: its minor cannot be handed on in tc_index", id)
		}
	}
	testutil.NeedRoot(t)
	cgroot := cgroupRoot(t)
	p := testutil.NewPath(t, 0)
	self, err := IdentityForPID(os.Getpid(), cgroot)
	if err != nil {
		t.Fatal(err)
	}
	veth := p.Router.Ifindex(t, p.Router.Iface("client"))
	uplinkName := p.Router.Iface("server")
	uplink := p.Router.Ifindex(t, uplinkName)
	// The uplink's HTB: the container's rule class 4851:101, default 4851:1.
	for _, args := range [][]string{
		{"qdisc", "add", "dev", uplinkName, "root", "handle", "4851:", "htb", "default", "1"},
		{"class", "add", "dev", uplinkName, "parent", "4851:", "classid", "4851:1", "htb", "rate", "1gbit"},
		{"class", "add", "dev", uplinkName, "parent", "4851:", "classid", "4851:101", "htb", "rate", "1gbit"},
	} {
		if out, err := p.Router.Command("tc", args...).CombinedOutput(); err != nil {
			t.Fatalf("tc %v: %v: %s", args, err, out)
		}
	}

	var d *Datapath
	var ctrCookie uint64
	var oldFD int
	p.Client.MustDo(t, func() error {
		var err error
		ctrCookie, err = NetnsCookie()
		if err != nil {
			return err
		}
		// Made before the datapath knows the container: no identity.
		oldFD, err = udpSocket()
		return err
	})
	defer unix.Close(oldFD)
	p.Router.MustDo(t, func() error {
		var err error
		if d, err = Open(Options{BPFFSDir: testutil.TempPinDir(t), CgroupPath: cgroot}); err != nil {
			return err
		}
		if err := attachAsDaemon(d, uplink); err != nil {
			return err
		}
		if err := d.SetContainerNetns(map[uint64]uint32{ctrCookie: 7}); err != nil {
			return err
		}
		if err := d.SetVethIdentity(veth, Identity{Container: 7}); err != nil {
			return err
		}
		return d.AttachVeth(veth)
	})
	t.Cleanup(func() { d.Close() })
	attached := func() bool {
		var ok bool
		p.Router.MustDo(t, func() error {
			var err error
			ok, err = d.VethAttached(veth)
			return err
		})
		return ok
	}
	if !attached() {
		t.Fatal("veth not attached after AttachVeth")
	}

	var newFD int
	p.Client.MustDo(t, func() error {
		var err error
		newFD, err = udpSocket()
		return err
	})
	defer unix.Close(newFD)
	id, ok, err := d.IdentityOf(newFD)
	if err != nil || !ok || id.Container != 7 || id.Exe != self.Exe {
		t.Fatalf("identity of a socket made in the container: %+v ok=%v err=%v", id, ok, err)
	}
	if _, ok, _ := d.IdentityOf(oldFD); ok {
		t.Fatal("a socket made before the container was known has an identity")
	}

	ctr := []CgroupRef{{ID: ContainerKey(7)}}
	const minor = 0x101
	if err := d.Apply(Policy{Rules: []Rule{
		{Slot: 3, Cgroups: ctr, Proto: 17, RPortFrom: 9400, DSCPIn: -1, DSCP: -1, Reservation: 1},
		{Slot: 4, Cgroups: ctr, Proto: 17, RPortFrom: 9500, DSCPIn: -1, DSCP: -1, ActionCode: ActDrop},
		{Slot: 1, Exes: []FileID{self.Exe}, Cgroups: ctr, Proto: 17, DSCPIn: -1, DSCP: 46, ClassID: uint32(HTBMajor)<<16 | minor},
		{Slot: 2, Cgroups: ctr, Proto: 17, DSCPIn: -1, DSCP: 10},
	}, Reservations: []Reservation{{ID: 1, MaxSessions: 1}}}); err != nil {
		t.Fatal(err)
	}
	// The container's sockets are admitted to its reservation's sessions
	// as the host's are: the second connect() is refused.
	p.Client.MustDo(t, func() error {
		dst := &unix.SockaddrInet4{Port: 9400, Addr: p.ServerV4.As4()}
		var fds [2]int
		for i := range fds {
			fd, err := udpSocket()
			if err != nil {
				return err
			}
			defer unix.Close(fd)
			fds[i] = fd
		}
		if err := unix.Connect(fds[0], dst); err != nil {
			return fmt.Errorf("first session of the container's reservation: %w", err)
		}
		if err := unix.Connect(fds[1], dst); err != unix.EPERM {
			return fmt.Errorf("second session over max_sessions 1: %v, want EPERM", err)
		}
		return nil
	})
	rx := testutil.NewReceiver(t, p.Server, p.Server.Iface("router"))
	send := func(fd, port int) testutil.Packet {
		t.Helper()
		dst := &unix.SockaddrInet4{Port: port, Addr: p.ServerV4.As4()}
		for i := 0; i < 5; i++ {
			if err := unix.Sendto(fd, []byte("x"), 0, dst); err != nil {
				t.Fatalf("send: %v", err)
			}
		}
		pkt, err := rx.Next(3*time.Second, testutil.UDPTo(uint16(port)))
		if err != nil {
			t.Fatal(err)
		}
		return pkt
	}
	if pkt := send(newFD, 9001); pkt.TOS != 46<<2 {
		t.Errorf("socket with the container's identity: TOS %#x, want EF", pkt.TOS)
	}
	if pkt := send(oldFD, 9002); pkt.TOS != 10<<2 {
		t.Errorf("socket without identity (the veth's): TOS %#x, want AF11", pkt.TOS)
	}
	// A drop rule drops at the veth, counted.
	p.Client.MustDo(t, func() error {
		for i := 0; i < 5; i++ {
			if err := unix.Sendto(newFD, []byte("x"), 0, &unix.SockaddrInet4{Port: 9500, Addr: p.ServerV4.As4()}); err != nil {
				return err
			}
		}
		return nil
	})
	if pkt, err := rx.Next(300*time.Millisecond, testutil.UDPTo(9500)); err == nil {
		t.Errorf("a packet of the container's drop rule arrived: %+v", pkt)
	}
	// Through NAT: the mark is the one on the wire, the class still holds.
	nft := p.Router.Command("nft", "-f", "-")
	nft.Stdin = strings.NewReader(fmt.Sprintf("table ip hqt {\n chain post {\n  type nat hook postrouting priority 100;\n  oifname %q masquerade\n }\n}\n", uplinkName))
	if out, err := nft.CombinedOutput(); err != nil {
		t.Fatalf("nft: %v: %s", err, out)
	}
	pkt := send(newFD, 9003)
	if pkt.TOS != 46<<2 || pkt.Flow.Src.Addr() != testutil.PathRouterS.Addr() {
		t.Errorf("through NAT: TOS %#x from %v, want EF from the router's %v", pkt.TOS, pkt.Flow.Src, testutil.PathRouterS.Addr())
	}

	out, err := p.Router.Command("tc", "-s", "class", "show", "dev", uplinkName, "classid", "4851:101").CombinedOutput()
	if err != nil {
		t.Fatalf("tc class show: %v: %s", err, out)
	}
	m := regexp.MustCompile(`Sent \d+ bytes (\d+) pkt`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("tc class show: %s", out)
	}
	if n, _ := strconv.Atoi(string(m[1])); n < 10 {
		t.Errorf("class 4851:101 on the uplink sent %d packets, want the container's 10 under its rule: %s", n, out)
	}
	ctrs, err := d.RuleCounters()
	if err != nil {
		t.Fatal(err)
	}
	// Counted once, at the veth: the uplink's classifier passes them on.
	if ctrs[1].Packets != 10 || ctrs[2].Packets != 5 || ctrs[4].Drops != 5 {
		t.Errorf("rule counters %+v %+v %+v, want 10 and 5 packets, 5 drops", ctrs[1], ctrs[2], ctrs[4])
	}
	flows, icmp := 0, 0
	_ = d.Flows(func(f Flow) bool {
		switch {
		case f.Key.Proto == 17 && f.Key.Remote.Addr() == p.ServerV4:
			flows++
			if f.Veth != veth || f.Key.Local.Addr() != p.ClientV4 {
				t.Errorf("flow %+v: want the container's address, veth %d", f, veth)
			}
		case f.Key.Proto == 1 && f.Key.Local.Addr() == p.ClientV4:
			// The server's port-unreachable errors, routed to the
			// container: counted at its veth, not on the uplink.
			icmp++
			if f.Veth != veth || f.RxPackets == 0 {
				t.Errorf("ICMP flow %+v: want the container's, received at veth %d", f, veth)
			}
		}
		return true
	})
	if flows != 4 || icmp != 1 {
		t.Errorf("%d UDP flows to the server and %d ICMP flows to the container, want the container's 4 (none under the NAT address) and 1", flows, icmp)
	}

	p.Router.MustDo(t, func() error { return d.DetachVeth(veth) })
	if attached() {
		t.Error("veth still attached after DetachVeth")
	}
	// A flow the uplink classified as the host's while the veth had no
	// classifiers (before the container was found) is the container's
	// from its first packet at the veth once it has them. Routed, not
	// NATed: the veth and the uplink see the same flow.
	if out, err := p.Router.Command("nft", "delete", "table", "ip", "hqt").CombinedOutput(); err != nil {
		t.Fatalf("nft delete: %v: %s", err, out)
	}
	if pkt := send(oldFD, 9004); pkt.TOS != 0 {
		t.Errorf("the container's packet without veth classifiers: TOS %#x, want none (the host's)", pkt.TOS)
	}
	for i := 0; i < 4; i++ { // the rest of that batch
		if _, err := rx.Next(3*time.Second, testutil.UDPTo(9004)); err != nil {
			t.Fatal(err)
		}
	}
	p.Router.MustDo(t, func() error {
		if err := d.SetVethIdentity(veth, Identity{Container: 7}); err != nil {
			return err
		}
		return d.AttachVeth(veth)
	})
	if pkt := send(oldFD, 9004); pkt.TOS != 10<<2 {
		t.Errorf("the same flow once the veth has its classifiers: TOS %#x, want AF11 (the container's rule)", pkt.TOS)
	}
	p.Router.MustDo(t, func() error { return d.DetachVeth(veth) })
}
