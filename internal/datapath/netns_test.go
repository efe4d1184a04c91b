package datapath

import (
	"errors"
	"fmt"
	"github.com/hostqos/hostqos/internal/cgroups"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/hostqos/hostqos/internal/testutil"
	"golang.org/x/sys/unix"
)

func udpSocket() (int, error) {
	return unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
}

func cgroupRoot(t testing.TB) string {
	root, err := cgroups.Root()
	if err != nil {
		t.Skipf("no cgroup2: %v", err)
	}
	return root
}

func TestRealSocketIdentityAndMarking(t *testing.T) {
	testutil.NeedRoot(t)
	cgroot := cgroupRoot(t)
	p := testutil.NewPair(t)
	nsA, ifA := p.A, p.IfA
	dir := testutil.TempPinDir(t)

	self, err := IdentityForPID(os.Getpid(), cgroot)
	if err != nil {
		t.Fatal(err)
	}

	var d *Datapath
	var fdA, fdOld, ifindex int
	nsA.MustDo(t, func() error {
		var err error
		// Born before the datapath: no identity.
		if fdOld, err = udpSocket(); err != nil {
			return err
		}
		d, err = Open(Options{BPFFSDir: dir, CgroupPath: cgroot})
		if err != nil {
			return err
		}
		if fdA, err = udpSocket(); err != nil {
			return err
		}
		ifi, err := net.InterfaceByName(ifA)
		if err != nil {
			return err
		}
		ifindex = ifi.Index
		return attachAsDaemon(d, ifindex)
	})
	t.Cleanup(func() { d.Close() })
	defer unix.Close(fdA)
	defer unix.Close(fdOld)
	if _, ok, _ := d.IdentityOf(fdOld); ok {
		t.Error("socket created before the datapath has an identity")
	}

	// Identity recorded at birth.
	id, ok, err := d.IdentityOf(fdA)
	if err != nil || !ok {
		t.Fatalf("identity of socket in managed netns: ok=%v err=%v", ok, err)
	}
	if id.PID != self.PID || id.UID != self.UID || id.Comm != self.Comm || id.Exe != self.Exe {
		t.Errorf("identity %+v, want %+v", id, self)
	}
	if fmt.Sprint(id.Cgroups) != fmt.Sprint(self.Cgroups) {
		t.Errorf("cgroups %v, want %v", id.Cgroups, self.Cgroups)
	}

	// A socket of another netns (the host's) gets no identity.
	fdH, err := udpSocket()
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fdH)
	if _, ok, err := d.IdentityOf(fdH); err != nil || ok {
		t.Errorf("socket in another netns: has identity=%v err=%v", ok, err)
	}
	// TagSocket fills in sockets born without one, once.
	tagged := Identity{PID: 4242, UID: 7, Comm: "oldproc", Exe: FileID{Dev: 1, Ino: 2}, Cgroups: []uint64{1, 2}}
	if wrote, err := d.TagSocket(fdH, tagged); err != nil || !wrote {
		t.Fatalf("tag socket: wrote=%v err=%v", wrote, err)
	}
	if wrote, err := d.TagSocket(fdH, self); err != nil || wrote {
		t.Errorf("second tag: wrote=%v err=%v, want false", wrote, err)
	}
	if got, ok, _ := d.IdentityOf(fdH); !ok || fmt.Sprint(got) != fmt.Sprint(tagged) {
		t.Errorf("tagged identity %+v, want %+v", got, tagged)
	}

	// App rules: the first three do not match us, the fourth does.
	otherUID := uint32(4242)
	own := self.Cgroups[len(self.Cgroups)-1]
	pol := Policy{Rules: []Rule{
		{Slot: 1, Comm: "not-us", Proto: 17, DSCPIn: -1, DSCP: 8},
		{Slot: 2, UID: &otherUID, Proto: 17, DSCPIn: -1, DSCP: 10},
		{Slot: 3, Exes: []FileID{self.Exe}, Comm: "not-us", DSCPIn: -1, DSCP: 12},
		{Slot: 4, Exes: []FileID{{Dev: 1, Ino: 1}, self.Exe}, Cgroups: []CgroupRef{{ID: own, Level: len(self.Cgroups) - 1}},
			Proto: 17, RPortFrom: 9999, DSCPIn: -1, DSCP: 46, ClassID: 0x10010},
		{Slot: 5, Proto: 17, DSCPIn: -1, DSCP: 18},
	}}
	if err := d.Apply(pol); err != nil {
		t.Fatal(err)
	}

	// The receiver in B reports the TOS it got.
	rx := testutil.NewReceiver(t, p.B, p.IfB)
	recvTOS := func() (uint8, error) {
		pkt, err := rx.Next(3*time.Second, testutil.UDPTo(9999))
		return pkt.TOS, err
	}

	dst := &unix.SockaddrInet4{Port: 9999, Addr: testutil.PairB4.Addr().As4()}
	if err := unix.Sendto(fdA, []byte("hello"), 0, dst); err != nil {
		t.Fatalf("send: %v", err)
	}
	tos, err := recvTOS()
	if err != nil {
		t.Fatal(err)
	}
	if tos != 46<<2 {
		t.Errorf("received TOS %#x, want %#x (EF)", tos, 46<<2)
	}

	ctr, err := d.RuleCounters()
	if err != nil {
		t.Fatal(err)
	}
	if ctr[4].Packets < 1 {
		t.Errorf("rule slot 4 counters %+v", ctr[4])
	}
	for _, s := range []int{1, 2, 3} {
		if ctr[s].Packets != 0 {
			t.Errorf("non-matching app rule slot %d counted %+v", s, ctr[s])
		}
	}
	found := false
	_ = d.Flows(func(f Flow) bool {
		if f.Key.Remote.Port() == 9999 {
			found = true
			if f.PID != self.PID || f.Comm != self.Comm || f.RuleSlot != 4 {
				t.Errorf("flow %+v", f)
			}
		}
		return true
	})
	if !found {
		t.Error("flow to :9999 not in the flow table")
	}

	// A socket without identity matches no app rule: the catch-all applies.
	if err := unix.Sendto(fdOld, []byte("old"), 0, dst); err != nil {
		t.Fatalf("send: %v", err)
	}
	if tos, err = recvTOS(); err != nil {
		t.Fatal(err)
	}
	if tos != 18<<2 {
		t.Errorf("socket without identity: received TOS %#x, want %#x", tos, 18<<2)
	}
	st, err := d.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st.Classified < 2 || st.NoIdentity < 1 || st.IdentityFail != 0 {
		t.Errorf("stats %+v", st)
	}
}

func progID(t testing.TB, p *ebpf.Program) ebpf.ProgramID {
	t.Helper()
	info, err := p.Info()
	if err != nil {
		t.Fatal(err)
	}
	id, _ := info.ID()
	return id
}

func tcxPrograms(t testing.TB, ns *testutil.NetNS, ifindex int) []ebpf.ProgramID {
	t.Helper()
	var ids []ebpf.ProgramID
	ns.MustDo(t, func() error {
		res, err := link.QueryPrograms(link.QueryOptions{Target: ifindex, Attach: ebpf.AttachTCXEgress})
		if err != nil {
			return err
		}
		for _, p := range res.Programs {
			ids = append(ids, p.ID)
		}
		return nil
	})
	return ids
}

func cgroupPrograms(t testing.TB, cgroot string) []ebpf.ProgramID {
	t.Helper()
	f, err := os.Open(cgroot)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	res, err := link.QueryPrograms(link.QueryOptions{Target: int(f.Fd()), Attach: ebpf.AttachCGroupInetSockCreate})
	if err != nil {
		t.Fatal(err)
	}
	var ids []ebpf.ProgramID
	for _, p := range res.Programs {
		ids = append(ids, p.ID)
	}
	return ids
}

func contains(ids []ebpf.ProgramID, id ebpf.ProgramID) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

func TestAdoptAndRemove(t *testing.T) {
	testutil.NeedRoot(t)
	cgroot := cgroupRoot(t)
	p := testutil.NewPair(t)
	nsA, ifA := p.A, p.IfA
	dir := testutil.TempPinDir(t)

	var ifindex int
	open := func() *Datapath {
		var d *Datapath
		nsA.MustDo(t, func() error {
			ifi, err := net.InterfaceByName(ifA)
			if err != nil {
				return err
			}
			ifindex = ifi.Index
			d, err = Open(Options{BPFFSDir: dir, CgroupPath: cgroot, FlowTableSize: 1024})
			return err
		})
		return d
	}

	d1 := open()
	if d1.Adopted() {
		t.Fatal("fresh directory reported as adopted")
	}
	nsA.MustDo(t, func() error { return d1.AttachLink(ifindex) })
	if err := d1.Apply(Policy{Rules: []Rule{{Slot: 3, Proto: 17, DSCPIn: -1, DSCP: 46}}}); err != nil {
		t.Fatal(err)
	}
	frame := BuildFrame(FrameSpec{Src: addr("198.18.0.1"), Dst: addr("198.18.0.2"), Proto: 17, SPort: 1, DPort: 2})
	for i := 0; i < 3; i++ {
		if _, err := d1.TestRun(frame, 1); err != nil {
			t.Fatal(err)
		}
	}
	gen := d1.Generation()
	oldTC, oldSock := progID(t, d1.objs.HqTcEgress), progID(t, d1.objs.HqSockCreate)
	d1.Close() // as if killed: pins stay

	if ids := tcxPrograms(t, nsA, ifindex); len(ids) != 1 || ids[0] != oldTC {
		t.Fatalf("after close: tcx programs %v, want [%d]", ids, oldTC)
	}
	if !contains(cgroupPrograms(t, cgroot), oldSock) {
		t.Fatal("after close: sock_create program no longer attached")
	}

	// A restart of the same build takes the programs it verified before
	// (pinned beside the maps) instead of verifying them again.
	dr := open()
	if !dr.Adopted() || progID(t, dr.objs.HqTcEgress) != oldTC || progID(t, dr.objs.HqSockCreate) != oldSock {
		t.Errorf("restart: programs %d, %d; want the pinned %d, %d", progID(t, dr.objs.HqTcEgress), progID(t, dr.objs.HqSockCreate), oldTC, oldSock)
	}
	dr.Close()
	// Another build (here: without the pinned programs) verifies its own
	// and swaps them into the pinned links in place.
	if err := os.RemoveAll(filepath.Join(dir, progsDir)); err != nil {
		t.Fatal(err)
	}
	d2 := open()
	defer d2.Close()
	if !d2.Adopted() || d2.Generation() != gen || d2.FlowTableSize() != 1024 {
		t.Fatalf("adopted=%v generation %d (want %d) flow table %d", d2.Adopted(), d2.Generation(), gen, d2.FlowTableSize())
	}
	nsA.MustDo(t, func() error {
		if ok, err := d2.LinkAttached(ifindex); err != nil || !ok {
			t.Errorf("adopted datapath does not see its TCX link on the hook (err %v)", err)
		}
		return nil
	})
	newTC, newSock := progID(t, d2.objs.HqTcEgress), progID(t, d2.objs.HqSockCreate)
	if ids := tcxPrograms(t, nsA, ifindex); len(ids) != 1 || ids[0] != newTC {
		t.Errorf("after adopt: tcx programs %v, want [%d] (link updated in place)", ids, newTC)
	}
	cg := cgroupPrograms(t, cgroot)
	if !contains(cg, newSock) || contains(cg, oldSock) {
		t.Errorf("after adopt: cgroup programs %v, want %d and not %d", cg, newSock, oldSock)
	}
	res, err := d2.TestRun(frame, 1)
	if err != nil {
		t.Fatal(err)
	}
	if tosOf(res.Packet) != 46<<2 {
		t.Errorf("adopted policy not active: tos %#x", tosOf(res.Packet))
	}
	ctr, err := d2.RuleCounters()
	if err != nil {
		t.Fatal(err)
	}
	if ctr[3].Packets != 4 {
		t.Errorf("counters after adopt %+v, want 4 packets", ctr[3])
	}
	// (Evaluations are not asserted: the veth's own IPv6 chatter also
	// passes the attached classifier.)

	// Someone detaches our program from the hook: the datapath sees it and
	// AttachLink puts it back.
	nsA.MustDo(t, func() error {
		d2.mu.Lock()
		l := d2.tcx[ifindex]
		d2.mu.Unlock()
		if err := l.Detach(); err != nil {
			return fmt.Errorf("detach behind the datapath's back: %w", err)
		}
		if ok, err := d2.LinkAttached(ifindex); err != nil || ok {
			t.Errorf("after an outside detach LinkAttached = %v, %v; want false", ok, err)
		}
		if err := d2.AttachLink(ifindex); err != nil {
			return err
		}
		if ok, err := d2.LinkAttached(ifindex); err != nil || !ok {
			t.Errorf("AttachLink did not re-attach: %v, %v", ok, err)
		}
		return nil
	})

	// Adopting with a stale layout is refused with a hint.
	d2.Close()
	if err := Remove(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("pin dir still there after Remove: %v", err)
	}
	if ids := tcxPrograms(t, nsA, ifindex); len(ids) != 0 {
		t.Errorf("after remove: tcx programs %v", ids)
	}
	if contains(cgroupPrograms(t, cgroot), newSock) {
		t.Error("after remove: sock_create still attached")
	}
}

func TestAdoptIncompatible(t *testing.T) {
	testutil.NeedRoot(t)
	dir := testutil.TempPinDir(t)
	d := openTest(t, Options{BPFFSDir: dir})
	d.Close()
	// Replace a pinned map by one of another layout.
	if err := os.Remove(dir + "/hq_rules"); err != nil {
		t.Fatal(err)
	}
	m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := m.Pin(dir + "/hq_rules"); err != nil {
		t.Fatal(err)
	}
	_, err = Open(Options{BPFFSDir: dir})
	t.Logf("open error: %v", err)
	if err == nil || !strings.Contains(err.Error(), "hq_rules") || !strings.Contains(err.Error(), "hostqos down") {
		t.Errorf("open with incompatible pin: %v", err)
	}
}
