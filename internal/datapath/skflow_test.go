package datapath

import (
	"net"
	"testing"
	"time"

	"github.com/hostqos/hostqos/internal/testutil"
	"golang.org/x/sys/unix"
)

// The egress classifier keeps a socket's flow result on the socket
// (hq_sk_flow) and takes it from there: the marks, drops and counters a
// user sees must be those of the flow table, across policy changes, a
// socket's flows being classified again, and an unconnected socket that
// alternates destinations.
func TestSocketFlowCopy(t *testing.T) {
	testutil.NeedRoot(t)
	cgroot := cgroupRoot(t)
	p := testutil.NewPair(t)
	dir := testutil.TempPinDir(t)

	var d *Datapath
	var fdC, fdU, fd6 int
	p.A.MustDo(t, func() error {
		var err error
		if d, err = Open(Options{BPFFSDir: dir, CgroupPath: cgroot}); err != nil {
			return err
		}
		if fdC, err = udpSocket(); err != nil {
			return err
		}
		if fdU, err = udpSocket(); err != nil {
			return err
		}
		if fd6, err = unix.Socket(unix.AF_INET6, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0); err != nil {
			return err
		}
		ifi, err := net.InterfaceByName(p.IfA)
		if err != nil {
			return err
		}
		return attachAsDaemon(d, ifi.Index)
	})
	t.Cleanup(func() { d.Close() })
	defer unix.Close(fdC)
	defer unix.Close(fdU)
	defer unix.Close(fd6)

	b4 := testutil.PairB4.Addr().As4()
	to := func(port int) *unix.SockaddrInet4 { return &unix.SockaddrInet4{Port: port, Addr: b4} }
	if err := unix.Connect(fdC, to(9999)); err != nil {
		t.Fatal(err)
	}
	rx := testutil.NewReceiver(t, p.B, p.IfB)
	send := func(fd, port int) {
		t.Helper()
		err := unix.Sendto(fd, []byte("x"), 0, to(port))
		if err == unix.ECONNREFUSED { // the ICMP error of an earlier one
			err = unix.Sendto(fd, []byte("x"), 0, to(port))
		}
		if err != nil {
			t.Fatalf("send to :%d: %v", port, err)
		}
	}
	// expect: the next packet to port arrives with DSCP dscp (-1: none
	// arrives: dropped).
	expect := func(port uint16, dscp int) {
		t.Helper()
		pkt, err := rx.Next(2*time.Second, testutil.UDPTo(port))
		if dscp < 0 {
			if err == nil {
				t.Errorf("packet to :%d arrived, want it dropped", port)
			}
			return
		}
		if err != nil {
			t.Fatalf("packet to :%d: %v", port, err)
		}
		if int(pkt.TOS>>2) != dscp {
			t.Errorf("packet to :%d has DSCP %d, want %d", port, pkt.TOS>>2, dscp)
		}
	}
	flow := func(port uint16) Flow {
		t.Helper()
		var got Flow
		found := false
		_ = d.Flows(func(f Flow) bool {
			if f.Key.Remote.Port() == port && f.Key.Proto == unix.IPPROTO_UDP {
				got, found = f, true
			}
			return true
		})
		if !found {
			t.Fatalf("flow to :%d not in the flow table", port)
		}
		return got
	}
	policy := func(dscp9999 int, act Action) Policy {
		return Policy{Rules: []Rule{
			{Slot: 1, Proto: 17, RPortFrom: 9999, RPortTo: 9999, DSCPIn: -1, DSCP: int8(dscp9999), ActionCode: act},
			{Slot: 2, Proto: 17, RPortFrom: 9998, RPortTo: 9998, DSCPIn: -1, DSCP: 18},
			{Slot: 3, Proto: 17, RPortFrom: 9997, RPortTo: 9997, DSCPIn: -1, DSCP: 26},
		}}
	}

	if err := d.Apply(policy(46, ActPass)); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		send(fdC, 9999)
		expect(9999, 46)
	}
	var c hostqosHqSkflow
	if err := d.objs.HqSkFlow.Lookup(int32(fdC), &c); err != nil {
		t.Fatalf("the connected socket has no copy of its flow: %v", err)
	}
	if f := flow(9999); f.Packets != 5 || f.RuleSlot != 1 {
		t.Errorf("flow after 5 packets: %d packets, rule %d", f.Packets, f.RuleSlot)
	}

	// A new policy: the next packet has the new mark, the counts go on.
	if err := d.Apply(policy(10, ActPass)); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		send(fdC, 9999)
		expect(9999, 10)
	}
	if f := flow(9999); f.Packets != 8 {
		t.Errorf("flow after 8 packets: %d packets", f.Packets)
	}

	// A drop rule drops the socket's next packets and counts them.
	if err := d.Apply(policy(10, ActDrop)); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		send(fdC, 9999)
	}
	expect(9999, -1)
	if f := flow(9999); f.Packets != 11 || f.Drops != 3 {
		t.Errorf("flow after 3 drops: %d packets, %d drops", f.Packets, f.Drops)
	}
	ctr, err := d.RuleCounters()
	if err != nil {
		t.Fatal(err)
	}
	if ctr[1].Drops != 3 {
		t.Errorf("rule 1 counted %d drops, want 3", ctr[1].Drops)
	}

	// The socket's flows classified again (as when it becomes a
	// qsocket): not a stale copy.
	if err := d.Apply(policy(12, ActPass)); err != nil {
		t.Fatal(err)
	}
	send(fdC, 9999)
	expect(9999, 12)
	send(fdC, 9999)
	expect(9999, 12)
	// The entry's own generation, as the classifier sees it.
	entryGen := func() uint32 {
		t.Helper()
		var k hostqosHqFlowKey4
		var v hostqosHqFlow
		it := d.objs.HqFlows4.Iterate()
		for it.Next(&k, &v) {
			if k.Proto == unix.IPPROTO_UDP && k.Dport == 9999 && k.Sport != 0 {
				var sa unix.Sockaddr
				if sa, _ = unix.Getsockname(fdC); sa != nil && int(k.Sport) == sa.(*unix.SockaddrInet4).Port {
					return v.Gen
				}
			}
		}
		t.Fatalf("no entry for the connected socket's flow: %v", it.Err())
		return 0
	}
	g := entryGen()
	if n := d.forgetSocketFlows(fdC); n != 1 {
		t.Fatalf("forgot %d flows, want 1", n)
	}
	if eg := entryGen(); eg != g-1 {
		t.Fatalf("forgotten flow has generation %d, want %d", eg, g-1)
	}
	// Only the flow table's slow path moves it back to the current one.
	send(fdC, 9999)
	expect(9999, 12)
	if eg := entryGen(); eg != g {
		t.Errorf("forgotten flow after a packet: generation %d, want %d (a stale copy was taken)", eg, g)
	}
	if f := flow(9999); f.Packets != 14 {
		t.Errorf("flow after 14 packets: %d packets", f.Packets)
	}

	// An unconnected socket alternating destinations: each packet is its
	// own flow's.
	for i := 0; i < 4; i++ {
		send(fdU, 9999)
		expect(9999, 12)
		send(fdU, 9998)
		expect(9998, 18)
	}
	if f := flow(9998); f.Packets != 4 {
		t.Errorf("flow to :9998: %d packets, want 4", f.Packets)
	}

	// IPv6: the copy holds the whole key.
	b6 := &unix.SockaddrInet6{Port: 9997, Addr: testutil.PairB6.Addr().As16()}
	if err := unix.Connect(fd6, b6); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 4; i++ {
		err := unix.Sendto(fd6, []byte("x"), 0, nil)
		if err == unix.ECONNREFUSED {
			err = unix.Sendto(fd6, []byte("x"), 0, nil)
		}
		if err != nil {
			t.Fatalf("send over IPv6: %v", err)
		}
		expect(9997, 26)
	}
	if err := d.objs.HqSkFlow.Lookup(int32(fd6), &c); err != nil {
		t.Errorf("the IPv6 socket has no copy of its flow: %v", err)
	}
	if f := flow(9997); f.Packets != 4 || f.RuleSlot != 3 {
		t.Errorf("IPv6 flow after 4 packets: %d packets, rule %d", f.Packets, f.RuleSlot)
	}
}
