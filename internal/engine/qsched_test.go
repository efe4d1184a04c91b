package engine

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/datapath"
	"github.com/hostqos/hostqos/internal/host/fakehost"
	"github.com/hostqos/hostqos/internal/policy"
	"github.com/hostqos/hostqos/internal/shaper"
)

const qschedConfig = `
[[link]]
name = "eth0"
egress_rate = "10mbit"

[[class]]
name = "interactive"
user_allowed = true
`

// qschedClass is the rate of the qsched class of the fake kernel's eth0
// tree (0: none).
func qschedClass(t *testing.T, k *fakehost.FakeQSockKernel) uint64 {
	t.Helper()
	for _, c := range k.Snapshot().Trees[2].Classes {
		if c.Minor == shaper.QSchedMinor {
			return c.Rate
		}
	}
	return 0
}

// TestQSockScheduler: a scheduled qsocket (dwcs, edf-*) is admitted at its
// declared rate (1 Mbit/s by default) within half of every shaped link;
// the links' qsched classes and the datapath's schedulers follow the sum,
// through attach, change, detach and a socket closed behind the daemon's
// back; a refusal names the bound and changes nothing, and so does a
// kernel that fails midway.
func TestQSockScheduler(t *testing.T) {
	env := newEnv(t, qschedConfig)
	e, qk := env.startQSock(t)
	ctx := context.Background()
	for fd := 5; fd <= 9; fd++ {
		qk.Socket(fd, 0, uint64(1000+fd))
	}
	if r := qschedClass(t, qk); r != 0 || len(qk.QScheds) != 0 {
		t.Fatalf("before any scheduled qsocket: qsched class %d, schedulers %v", r, qk.QScheds)
	}
	if _, err := e.AttachQSock(ctx, root, 5, api.QSockParams{Class: "interactive"}); err != nil {
		t.Fatal(err)
	}
	if r := qschedClass(t, qk); r != 0 {
		t.Errorf("a fifo qsocket made a qsched class of %d", r)
	}
	q, err := e.AttachQSock(ctx, root, 6, api.QSockParams{Class: "interactive", Scheduler: api.SchedEDFLossy, Rate: 2_000_000})
	if err != nil {
		t.Fatal(err)
	}
	if q.Rate != 2_000_000 || qk.Table[q.ID].Rate != 2_000_000 {
		t.Errorf("attached %+v, datapath %+v: want rate 2 Mbit/s", q, qk.Table[q.ID])
	}
	if r := qschedClass(t, qk); r != 2_000_000 {
		t.Errorf("qsched class %d, want 2 Mbit/s", r)
	}
	if s := qk.QScheds[2]; s.Rate != 2_000_000 || s.ClassID0 != shaper.QSchedBandClassID(0) {
		t.Errorf("datapath scheduler of eth0 %+v", s)
	}
	d, err := e.AttachQSock(ctx, root, 7, api.QSockParams{Scheduler: api.SchedDWCS, IPGMicros: 50000, OLN: 1, OLD: 4})
	if err != nil {
		t.Fatal(err)
	}
	if dq := qk.Table[d.ID]; dq.Rate != DefaultQSchedRate || dq.IPGNanos != 50_000_000 || dq.OLN != 1 || dq.OLD != 4 || dq.Sched != datapath.SchedDWCS {
		t.Errorf("dwcs in the datapath: %+v", dq)
	}
	if r := qschedClass(t, qk); r != 3_000_000 {
		t.Errorf("qsched class %d, want 3 Mbit/s", r)
	}

	// Over half of the link: refused, naming the bound; nothing changes.
	before := qk.Snapshot()
	_, err = e.AttachQSock(ctx, root, 8, api.QSockParams{Scheduler: api.SchedEDFLossless, Rate: 2_500_000})
	var fe *policy.FieldError
	if !errors.As(err, &fe) || fe.Field != "rate" || !strings.Contains(err.Error(), "5mbit") || !strings.Contains(err.Error(), "eth0") {
		t.Errorf("over the share: %v, want a refusal of field rate naming eth0's 5mbit", err)
	}
	if _, ok := qk.Table[9]; ok || qschedClass(t, qk) != 3_000_000 || len(qk.Snapshot().Trees[2].Classes) != len(before.Trees[2].Classes) {
		t.Error("a refused attach changed something")
	}
	// A change is admitted without the socket's own old rate.
	if _, err := e.ChangeQSock(ctx, root, 6, api.QSockParams{Class: "interactive", Scheduler: api.SchedEDFLossy, Rate: 4_000_000}); err != nil {
		t.Fatal(err)
	}
	if r := qschedClass(t, qk); r != 5_000_000 {
		t.Errorf("after change: qsched class %d, want 5 Mbit/s", r)
	}
	// A kernel that fails to shape: the attach is undone.
	qk.FailNth("Shape", 1, errors.New("injected"))
	if _, err := e.ChangeQSock(ctx, root, 6, api.QSockParams{Class: "interactive", Scheduler: api.SchedEDFLossy, Rate: 1_000_000}); err == nil {
		t.Error("change with a failing shaper succeeded")
	}
	if qk.Table[q.ID].Rate != 4_000_000 || qschedClass(t, qk) != 5_000_000 {
		t.Errorf("failed change left rate %d, class %d", qk.Table[q.ID].Rate, qschedClass(t, qk))
	}
	if err := e.DetachQSock(ctx, root, 6); err != nil {
		t.Fatal(err)
	}
	if r := qschedClass(t, qk); r != 1_000_000 {
		t.Errorf("after detach: qsched class %d, want 1 Mbit/s", r)
	}
	// Closed without the daemon: the next tick shrinks it away.
	qk.CloseSocket(7)
	e.Tick()
	if r := qschedClass(t, qk); r != 0 || len(qk.QScheds) != 0 {
		t.Errorf("after the last scheduled socket closed: qsched class %d, schedulers %v", r, qk.QScheds)
	}
}

// TestQSockSchedulerUserBounds: the qsched class serves scheduled qsockets
// ahead of every class, so an ordinary user's may not declare more than
// the ceiling of the class they name, nor together more than
// MaxUserQSchedRate (4 Mbit/s by default); a refusal names the field, the
// bound and the flag, and changes nothing. Root is bound only by the
// link's share.
func TestQSockSchedulerUserBounds(t *testing.T) {
	env := newEnv(t, qschedConfig+`
[[class]]
name = "capped"
user_allowed = true
maxbw = "1mbit"
`)
	e, qk := env.startQSock(t)
	ctx := context.Background()
	user := Caller{UID: 1000, GID: 1000}
	for fd := 5; fd <= 9; fd++ {
		qk.Socket(fd, 1000, uint64(1000+fd))
	}
	qk.Socket(10, 0, 1010)
	edf := func(class string, rate uint64) api.QSockParams {
		return api.QSockParams{Class: class, Scheduler: api.SchedEDFLossy, Rate: rate}
	}
	refused := func(what string, err error, want string) {
		t.Helper()
		var fe *policy.FieldError
		if !errors.As(err, &fe) || fe.Field != "rate" || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want a refusal of field rate naming %q", what, err, want)
		}
	}
	// Over the ceiling of the class named.
	_, err := e.AttachQSock(ctx, user, 5, edf("capped", 2_000_000))
	refused("2 Mbit/s in a class capped at 1 Mbit/s", err, "maxbw")
	if len(qk.Table) != 0 || qschedClass(t, qk) != 0 {
		t.Fatalf("a refusal changed the table %v or the links", qk.Table)
	}
	if _, err := e.AttachQSock(ctx, user, 5, edf("capped", 1_000_000)); err != nil {
		t.Fatal(err)
	}
	// The user's sum.
	q, err := e.AttachQSock(ctx, user, 6, edf("interactive", 2_000_000))
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.AttachQSock(ctx, user, 7, edf("interactive", 2_000_000))
	refused("a user's 5 Mbit/s in all", err, "--max-user-qsched-rate")
	if _, err := e.ChangeQSock(ctx, user, 6, edf("interactive", 3_500_000)); err == nil {
		t.Error("a change to 4.5 Mbit/s in all was admitted")
	} else {
		refused("a change to 4.5 Mbit/s in all", err, "--max-user-qsched-rate")
	}
	if qk.Table[q.ID].Rate != 2_000_000 || qschedClass(t, qk) != 3_000_000 {
		t.Errorf("after the refusals: qsocket %+v, qsched class %d; want 2 Mbit/s and 3 Mbit/s", qk.Table[q.ID], qschedClass(t, qk))
	}
	if _, err := e.ChangeQSock(ctx, user, 6, edf("interactive", 3_000_000)); err != nil {
		t.Errorf("a change to 4 Mbit/s in all: %v", err)
	}
	// Root: only the link's half (5 Mbit/s of 10).
	if _, err := e.AttachQSock(ctx, root, 10, edf("capped", 1_000_000)); err != nil {
		t.Errorf("root's qsocket: %v", err)
	}
}

// TestQSockSchedulerRateOverflow: a declared rate near 2⁶⁴ (the report's
// 18446744073705551617, which wrapped a user's 4 Mbit/s sum to 1 bit/s
// and the link's qsched class to 3 Mbit/s) is refused with its field, and
// the sums of admission saturate instead of wrapping: a table that holds
// such a rate (left by an older daemon) makes every further scheduled
// qsocket refused, never a qsched class below what was admitted.
func TestQSockSchedulerRateOverflow(t *testing.T) {
	env := newEnv(t, qschedConfig)
	e, qk := env.startQSock(t)
	ctx := context.Background()
	user := Caller{UID: 65534, GID: 65534}
	for fd := 5; fd <= 9; fd++ {
		qk.Socket(fd, 65534, uint64(1000+fd))
	}
	edf := func(rate uint64) api.QSockParams {
		return api.QSockParams{Class: "interactive", Scheduler: api.SchedEDFLossy, Rate: rate}
	}
	for fd := 5; fd <= 6; fd++ { // the user's 4 Mbit/s
		if _, err := e.AttachQSock(ctx, user, fd, edf(2_000_000)); err != nil {
			t.Fatal(err)
		}
	}
	const wrap = 18446744073705551617 // 2⁶⁴ − 3999999: 4 Mbit/s + it = 2⁶⁴ + 1
	_, err := e.AttachQSock(ctx, user, 7, edf(wrap))
	var fe *policy.FieldError
	if !errors.As(err, &fe) || fe.Field != "rate" || fe.Value != "18446744073705551617" || !strings.Contains(err.Error(), "above 10tbit") {
		t.Errorf("attach at 2⁶⁴ − 3999999 bit/s: %v, want field rate refused above 10tbit", err)
	}
	if _, err := e.ChangeQSock(ctx, user, 5, edf(wrap)); err == nil {
		t.Error("a change to 2⁶⁴ − 3999999 bit/s was admitted")
	}
	if r := qschedClass(t, qk); r != 4_000_000 || len(qk.Table) != 2 {
		t.Fatalf("after the refusals: qsched class %d, %d qsockets; want 4 Mbit/s and 2", r, len(qk.Table))
	}
	// Sums saturate: an entry with a rate near 2⁶⁴ in the datapath's table.
	for id, q := range qk.Table {
		q.Rate = wrap
		qk.Table[id] = q
		break
	}
	_, err = e.AttachQSock(ctx, root, 8, edf(4_000_000))
	if !errors.As(err, &fe) || fe.Field != "rate" || !strings.Contains(err.Error(), "more than 18446744tbit") {
		t.Errorf("root's attach beside a saturated sum: %v, want refused over the link's share", err)
	}
	_, err = e.AttachQSock(ctx, user, 9, edf(0))
	if !errors.As(err, &fe) || !strings.Contains(err.Error(), "--max-user-qsched-rate") {
		t.Errorf("the user's attach beside a saturated sum: %v, want refused over the user's bound", err)
	}
}
