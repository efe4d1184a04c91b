//go:build linux

package shaper

import (
	"encoding/binary"
	"fmt"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// syncQueues gives every leaf with a QueueLimit a pfifo of that many
// packets (replacing a pfifo of ours in place keeps its packets: the
// kernel only changes the limit) and gives leaves without one their
// default queue back. Its changes are not undone by a rollback: a queue
// limit is harmless under any tree.
func (t *txn) syncQueues(plan Plan) error {
	qs, err := retryDump(func() ([]netlink.Qdisc, error) { return t.h.QdiscList(t.link) })
	if err != nil {
		return fmt.Errorf("list qdiscs: %w", err)
	}
	ours := map[uint16]netlink.Qdisc{} // leaf minor -> our pfifo below it
	for _, q := range qs {
		a := q.Attrs()
		pmaj, pmin := netlink.MajorMinor(a.Parent)
		hmaj, _ := netlink.MajorMinor(a.Handle)
		if pmaj == Handle && q.Type() == "pfifo" && hmaj == QueueMajor(pmin) {
			ours[pmin] = q
		}
	}
	ifx := t.link.Attrs().Index
	for _, c := range plan.Classes {
		if !c.Leaf {
			continue
		}
		if c.QueueLimit == 0 {
			if q, ok := ours[c.Minor]; ok {
				if err := t.do(fmt.Sprintf("delete queue of HTB class %s", netlink.HandleStr(classID(c.Minor))),
					func() error { return t.h.QdiscDel(q) }, nil); err != nil {
					return err
				}
			}
			continue
		}
		if err := replacePfifo(ifx, classID(c.Minor), netlink.MakeHandle(QueueMajor(c.Minor), 0), c.QueueLimit); err != nil {
			return fmt.Errorf("set queue of HTB class %s to %d packets: %w", netlink.HandleStr(classID(c.Minor)), c.QueueLimit, err)
		}
	}
	return nil
}

// replacePfifo creates or changes the pfifo below parent (the netlink
// library has no pfifo with a limit).
func replacePfifo(ifindex int, parent, handle, limit uint32) error {
	req := nl.NewNetlinkRequest(unix.RTM_NEWQDISC, unix.NLM_F_CREATE|unix.NLM_F_REPLACE|unix.NLM_F_ACK)
	req.AddData(&nl.TcMsg{Family: nl.FAMILY_ALL, Ifindex: int32(ifindex), Handle: handle, Parent: parent})
	req.AddData(nl.NewRtAttr(nl.TCA_KIND, nl.ZeroTerminated("pfifo")))
	var opt [4]byte // struct tc_fifo_qopt
	binary.NativeEndian.PutUint32(opt[:], limit)
	req.AddData(nl.NewRtAttr(nl.TCA_OPTIONS, opt[:]))
	_, err := req.Execute(unix.NETLINK_ROUTE, 0)
	return err
}
