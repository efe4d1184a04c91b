package datapath

import (
	"net"
	"os"
	"testing"

	"github.com/hostqos/hostqos/internal/testutil"
	"golang.org/x/sys/unix"
	"time"
)

// TestFlowAppRulePrecedence: rules are evaluated in policy order whether
// they select by flow or by app. A flow rule before an app rule wins for a
// socket of the app the app rule names; with the two rules swapped the app
// rule wins. Checked on a real socket with its identity recorded at birth,
// both for a flow that is new under the policy and for one re-evaluated
// after a policy change, by the DSCP the receiver sees, the rule counters
// and the flow table.
func TestFlowAppRulePrecedence(t *testing.T) {
	testutil.NeedRoot(t)
	cgroot := cgroupRoot(t)
	p := testutil.NewPair(t)
	nsA, ifA := p.A, p.IfA
	dir := testutil.TempPinDir(t)
	t.Cleanup(func() {
		if err := Remove(dir); err != nil {
			t.Errorf("remove %s: %v", dir, err)
		}
	})

	self, err := IdentityForPID(os.Getpid(), cgroot)
	if err != nil {
		t.Fatal(err)
	}

	var d *Datapath
	nsA.MustDo(t, func() error {
		var err error
		if d, err = Open(Options{BPFFSDir: dir, CgroupPath: cgroot, FlowTableSize: 1024}); err != nil {
			return err
		}
		ifi, err := net.InterfaceByName(ifA)
		if err != nil {
			return err
		}
		return attachAsDaemon(d, ifi.Index)
	})
	t.Cleanup(func() { d.Close() })
	t.Logf("loops=%s (auto), tcx=%v", d.Loops(), HaveTCX())

	// Sockets of this process, born in the managed namespace: each one has
	// our identity.
	newSocket := func() int {
		t.Helper()
		var fd int
		nsA.MustDo(t, func() error {
			var err error
			fd, err = udpSocket()
			return err
		})
		t.Cleanup(func() { unix.Close(fd) })
		if id, ok, err := d.IdentityOf(fd); err != nil || !ok || id.Exe != self.Exe {
			t.Fatalf("identity of a socket in the managed netns: %+v ok=%v err=%v", id, ok, err)
		}
		return fd
	}

	rx := testutil.NewReceiver(t, p.B, p.IfB)
	dst := &unix.SockaddrInet4{Port: 9999, Addr: testutil.PairB4.Addr().As4()}

	// The flow rule matches UDP to port 9999 (AF11), the app rule any
	// packet of our executable (EF).
	flowRule := Rule{Slot: 1, Proto: 17, RPortFrom: 9999, DSCPIn: -1, DSCP: 10, ClassID: 0x10010}
	appRule := Rule{Slot: 2, Exes: []FileID{self.Exe}, DSCPIn: -1, DSCP: 46, ClassID: 0x10020}

	// send sends one datagram from fd and returns the DSCP the receiver got.
	send := func(fd int) uint8 {
		t.Helper()
		if err := unix.Sendto(fd, []byte("precedence"), 0, dst); err != nil {
			t.Fatalf("send: %v", err)
		}
		pkt, err := rx.Next(3*time.Second, testutil.UDPTo(9999))
		if err != nil {
			t.Fatal(err)
		}
		return pkt.TOS >> 2
	}
	localPort := func(fd int) uint16 {
		t.Helper()
		sa, err := unix.Getsockname(fd)
		if err != nil {
			t.Fatal(err)
		}
		return uint16(sa.(*unix.SockaddrInet4).Port)
	}
	counters := func() []Counters {
		t.Helper()
		c, err := d.RuleCounters()
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	// checkCounters asserts that the n packets sent since the counters
	// were before all counted for rule want, none for rule other.
	checkCounters := func(name string, before []Counters, n uint64, want, other Rule) {
		t.Helper()
		ctr := counters()
		if got := ctr[want.Slot].Packets - before[want.Slot].Packets; got != n {
			t.Errorf("%s: rule slot %d counted %d packets, want %d", name, want.Slot, got, n)
		}
		if got := ctr[other.Slot].Packets - before[other.Slot].Packets; got != 0 {
			t.Errorf("%s: rule slot %d counted %d packets, want 0", name, other.Slot, got)
		}
	}
	// applied is the policy applied last.
	var applied []Rule
	apply := func(rules ...Rule) {
		t.Helper()
		if err := d.Apply(Policy{Rules: rules}); err != nil {
			t.Fatal(err)
		}
		applied = rules
	}
	// checkFlow asserts that fd's flow is in the flow table with our
	// identity and rule want, the rule the reference evaluation (what
	// `hostqos explain` runs) gives the flow and our identity.
	checkFlow := func(name string, fd int, want Rule) {
		t.Helper()
		port := localPort(fd)
		found := false
		if err := d.Flows(func(f Flow) bool {
			if f.Key.Proto == 17 && f.Key.Local.Port() == port && f.Key.Remote.Port() == 9999 {
				found = true
				if f.RuleSlot != int(want.Slot) || f.PID != self.PID || f.Comm != self.Comm {
					t.Errorf("%s: flow %+v, want rule slot %d and our identity", name, f, want.Slot)
				}
				if i := Evaluate(applied, &Subject{Key: &f.Key, DSCP: 0, Ident: &self}); i < 0 || applied[i].Slot != want.Slot {
					t.Errorf("%s: the reference evaluation gives rule %d, want slot %d", name, i, want.Slot)
				}
			}
			return true
		}); err != nil {
			t.Fatal(err)
		}
		if !found {
			t.Errorf("%s: flow from port %d not in the flow table", name, port)
		}
	}

	// Flow rule first: it wins although the app rule matches the socket.
	apply(flowRule, appRule)
	fd1 := newSocket()
	before := counters()
	for i := 0; i < 2; i++ {
		if got := send(fd1); got != uint8(flowRule.DSCP) {
			t.Errorf("flow rule first, packet %d: DSCP %d, want %d (the flow rule)", i, got, flowRule.DSCP)
		}
	}
	checkCounters("flow rule first", before, 2, flowRule, appRule)
	checkFlow("flow rule first", fd1, flowRule)

	// App rule first: it wins, for the flow seen under the previous
	// policy (re-evaluated) and for a new one.
	apply(appRule, flowRule)
	fd2 := newSocket()
	before = counters()
	for _, fd := range []int{fd1, fd2} {
		if got := send(fd); got != uint8(appRule.DSCP) {
			t.Errorf("app rule first, socket port %d: DSCP %d, want %d (the app rule)", localPort(fd), got, appRule.DSCP)
		}
	}
	checkCounters("app rule first", before, 2, appRule, flowRule)
	checkFlow("app rule first, re-evaluated flow", fd1, appRule)
	checkFlow("app rule first, new flow", fd2, appRule)

	// And back: the flow rule first again wins for both flows.
	apply(flowRule, appRule)
	before = counters()
	for _, fd := range []int{fd1, fd2} {
		if got := send(fd); got != uint8(flowRule.DSCP) {
			t.Errorf("flow rule first again, socket port %d: DSCP %d, want %d (the flow rule)", localPort(fd), got, flowRule.DSCP)
		}
	}
	checkCounters("flow rule first again", before, 2, flowRule, appRule)
	checkFlow("flow rule first again", fd1, flowRule)
	checkFlow("flow rule first again", fd2, flowRule)
}
