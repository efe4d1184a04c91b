//go:build linux

package shaper

import (
	"errors"
	"fmt"

	"github.com/vishvananda/netlink"
)

// knownTree is what a successful Apply of a plan leaves on a link: its root's default
// class, its classes and the queue limit of each leaf (0: the kernel's
// default queue).
type knownTree struct {
	defcls  uint16
	classes map[uint16]kclass
	queues  map[uint16]uint32
}

// knownOf is the tree plan makes.
func knownOf(plan Plan) knownTree {
	k := knownTree{defcls: plan.DefaultMinor, classes: make(map[uint16]kclass, len(plan.Classes)), queues: map[uint16]uint32{}}
	for _, c := range plan.Classes {
		k.classes[c.Minor] = toKernel(c)
		if c.Leaf {
			k.queues[c.Minor] = c.QueueLimit
		}
	}
	return k
}

// errOtherRoot says the plan needs another root (HTB cannot change its
// default class): the tree is read and the root rebuilt.
var errOtherRoot = errors.New("plan has another default class")

// syncKnown makes the tree k (what the last Apply left) into plan's with
// targeted operations and no dump; an error means the kernel's tree is not
// k (or the plan needs another root), and the caller undoes and reads it.
func (t *txn) syncKnown(plan Plan, k knownTree) error {
	if err := checkPlan(plan); err != nil {
		return err
	}
	if k.defcls != plan.DefaultMinor {
		return errOtherRoot
	}
	added, err := t.syncClasses(plan, k.classes)
	if err != nil {
		return err
	}
	ifx := t.link.Attrs().Index
	for _, c := range plan.Classes {
		if !c.Leaf {
			continue
		}
		old := k.queues[c.Minor]
		if added[c.Minor] {
			old = 0 // a new class has the kernel's default queue
		}
		switch {
		case c.QueueLimit == old:
		case c.QueueLimit == 0:
			q := &netlink.GenericQdisc{QdiscAttrs: netlink.QdiscAttrs{LinkIndex: ifx,
				Handle: netlink.MakeHandle(QueueMajor(c.Minor), 0), Parent: classID(c.Minor)}, QdiscType: "pfifo"}
			if err := t.do(fmt.Sprintf("delete queue of HTB class %s", netlink.HandleStr(classID(c.Minor))),
				func() error { return t.h.QdiscDel(q) }, nil); err != nil {
				return err
			}
		default:
			if err := replacePfifo(ifx, classID(c.Minor), netlink.MakeHandle(QueueMajor(c.Minor), 0), c.QueueLimit); err != nil {
				return fmt.Errorf("set queue of HTB class %s to %d packets: %w", netlink.HandleStr(classID(c.Minor)), c.QueueLimit, err)
			}
		}
	}
	return nil
}
