package engine

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/datapath"
	"github.com/hostqos/hostqos/internal/host/fakehost"
	"github.com/hostqos/hostqos/internal/policy"
	"github.com/hostqos/hostqos/internal/shaper"
)

func (env *testEnv) startQSock(t *testing.T) (*Engine, *fakehost.FakeQSockKernel) {
	t.Helper()
	qk := fakehost.NewFakeQSockKernel(env.k)
	e, err := New(env.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start(Host{Kernel: qk, QSockets: qk}); err != nil {
		t.Fatal(err)
	}
	return e, qk
}

const qsockConfig = `
[[link]]
name = "eth0"

[[class]]
name = "interactive"
user_allowed = true
`

// TestQSockAttachChangeDetach: a qsocket gets its class's leaf and DSCP;
// a change keeps its id; info reports the datapath's counts; detach frees
// it; events are published.
func TestQSockAttachChangeDetach(t *testing.T) {
	env := newEnv(t, qsockConfig)
	e, qk := env.startQSock(t)
	ctx := context.Background()
	qk.Socket(5, 0, 1001)

	q, err := e.AttachQSock(ctx, root, 5, api.QSockParams{Class: "interactive", Scheduler: api.SchedEDFLossy})
	if err != nil {
		t.Fatal(err)
	}
	dq := qk.Table[q.ID]
	if q.ID == 0 || q.Class != "interactive" || q.DSCP != 34 || q.Scheduler != "edf-lossy" ||
		dq.ClassID != shaper.ClassLeafID(e.slots.Classes["interactive"]) || dq.DSCP != 34 || dq.User || dq.Cookie != 1001 {
		t.Fatalf("attached %+v, datapath %+v", q, dq)
	}
	if _, err := e.AttachQSock(ctx, root, 5, api.QSockParams{}); !errors.As(err, new(*ConflictError)) {
		t.Errorf("second attach: %v, want a conflict", err)
	}
	c, err := e.ChangeQSock(ctx, root, 5, api.QSockParams{Class: "voice"})
	if err != nil || c.ID != q.ID || c.DSCP != 46 || qk.Table[q.ID].DSCP != 46 {
		t.Fatalf("change: %+v %v, datapath %+v", c, err, qk.Table[q.ID])
	}
	dscp := 12
	if c, err := e.ChangeQSock(ctx, root, 5, api.QSockParams{Class: "voice", DSCP: &dscp}); err != nil || c.DSCP != 12 {
		t.Errorf("root's explicit DSCP: %+v %v", c, err)
	}
	qk.Counters[q.ID] = datapath.QSockCounters{Open: true, Cookie: 1001, Packets: 7, Bytes: 700, Rate: 100}
	in, err := e.QSockInfo(root, 5)
	if err != nil || in.Packets != 7 || in.Bytes != 700 || in.Rate != 800 || !in.Open || in.Class != "voice" {
		t.Errorf("info %+v %v", in, err)
	}
	if l, _ := e.QSocks(root); len(l) != 1 {
		t.Errorf("list %+v", l)
	}
	if err := e.DetachQSock(ctx, root, 5); err != nil || len(qk.Table) != 0 {
		t.Fatalf("detach: %v, table %v", err, qk.Table)
	}
	if _, err := e.QSockInfo(root, 5); !errors.As(err, new(*NotFoundError)) {
		t.Errorf("info after detach: %v", err)
	}
	zero := uint64(0)
	sub, err := e.Subscribe(root, &zero, []string{EventQSockAttached, EventQSockChanged, EventQSockDetached})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	tctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	evs, _ := sub.Next(tctx)
	var kinds []string
	for _, ev := range evs {
		if strings.HasPrefix(ev.Kind, "qsocket.") {
			kinds = append(kinds, ev.Kind)
		}
	}
	if strings.Join(kinds, ",") != "qsocket.attached,qsocket.changed,qsocket.changed,qsocket.detached" {
		t.Errorf("events %v", kinds)
	}
}

// TestQSockPrivileges: an ordinary user may attach only their own socket,
// only into user_allowed classes, without a DSCP, within their limit; each
// refusal says why and changes nothing.
func TestQSockPrivileges(t *testing.T) {
	env := newEnv(t, qsockConfig)
	env.cfg.MaxQSocksPerUser = 2
	e, qk := env.startQSock(t)
	ctx := context.Background()
	qk.Socket(3, 0, 30)     // root's
	qk.Socket(4, 65534, 40) // nobody's
	qk.Socket(5, 65534, 50)
	qk.Socket(6, 65534, 60)
	dscp := 46
	for _, c := range []struct {
		fd   int
		p    api.QSockParams
		want string
	}{
		{3, api.QSockParams{}, "belongs to uid 0 (who created it), not to you (uid 65534)"},
		{4, api.QSockParams{Class: "voice"}, `class "voice" is not open to ordinary users`},
		{4, api.QSockParams{Class: "interactive", DSCP: &dscp}, "choosing a DSCP needs root or group hostqos"},
		{9, api.QSockParams{}, "not a socket"},
	} {
		_, err := e.AttachQSock(ctx, nobody, c.fd, c.p)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("attach fd %d %+v: %v, want %q", c.fd, c.p, err, c.want)
		}
	}
	if len(qk.Table) != 0 {
		t.Fatalf("refusals changed the table: %v", qk.Table)
	}
	q, err := e.AttachQSock(ctx, nobody, 4, api.QSockParams{Class: "interactive"})
	if err != nil || !qk.Table[q.ID].User || qk.Table[q.ID].UID != 65534 {
		t.Fatalf("nobody's attach: %+v %v %+v", q, err, qk.Table)
	}
	if _, err := e.AttachQSock(ctx, nobody, 5, api.QSockParams{Class: "bulk"}); err != nil {
		t.Fatal(err)
	}
	_, err = e.AttachQSock(ctx, nobody, 6, api.QSockParams{})
	if !errors.As(err, new(*TooManyError)) || !strings.Contains(err.Error(), "limit 2 per user") {
		t.Errorf("third qsocket: %v, want the per-user limit", err)
	}
	// Root's qsockets are not counted, root sees all, nobody only theirs.
	if _, err := e.AttachQSock(ctx, root, 3, api.QSockParams{Class: "voice"}); err != nil {
		t.Fatal(err)
	}
	if l, _ := e.QSocks(nobody); len(l) != 2 {
		t.Errorf("nobody lists %+v", l)
	}
	if l, _ := e.QSocks(root); len(l) != 3 {
		t.Errorf("root lists %+v", l)
	}
	// Another user may not change or read nobody's qsocket.
	other := Caller{UID: 1000, GID: 1000}
	qk.Sockets[4].Owner = 1000 // as if passed on; the entry is nobody's
	if _, err := e.QSockInfo(other, 4); err == nil || !strings.Contains(err.Error(), "belongs to uid 65534") {
		t.Errorf("other user's info: %v", err)
	}
	// A closed socket frees its place.
	qk.CloseSocket(5)
	if _, err := e.AttachQSock(ctx, nobody, 6, api.QSockParams{}); err != nil {
		t.Errorf("after a close: %v", err)
	}
	// qsockinit: root only.
	if err := e.InitQSockLink(ctx, nobody, api.QSockInit{Link: "eth0"}); !errors.As(err, new(*ForbiddenError)) {
		t.Errorf("nobody's qsockinit: %v", err)
	}
	if err := e.InitQSockLink(ctx, root, api.QSockInit{Link: "eth0"}); err != nil {
		t.Errorf("root's qsockinit of a managed link: %v", err)
	}
}

// TestQSockValidation: bad parameters name the field, the value and the
// fix, and nothing changes; a failing kernel leaves no entry.
func TestQSockValidation(t *testing.T) {
	env := newEnv(t, qsockConfig)
	e, qk := env.startQSock(t)
	ctx := context.Background()
	qk.Socket(4, 0, 40)
	bad := 64
	for _, c := range []struct {
		p     api.QSockParams
		field string
	}{
		{api.QSockParams{Scheduler: "rr"}, "scheduler"},
		{api.QSockParams{DSCP: &bad}, "dscp"},
		{api.QSockParams{Scheduler: "dwcs", OLN: 3, OLD: 2, IPGMicros: 50000}, "oln/old"},
		{api.QSockParams{Scheduler: "dwcs", OLD: 10}, "ipg_us"},
		{api.QSockParams{IPGMicros: 10}, "scheduler"},
		{api.QSockParams{Class: "gold"}, "class"},
	} {
		_, err := e.AttachQSock(ctx, root, 4, c.p)
		var fe *policy.FieldError
		var fes policy.Errors
		switch {
		case errors.As(err, &fes) && fes[0].Field == c.field && fes[0].Fix != "":
		case errors.As(err, &fe) && fe.Field == c.field && fe.Fix != "":
		default:
			t.Errorf("%+v: %v, want a field error on %s with a fix", c.p, err, c.field)
		}
	}
	if _, err := e.AttachQSock(ctx, root, 4, api.QSockParams{Scheduler: "dwcs", IPGMicros: 50000, OLN: 1, OLD: 10}); err != nil {
		t.Errorf("valid dwcs: %v", err)
	}
	qk.Socket(7, 0, 70)
	qk.FailNth("AttachQSock", 1, errors.New("boom"))
	if _, err := e.AttachQSock(ctx, root, 7, api.QSockParams{}); err == nil || len(qk.Table) != 1 {
		t.Errorf("failing kernel: %v, table %v", err, qk.Table)
	}
}
