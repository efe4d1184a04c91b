package engine

import (
	"fmt"

	"github.com/hostqos/hostqos/internal/datapath"
	"github.com/hostqos/hostqos/internal/policy"
	"github.com/hostqos/hostqos/internal/units"
)

// The host-wide qsocket scheduler (docs/qsockets.md, "Schedulers"). Every
// qsocket whose scheduler is not fifo declares a rate (bit/s; default
// DefaultQSchedRate). On every shaped link the HTB tree gets a qsched
// class whose rate (and ceiling) is the sum of those rates, with eight
// band leaves of strict priority; the datapath (hq_qsched, by ifindex)
// serves the class's virtual finish time at that rate, decides each
// datagram (send to the band of its slack, or drop if it cannot meet its
// deadline) and never holds one. The sum is read from the datapath's
// qsocket table each time the links are planned, so a restarted daemon
// and a closed socket need no state of their own; the rescan's sync shrinks
// the class when sockets closed.

// DefaultQSchedRate is the rate a scheduled qsocket that declares none is
// admitted and served at (bit/s).
const DefaultQSchedRate = 1_000_000

// DefaultMaxUserQSchedRate bounds the declared rates of one ordinary
// user's scheduled qsockets together (bit/s; hostqosd
// --max-user-qsched-rate): the qsched class serves them ahead of every
// class, so without a bound a user could take half of each link at the
// highest priority whatever class the admin opened to them.
const DefaultMaxUserQSchedRate = 4_000_000

// QSchedShare is the part of a shaped link (percent) that the scheduled
// qsockets' rates may take together.
const QSchedShare = 50

// scheduled says whether a qsocket's scheduler is one the datapath runs.
func scheduled(q datapath.QSock) bool { return q.Sched > datapath.SchedFIFO }

// qschedRate is the sum of the declared rates of the open scheduled
// qsockets in all (0: none), leaving out id skip. It saturates
// (units.Add): a sum too large for 64 bits is over every bound, never
// wrapped below one.
func qschedRate(all map[uint32]datapath.QSock, skip uint32) uint64 {
	var sum uint64
	for id, q := range all {
		if id != skip && scheduled(q) {
			sum = units.Add(sum, q.Rate)
		}
	}
	return sum
}

// qschedRateLocked reads the sum from the datapath (0 without qsockets).
func (e *Engine) qschedRateLocked() uint64 {
	if e.qk == nil {
		return 0
	}
	all, err := e.qk.QSocks()
	if err != nil {
		e.log.Warn("read the qsocket table; links planned without the qsocket scheduler", "err", err)
		return 0
	}
	return qschedRate(all, 0)
}

// admitQSchedLocked checks that rate more (for a qsocket besides the
// scheduled ones in all, without skip) fits in QSchedShare of every
// shaped link.
func (e *Engine) admitQSchedLocked(all map[uint32]datapath.QSock, skip uint32, rate uint64) error {
	sum := units.Add(qschedRate(all, skip), rate)
	for _, l := range e.eff.Policy.Links {
		if l.EgressRate == 0 {
			continue
		}
		bound := qschedBound(l)
		if sum > bound {
			return qsockField("rate", units.ExactRate(rate),
				fmt.Sprintf("the scheduled qsockets' rates would sum to %s, over %d %% of link %s (%s)",
					units.ExactRate(sum), QSchedShare, l.Name, units.ExactRate(bound)),
				"declare a lower rate, close other scheduled qsockets, or raise the link's egress_rate")
		}
	}
	return e.admitQSchedBudgetLocked(sum, rate)
}

// qschedBound is what the scheduled qsockets' rates may sum to on shaped
// link l: QSchedShare of its egress rate.
func qschedBound(l policy.Link) uint64 { return units.Mul(uint64(l.EgressFloor()), QSchedShare) / 100 }

// reshapeQSchedLocked syncs after the scheduled qsockets changed (only
// what differs is written: the links' qsched classes and schedulers).
func (e *Engine) reshapeQSchedLocked() error {
	if e.desired == nil {
		return nil
	}
	return e.syncLocked("qsocket change", syncChange{})
}

// undoQSchedLocked syncs again after undo put the qsocket table back, when
// a change of the scheduled qsockets failed to reach the kernel.
func (e *Engine) undoQSchedLocked(undo func() error) {
	if err := undo(); err != nil {
		e.log.Error("restore the qsocket table after a failed change", "err", err)
	}
	if err := e.reshapeQSchedLocked(); err != nil {
		e.log.Error("restore the links' qsocket scheduler after a failed change", "err", err)
	}
}

func (e *Engine) maxUserQSchedRate() uint64 {
	if e.cfg.MaxUserQSchedRate > 0 {
		return e.cfg.MaxUserQSchedRate
	}
	return DefaultMaxUserQSchedRate
}

// admitUserQSched checks an ordinary user's scheduled qsocket of class cl
// declaring rate: the qsched class serves it ahead of every class, so its
// rate may not exceed the ceiling of the class the admin opened to the
// user, and the user's scheduled qsockets (those in all, without skip)
// may not declare more than MaxUserQSchedRate together.
func (e *Engine) admitUserQSched(who Caller, cl policy.Class, all map[uint32]datapath.QSock, skip uint32, rate uint64) error {
	if who.Privileged {
		return nil
	}
	if cl.MaxBW > 0 && rate > uint64(cl.MaxBW) {
		return qsockField("rate", units.ExactRate(rate),
			fmt.Sprintf("over the ceiling (maxbw %s) of class %s", units.ExactRate(uint64(cl.MaxBW)), cl.Name),
			"declare at most the class's ceiling, or use a class with a higher one")
	}
	mine := rate
	for id, q := range all {
		if id != skip && q.User && q.UID == who.UID && scheduled(q) {
			mine = units.Add(mine, q.Rate)
		}
	}
	if limit := e.maxUserQSchedRate(); mine > limit {
		return qsockField("rate", units.ExactRate(rate),
			fmt.Sprintf("uid %d's scheduled qsockets would declare %s together, over the %s an ordinary user may (hostqosd --max-user-qsched-rate)",
				who.UID, units.ExactRate(mine), units.ExactRate(limit)),
			"declare a lower rate, close other scheduled qsockets, or ask the admin to raise --max-user-qsched-rate")
	}
	return nil
}
