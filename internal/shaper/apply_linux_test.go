package shaper

import (
	"encoding/binary"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/hostqos/hostqos/internal/testutil"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// newVeth makes a veth whose end hq0, in the namespace it returns with
// hq0's ifindex, is the link under test (testutil.NewPairNamed names an
// end after the namespace it faces). It skips the test without root.
func newVeth(t *testing.T) (*testutil.NetNS, int) {
	t.Helper()
	p := testutil.NewPairNamed(t, "shaper", "hq0")
	return p.A, p.IndexA
}

func sh(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// treeIn reads the root qdisc and our classes of ifindex inside ns.
func treeIn(t *testing.T, ns *testutil.NetNS, ifindex int) (netlink.Qdisc, map[uint16]kclass) {
	t.Helper()
	var root netlink.Qdisc
	var have map[uint16]kclass
	ns.MustDo(t, func() error {
		h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
		if err != nil {
			return err
		}
		defer h.Close()
		link, err := h.LinkByIndex(ifindex)
		if err != nil {
			return err
		}
		if root, err = rootQdisc(h, link); err != nil {
			return err
		}
		have, err = ourClasses(h, link)
		return err
	})
	return root, have
}

// checkTree asserts that the kernel tree on ifindex in ns is exactly plan.
func checkTree(t *testing.T, ns *testutil.NetNS, ifindex int, plan Plan) {
	t.Helper()
	root, have := treeIn(t, ns, ifindex)
	if root == nil || !isOurs(root) {
		t.Fatalf("root qdisc %v is not ours", root)
	}
	if got := root.(*netlink.Htb).Defcls; got != uint32(plan.DefaultMinor) {
		t.Errorf("root default %x, want %x", got, plan.DefaultMinor)
	}
	for _, c := range plan.Classes {
		k, ok := have[c.Minor]
		if !ok {
			t.Errorf("class %x (%s) missing", c.Minor, c.Label)
			continue
		}
		want := toKernel(c)
		if k.parent != want.parent {
			t.Errorf("class %x parent %x, want %x", c.Minor, k.parent, want.parent)
		}
		if !sameParams(want, k) {
			t.Errorf("class %x: kernel %+v, want %+v", c.Minor, k, want)
		}
		if k.leaf != c.Leaf {
			t.Errorf("class %x: kernel leaf=%v, plan leaf=%v", c.Minor, k.leaf, c.Leaf)
		}
		delete(have, c.Minor)
	}
	for m := range have {
		t.Errorf("kernel has class %x not in the plan", m)
	}
}

func testPlanA(t *testing.T, ifindex int) Plan {
	t.Helper()
	p, err := Build(LinkSpec{Ifindex: ifindex, Name: "hq0", Rate: 100 * mbit},
		[]ClassSpec{
			{Name: "voice", Index: 0, Priority: 0, MinBW: 2 * mbit, MaxBW: 5 * mbit},
			{Name: "default", Index: 2, Priority: 4, Default: true},
			{Name: "bulk", Index: 3, Priority: 6},
		},
		[]RuleSpec{
			{Slot: 12, Class: 3, MaxBW: 10 * mbit},
			{Slot: 7, Class: 0, MinBW: 1 * mbit},
			{Slot: 20, Class: 2, MaxBW: 20 * mbit},
		})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func testPlanB(t *testing.T, ifindex int) Plan {
	t.Helper()
	p, err := Build(LinkSpec{Ifindex: ifindex, Name: "hq0", Rate: 100 * mbit},
		[]ClassSpec{
			{Name: "voice", Index: 0, Priority: 0, MinBW: 2 * mbit, MaxBW: 8 * mbit},
			{Name: "default", Index: 2, Priority: 3, Default: true},
			{Name: "scavenger", Index: 4, Priority: 7},
		},
		[]RuleSpec{
			{Slot: 7, Class: 0, MinBW: 1 * mbit},
			{Slot: 20, Class: 0, MaxBW: 4 * mbit}, // moved from default to voice
			{Slot: 30, Class: 2, MinBW: 3 * mbit},
		})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// sendFrames transmits n Ethernet frames of size bytes on ifindex in ns
// through the qdisc, with skb->priority = prio (an AF_PACKET socket with
// SO_PRIORITY stands in for the datapath).
func sendFrames(t *testing.T, ns *testutil.NetNS, ifindex int, prio uint32, n, size int) {
	t.Helper()
	ns.MustDo(t, func() error {
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_PRIORITY, int(prio)); err != nil {
			return err
		}
		frame := make([]byte, size)
		copy(frame[0:6], []byte{0x02, 0, 0, 0, 0, 0x01})
		copy(frame[6:12], []byte{0x02, 0, 0, 0, 0, 0x02})
		binary.BigEndian.PutUint16(frame[12:14], 0x88b5) // local experimental ethertype
		sa := &unix.SockaddrLinklayer{Ifindex: ifindex, Protocol: htons(0x88b5), Halen: 6}
		copy(sa.Addr[:], frame[0:6])
		for i := 0; i < n; i++ {
			if err := unix.Sendto(fd, frame, 0, sa); err != nil {
				return err
			}
		}
		return nil
	})
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

func statsIn(t *testing.T, ns *testutil.NetNS, ifindex int) map[uint16]ClassStats {
	t.Helper()
	out := map[uint16]ClassStats{}
	ns.MustDo(t, func() error {
		st, err := Stats(ifindex)
		for _, s := range st {
			out[s.Minor] = s
		}
		return err
	})
	return out
}

// waitPackets polls Stats until minor has sent at least n packets.
func waitPackets(t *testing.T, ns *testutil.NetNS, ifindex int, minor uint16, n uint64) ClassStats {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for {
		s := statsIn(t, ns, ifindex)[minor]
		if s.Packets >= n || time.Now().After(deadline) {
			return s
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func applyIn(t *testing.T, ns *testutil.NetNS, p Plan) (int, error) {
	t.Helper()
	var ops int
	err := ns.Do(func() error {
		var err error
		ops, err = apply(p, newOptions(nil))
		return err
	})
	return ops, err
}

func TestApplyIdempotentAndInPlace(t *testing.T) {
	ns, ifx := newVeth(t)
	a := testPlanA(t, ifx)

	ops, err := applyIn(t, ns, a)
	if err != nil {
		t.Fatal(err)
	}
	if ops != 1+len(a.Classes) {
		t.Errorf("first Apply made %d changes, want %d (root + classes)", ops, 1+len(a.Classes))
	}
	checkTree(t, ns, ifx, a)
	ns.MustDo(t, func() error {
		owned, err := Owned(ifx)
		if err == nil && !owned {
			err = errors.New("Owned = false after Apply")
		}
		return err
	})

	// Again: nothing to do.
	if ops, err := applyIn(t, ns, a); err != nil || ops != 0 {
		t.Fatalf("second Apply: %d changes, err %v; want none", ops, err)
	}

	// Traffic through two classes that survive into plan B with new
	// parameters; HTB counts skb->len of each L2 frame.
	const frames, size = 20, 1000
	sendFrames(t, ns, ifx, classID(LeafBase+2), frames, size)
	sendFrames(t, ns, ifx, RuleClassID(7), frames, size)
	waitPackets(t, ns, ifx, LeafBase+2, frames) // IPv6 autoconfiguration may add a few
	if got := waitPackets(t, ns, ifx, RuleBase+7, frames); got.Packets != frames || got.Bytes != frames*size {
		t.Fatalf("rule 7 leaf counted %d packets %d bytes, want %d and %d", got.Packets, got.Bytes, frames, frames*size)
	}

	b := testPlanB(t, ifx)
	ops, err = applyIn(t, ns, b)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("plan A -> B: %d changes", ops)
	checkTree(t, ns, ifx, b)
	after := statsIn(t, ns, ifx)
	for _, m := range []uint16{LeafBase + 2, RuleBase + 7} {
		if after[m].Packets < frames {
			t.Errorf("class %x: %d packets after the update, want >= %d (changed in place)", m, after[m].Packets, frames)
		}
	}
	for _, m := range []uint16{InnerBase + 3, LeafBase + 3, RuleBase + 12} {
		if _, ok := after[m]; ok {
			t.Errorf("class %x of the removed bulk class survived", m)
		}
	}
	if ops, err := applyIn(t, ns, b); err != nil || ops != 0 {
		t.Fatalf("Apply of B again: %d changes, err %v; want none", ops, err)
	}

	// A new default class rebuilds the root (HTB cannot change it in place).
	c := b
	c.DefaultMinor = LeafBase + 0
	if _, err := applyIn(t, ns, c); err != nil {
		t.Fatal(err)
	}
	checkTree(t, ns, ifx, c)

	ns.MustDo(t, func() error { return Remove(ifx) })
	if root, _ := treeIn(t, ns, ifx); root != nil && isOurs(root) {
		t.Fatal("root still ours after Remove")
	}
	ns.MustDo(t, func() error { return Remove(ifx) }) // no-op
}

func TestApplyRollback(t *testing.T) {
	ns, ifx := newVeth(t)
	a := testPlanA(t, ifx)

	// bad = a with one class changed, then a chain of classes nested deeper
	// than HTB allows (8 levels): the kernel refuses part-way through.
	bad := a
	bad.Classes = append([]HTBClass(nil), a.Classes...)
	for i := range bad.Classes {
		if bad.Classes[i].Minor == LeafBase+2 {
			bad.Classes[i] = mkClass(LeafBase+2, InnerBase+2, 3*mbit, 50*mbit, 5, true, "changed")
		}
	}
	parent := RootMinor
	for i := uint16(0); i < 10; i++ {
		m := 0x2000 + i
		bad.Classes = append(bad.Classes, mkClass(m, parent, MinRate, MinRate, 0, i == 9, "deep"))
		parent = m
	}

	// On a fresh link: rollback restores the kernel's default root.
	if _, err := applyIn(t, ns, bad); err == nil {
		t.Fatal("Apply of a too-deep tree succeeded")
	} else {
		t.Logf("expected error: %v", err)
	}
	if root, have := treeIn(t, ns, ifx); root == nil || isOurs(root) || len(have) != 0 {
		t.Fatalf("after failed Apply on a fresh link: root %v, %d classes", root, len(have))
	}

	// Over an existing tree: rollback restores it exactly.
	if _, err := applyIn(t, ns, a); err != nil {
		t.Fatal(err)
	}
	if _, err := applyIn(t, ns, bad); err == nil {
		t.Fatal("Apply of a too-deep tree succeeded")
	}
	checkTree(t, ns, ifx, a)
	if ops, err := applyIn(t, ns, a); err != nil || ops != 0 {
		t.Fatalf("Apply after rollback: %d changes, err %v; want none", ops, err)
	}
}

func TestForeignRootUntouched(t *testing.T) {
	ns, ifx := newVeth(t)
	sh(t, "tc", "-n", ns.NetnsName, "qdisc", "add", "dev", "hq0", "root", "handle", "1:", "tbf", "rate", "1mbit", "burst", "10kb", "latency", "50ms")

	_, err := applyIn(t, ns, testPlanA(t, ifx))
	if !errors.Is(err, ErrForeignQdisc) {
		t.Fatalf("Apply over tbf: err %v, want ErrForeignQdisc", err)
	}
	if !strings.Contains(err.Error(), "tbf 1:") || !strings.Contains(err.Error(), "hq0") {
		t.Errorf("error %q does not name the link and the foreign qdisc", err)
	}
	if n := strings.Count(err.Error(), "hq0"); n != 1 {
		t.Errorf("error %q names the link %d times, want once", err, n)
	}
	t.Logf("expected error: %v", err)
	ns.MustDo(t, func() error {
		owned, err := Owned(ifx)
		if err == nil && owned {
			err = errors.New("Owned = true for a tbf root")
		}
		if err == nil {
			err = Remove(ifx)
		}
		return err
	})
	root, _ := treeIn(t, ns, ifx)
	if root == nil || root.Type() != "tbf" || root.Attrs().Handle != netlink.MakeHandle(1, 0) {
		t.Fatalf("root after Apply+Remove: %v, want the tbf 1: untouched", root)
	}
}

func TestClsactSurvives(t *testing.T) {
	ns, ifx := newVeth(t)
	sh(t, "tc", "-n", ns.NetnsName, "qdisc", "add", "dev", "hq0", "clsact")
	// A classic-BPF cls_bpf filter that matches nothing.
	sh(t, "tc", "-n", ns.NetnsName, "filter", "add", "dev", "hq0", "egress", "pref", "7", "bpf", "bytecode", "1,6 0 0 0,")
	filterThere := func(when string) {
		t.Helper()
		if out := sh(t, "tc", "-n", ns.NetnsName, "filter", "show", "dev", "hq0", "egress"); !strings.Contains(out, "pref 7 bpf") {
			t.Fatalf("%s: foreign egress filter gone:\n%s", when, out)
		}
		if out := sh(t, "tc", "-n", ns.NetnsName, "qdisc", "show", "dev", "hq0"); !strings.Contains(out, "clsact") {
			t.Fatalf("%s: foreign clsact gone:\n%s", when, out)
		}
	}
	a := testPlanA(t, ifx)
	if _, err := applyIn(t, ns, a); err != nil {
		t.Fatal(err)
	}
	filterThere("after Apply")
	checkTree(t, ns, ifx, a)
	ns.MustDo(t, func() error { return Remove(ifx) })
	filterThere("after Remove")
	if root, _ := treeIn(t, ns, ifx); root == nil || root.Attrs().Handle != 0 {
		t.Fatalf("root after Remove: %v, want the kernel default back", root)
	}
}
