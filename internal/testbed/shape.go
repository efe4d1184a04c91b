package testbed

import (
	"bytes"
	"fmt"
	"strings"

	"github.com/vishvananda/netlink"
)

// QueueTime sizes the FIFO behind a testbed rate limit: it holds about this
// much traffic at the link rate, in full-size packets (at least 10).
const QueueTime = 50 // milliseconds

const fullFrame = 1514

// queuePackets is the FIFO limit for a rate.
func queuePackets(rate uint64) int {
	return max(10, int(rate*QueueTime/1000/8/fullFrame))
}

// DiffServ classes of the router role (HTB minor numbers under 1:).
const (
	ClassRoot     = 0x1
	ClassEF       = 0x10 // EF, VOICE-ADMIT: strict priority
	ClassAF4      = 0x20 // AF4x, AF3x, CS3..CS7 (but EF/VA)
	ClassAF4Low   = 0x21 // … drop precedence low (AFx1, CSx)
	ClassAF4High  = 0x22 // … drop precedence medium/high (AFx2, AFx3)
	ClassAF1      = 0x30 // AF1x, AF2x, CS2
	ClassAF1Low   = 0x31
	ClassAF1High  = 0x32
	ClassDefault  = 0x40 // CS0 and anything unmatched
	ClassScavenge = 0x50 // CS1, LE: lower effort than default
	// RateOnlyClass is the single class of a plain rate limit.
	RateOnlyClass = 0x10
)

// shape puts the rate limit (and DiffServ classes) on iface's egress:
// HTB and its classes through netlink, leaf FIFOs and u32 DSCP filters
// through one `tc -batch` run inside the namespace.
func (n *Node) shape(iface string, rate uint64, queue int, diffserv bool) error {
	lk, err := n.h.LinkByName(iface)
	if err != nil {
		return fmt.Errorf("find %s in %s: %w", iface, n.Name, err)
	}
	idx := lk.Attrs().Index
	q := netlink.NewHtb(netlink.QdiscAttrs{LinkIndex: idx, Handle: netlink.MakeHandle(1, 0), Parent: netlink.HANDLE_ROOT})
	q.Defcls = RateOnlyClass
	if diffserv {
		q.Defcls = ClassDefault
	}
	if err := n.h.QdiscAdd(q); err != nil {
		return fmt.Errorf("add HTB root on %s/%s: %w", n.Name, iface, err)
	}
	class := func(parent, minor uint16, r, ceil uint64, prio uint32) error {
		c := netlink.NewHtbClass(
			netlink.ClassAttrs{LinkIndex: idx, Parent: netlink.MakeHandle(1, parent), Handle: netlink.MakeHandle(1, minor)},
			netlink.HtbClassAttrs{Rate: max(r, 8000), Ceil: ceil, Prio: prio, Quantum: 2 * fullFrame})
		if err := n.h.ClassAdd(c); err != nil {
			return fmt.Errorf("add HTB class 1:%x (rate %d) on %s/%s: %w", minor, r, n.Name, iface, err)
		}
		return nil
	}
	var batch bytes.Buffer
	fifo := func(minor uint16, limit int) {
		fmt.Fprintf(&batch, "qdisc add dev %s parent 1:%x handle %x: pfifo limit %d\n", iface, minor, minor, max(limit, 4))
	}
	limit := queuePackets(rate)
	if queue > 0 {
		limit = queue
	}
	if !diffserv {
		if err := class(0, RateOnlyClass, rate, rate, 0); err != nil {
			return err
		}
		fifo(RateOnlyClass, limit)
		return n.tcBatch(batch.String())
	}
	L := rate
	steps := []struct {
		parent, minor uint16
		rate          uint64
		prio          uint32
		leafLimit     int // 0 = inner class
	}{
		{0, ClassRoot, L, 0, 0},
		{ClassRoot, ClassEF, L * 30 / 100, 0, limit},
		{ClassRoot, ClassAF4, L * 30 / 100, 1, 0},
		{ClassAF4, ClassAF4Low, L * 20 / 100, 1, limit},
		{ClassAF4, ClassAF4High, L * 10 / 100, 1, limit / 4},
		{ClassRoot, ClassAF1, L * 20 / 100, 2, 0},
		{ClassAF1, ClassAF1Low, L * 13 / 100, 2, limit},
		{ClassAF1, ClassAF1High, L * 7 / 100, 2, limit / 4},
		{ClassRoot, ClassDefault, L * 15 / 100, 3, limit},
		{ClassRoot, ClassScavenge, L * 5 / 100, 7, limit},
	}
	for _, s := range steps {
		if err := class(s.parent, s.minor, s.rate, L, s.prio); err != nil {
			return err
		}
		if s.leafLimit > 0 {
			fifo(s.minor, s.leafLimit)
		}
	}
	for _, f := range diffservFilters() {
		// IPv4: the TOS byte is byte 1 of the header. IPv6: the traffic
		// class is bits 4..11 of the first 32-bit word.
		fmt.Fprintf(&batch, "filter add dev %s parent 1: protocol ip prio %d u32 match u8 0x%02x 0x%02x at 1 flowid 1:%x\n",
			iface, f.prio, f.dscp<<2, f.mask<<2, f.class)
		fmt.Fprintf(&batch, "filter add dev %s parent 1: protocol ipv6 prio %d u32 match u16 0x%04x 0x%04x at 0 flowid 1:%x\n",
			iface, f.prio+100, uint16(f.dscp)<<6, uint16(f.mask)<<6, f.class)
	}
	return n.tcBatch(batch.String())
}

type dsFilter struct {
	prio        int
	dscp, mask  uint8
	class       uint16
	description string
}

// diffservFilters maps DSCPs to classes. Exact matches first (EF, VA, CS1,
// LE), then by class selector (the DSCP's top 3 bits) and the
// drop-precedence bit (DSCP bit 2, set for AFx2 and AFx3). LE (RFC 8622)
// shares the scavenger class with CS1, RFC 4594's earlier mark for
// low-priority data.
func diffservFilters() []dsFilter {
	fs := []dsFilter{
		{1, 46, 0x3f, ClassEF, "EF"},
		{2, 44, 0x3f, ClassEF, "VOICE-ADMIT"},
		{3, 8, 0x3f, ClassScavenge, "CS1"},
		{4, 1, 0x3f, ClassScavenge, "LE"},
	}
	prio := 10
	for cs := uint8(1); cs <= 7; cs++ {
		low, high := uint16(ClassAF4Low), uint16(ClassAF4High)
		if cs <= 2 {
			low, high = ClassAF1Low, ClassAF1High
		}
		fs = append(fs,
			dsFilter{prio, cs << 3, 0x3c, low, fmt.Sprintf("class %d, low drop precedence", cs)},
			dsFilter{prio + 1, cs<<3 | 4, 0x3c, high, fmt.Sprintf("class %d, high drop precedence", cs)})
		prio += 2
	}
	return fs
}

// DiffServClass is one leaf class of the DiffServ router role and what its
// HTB class counted: bytes and packets sent, packets dropped.
type DiffServClass struct {
	Name    string `json:"name"`
	DSCPs   string `json:"dscps"`
	Bytes   uint64 `json:"bytes"`
	Packets uint64 `json:"packets"`
	Drops   uint64 `json:"drops"`
}

// diffservLeaves are the router role's leaf classes, highest priority first.
var diffservLeaves = []struct {
	minor       uint16
	name, dscps string
}{
	{ClassEF, "EF", "EF, VA"},
	{ClassAF4Low, "AF4", "AF41, AF31, CS3-CS7"},
	{ClassAF4High, "AF4 high drop", "AF42, AF43, AF32, AF33"},
	{ClassAF1Low, "AF1", "AF11, AF21, CS2"},
	{ClassAF1High, "AF1 high drop", "AF12, AF13, AF22, AF23"},
	{ClassDefault, "default", "CS0, unmatched"},
	{ClassScavenge, "scavenger", "CS1, LE"},
}

// DiffServStats reads the counters of the DiffServ router role on n's
// egress toward peer, one entry per leaf class, highest priority first.
// The counters run from the link's creation: subtract two readings for an
// interval.
func (n *Node) DiffServStats(peer string) ([]DiffServClass, error) {
	iface := n.Iface(peer)
	lk, err := n.h.LinkByName(iface)
	if err != nil {
		return nil, fmt.Errorf("find %s in %s: %w", iface, n.Name, err)
	}
	classes, err := n.h.ClassList(lk, 0)
	if err != nil {
		return nil, fmt.Errorf("list HTB classes of %s/%s: %w", n.Name, iface, err)
	}
	byMinor := map[uint16]netlink.Class{}
	for _, c := range classes {
		if major, minor := netlink.MajorMinor(c.Attrs().Handle); major == 1 {
			byMinor[minor] = c
		}
	}
	out := make([]DiffServClass, 0, len(diffservLeaves))
	for _, l := range diffservLeaves {
		c, ok := byMinor[l.minor]
		if !ok {
			return nil, fmt.Errorf("read DiffServ class 1:%x on %s/%s: no such class (is it a DiffServ link?)", l.minor, n.Name, iface)
		}
		dc := DiffServClass{Name: l.name, DSCPs: l.dscps}
		if st := c.Attrs().Statistics; st != nil {
			if st.Basic != nil {
				dc.Bytes, dc.Packets = st.Basic.Bytes, uint64(st.Basic.Packets)
			}
			if st.Queue != nil {
				dc.Drops = uint64(st.Queue.Drops)
			}
		}
		out = append(out, dc)
	}
	return out, nil
}

// tcBatch runs tc commands inside the namespace in one process.
func (n *Node) tcBatch(cmds string) error {
	if strings.TrimSpace(cmds) == "" {
		return nil
	}
	c := n.Command("tc", "-batch", "-")
	c.Stdin = strings.NewReader(cmds)
	out, err := c.CombinedOutput()
	if err != nil {
		return fmt.Errorf("run tc -batch in %s: %w: %s", n.Name, err, strings.TrimSpace(string(out)))
	}
	return nil
}
