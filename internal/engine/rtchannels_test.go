package engine

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/policy"
	"github.com/hostqos/hostqos/internal/shaper"
	"github.com/hostqos/hostqos/rtchan"
)

// fakeOwner is a process that owns channels: alive until it "exits".
type fakeOwner struct {
	pid    int
	dead   bool
	closed bool
}

func (o *fakeOwner) PID() int      { return o.pid }
func (o *fakeOwner) Exe() string   { return "/usr/bin/sensor" }
func (o *fakeOwner) Start() uint64 { return uint64(o.pid) * 10 }
func (o *fakeOwner) Alive() bool   { return !o.dead }
func (o *fakeOwner) Close()        { o.closed = true }

// rtConfig opens class voice, the class of channels' datagrams, to
// ordinary users.
const rtConfig = `
[[link]]
name = "eth0"
egress_rate = "10mbit"

[[class]]
name = "voice"
user_allowed = true
`

// rtReq is 12,000-byte messages every 20 ms within 100 ms on eth0: about
// 4.8 Mbit/s of a 10 Mbit/s link, so one fits and two do not.
func rtReq(name string) api.RTChannelRequest {
	return api.RTChannelRequest{Name: name, Link: "eth0", MessageBytes: 12000, Period: 20 * time.Millisecond, Burst: 1, Delay: 100 * time.Millisecond}
}

// TestRTChannelHostWide: two processes of two users whose channels
// together exceed the link: the second is refused with the failing bound
// named and nothing changes; when the first process exits its channel is
// released and the second is admitted.
func TestRTChannelHostWide(t *testing.T) {
	env := newEnv(t, rtConfig)
	env.cfg.MaxUserRTUtilization = 1 // the users' shares: TestRTChannelUserShare
	e := env.start(t)
	a, b := &fakeOwner{pid: 100}, &fakeOwner{pid: 200}
	ca, err := e.AdmitRTChannel(alice, rtReq("video"), a)
	if err != nil {
		t.Fatal(err)
	}
	if ca.PID != 100 || ca.UID != alice.UID || ca.Exe != "/usr/bin/sensor" || ca.Priority != 0 || ca.Response <= 0 || ca.Response > ca.Bound || ca.Bound != 99*time.Millisecond {
		t.Fatalf("admitted %+v", ca)
	}
	_, err = e.AdmitRTChannel(nobody, rtReq("second"), b)
	var tm *TooManyError
	if !errors.As(err, &tm) {
		t.Fatalf("second channel: %v, want a refusal", err)
	}
	t.Log(err)
	if !strings.Contains(err.Error(), "delay bound 99ms") || !strings.Contains(err.Error(), "eth0") {
		t.Errorf("refusal %q does not name the failing bound", err)
	}
	if all, _ := e.RTChannels(root, 0); len(all) != 1 || b.closed {
		t.Fatalf("after the refusal: %+v", all)
	}
	// Each user sees their own.
	if mine, _ := e.RTChannels(nobody, 0); len(mine) != 0 {
		t.Errorf("nobody sees %+v", mine)
	}
	if _, err := e.RTChannels(nobody, ca.ID); !errors.As(err, new(*NotFoundError)) {
		t.Errorf("nobody shows alice's channel: %v", err)
	}
	a.dead = true
	e.SweepRTChannels()
	if !a.closed {
		t.Error("the exited owner's pidfd was not closed")
	}
	cb, err := e.AdmitRTChannel(nobody, rtReq("second"), b)
	if err != nil {
		t.Fatalf("after the first process exited: %v", err)
	}
	if err := e.CloseRTChannel(alice, cb.ID); !errors.As(err, new(*NotFoundError)) {
		t.Errorf("alice closes nobody's channel: %v", err)
	}
	if err := e.CloseRTChannel(nobody, cb.ID); err != nil || !b.closed {
		t.Errorf("close: %v", err)
	}
	if all, _ := e.RTChannels(root, 0); len(all) != 0 {
		t.Errorf("after close: %+v", all)
	}
}

// TestRTChannelBounds: fields are validated by name, the link must be
// managed with a rate, and an ordinary user has at most
// MaxRTChannelsPerUser channels.
func TestRTChannelBounds(t *testing.T) {
	env := newEnv(t, rtConfig)
	env.cfg.MaxRTChannelsPerUser = 2
	e := env.start(t)
	bad := rtReq("x")
	bad.Period, bad.Burst = 0, -1
	_, err := e.AdmitRTChannel(alice, bad, &fakeOwner{pid: 1})
	var fes policy.Errors
	if !errors.As(err, &fes) || len(fes) != 2 || fes[0].Field != "period_ns" || fes[1].Field != "burst" {
		t.Errorf("invalid request: %v", err)
	}
	other := rtReq("x")
	other.Link = "eth9"
	var fe *policy.FieldError
	if _, err := e.AdmitRTChannel(alice, other, &fakeOwner{pid: 1}); !errors.As(err, &fe) || fe.Field != "link" {
		t.Errorf("unmanaged link: %v", err)
	}
	if _, err := e.AdmitRTChannel(alice, rtReq("x"), &fakeOwner{pid: 1, dead: true}); !errors.As(err, new(*BadRequestError)) {
		t.Errorf("exited owner: %v", err)
	}
	small := api.RTChannelRequest{Link: "eth0", MessageBytes: 100, Period: time.Second, Burst: 1, Delay: time.Second}
	for i := range 2 {
		if _, err := e.AdmitRTChannel(alice, small, &fakeOwner{pid: 10 + i}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.AdmitRTChannel(alice, small, &fakeOwner{pid: 12}); !errors.As(err, new(*TooManyError)) {
		t.Errorf("third channel of alice: %v", err)
	}
	if _, err := e.AdmitRTChannel(root, small, &fakeOwner{pid: 13}); err != nil {
		t.Errorf("root: %v", err)
	}
}

// TestRTChannelsRestored: a restarted engine takes the channels of live
// owners again (same ids, still counted by admission) and drops those
// whose process has gone.
func TestRTChannelsRestored(t *testing.T) {
	env := newEnv(t, rtConfig)
	env.cfg.MaxUserRTUtilization = 1
	e := env.start(t)
	ca, err := e.AdmitRTChannel(alice, rtReq("video"), &fakeOwner{pid: 100})
	if err != nil {
		t.Fatal(err)
	}
	small := api.RTChannelRequest{Link: "eth0", MessageBytes: 100, Period: time.Second, Burst: 1, Delay: time.Second}
	if _, err := e.AdmitRTChannel(alice, small, &fakeOwner{pid: 200}); err != nil {
		t.Fatal(err)
	}
	e2 := env.start(t)
	err = e2.RestoreRTChannels(func(pid int, start uint64) (RTOwner, error) {
		if pid != 100 || start != 1000 {
			return nil, errors.New("gone")
		}
		return &fakeOwner{pid: pid}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	all, _ := e2.RTChannels(root, 0)
	if len(all) != 1 || all[0].ID != ca.ID || all[0].PID != 100 || all[0].Response != ca.Response {
		t.Fatalf("restored %+v, want channel %d of pid 100", all, ca.ID)
	}
	if _, err := e2.AdmitRTChannel(nobody, rtReq("second"), &fakeOwner{pid: 300}); !errors.As(err, new(*TooManyError)) {
		t.Errorf("second channel after the restart: %v, want refused", err)
	}
	if c, err := e2.AdmitRTChannel(nobody, small, &fakeOwner{pid: 300}); err != nil || c.ID <= ca.ID+1 {
		t.Errorf("a new channel after the restart: %+v, %v; want a new id", c, err)
	}
}

// TestRTChannelUserShare: an ordinary user may hold channels only when
// they could bind the channel's socket to its class (voice, not open to
// them by default: the rule of qsockets), and their channels on a link
// take at most MaxUserRTUtilization of its real-time utilization (0.5 by
// default), so that one user cannot take the whole link (the report: 1400
// B every 180 µs within an hour, 0.97 of a 100 Mbit/s link, then root's
// next channel refused at 1.04). Absurd fields are refused by name. Root
// is bound by the admission test only.
func TestRTChannelUserShare(t *testing.T) {
	const link100 = `
[[link]]
name = "eth0"
egress_rate = "100mbit"
`
	report := api.RTChannelRequest{Link: "eth0", MessageBytes: 1400, Period: 180 * time.Microsecond, Burst: 1, Delay: 3600 * time.Second}
	p := rtchan.UDPParams(100_000_000)
	ts := p.Service(1400).Ts
	// at is a 1400-byte channel taking share u of the link.
	at := func(u float64, delay time.Duration) api.RTChannelRequest {
		return api.RTChannelRequest{Link: "eth0", MessageBytes: 1400, Period: time.Duration(float64(ts) / u), Burst: 1, Delay: delay}
	}

	// Voice not open to users: refused as qsockets are, nothing admitted.
	e := newEnv(t, link100).start(t)
	report.Delay = time.Second
	_, err := e.AdmitRTChannel(nobody, report, &fakeOwner{pid: 1})
	var fb *ForbiddenError
	if !errors.As(err, &fb) || !strings.Contains(err.Error(), "class voice") || !strings.Contains(err.Error(), "--user-allowed true") {
		t.Errorf("nobody's channel with voice closed: %v, want forbidden naming class voice", err)
	}
	if all, _ := e.RTChannels(root, 0); len(all) != 0 {
		t.Fatalf("a forbidden channel was admitted: %+v", all)
	}
	if _, err := e.AdmitRTChannel(root, at(0.9, 50*time.Millisecond), &fakeOwner{pid: 2}); err != nil {
		t.Errorf("root's channel: %v", err)
	}

	// Voice open: the user's share is bounded.
	e = newEnv(t, link100+"[[class]]\nname = \"voice\"\nuser_allowed = true\n").start(t)
	report.Delay = 3600 * time.Second
	_, err = e.AdmitRTChannel(nobody, report, &fakeOwner{pid: 1})
	var fe *policy.FieldError
	if !errors.As(err, &fe) || fe.Field != "delay_ns" || fe.Value != "3600000000000" || !strings.Contains(err.Error(), "1µs … 10s") {
		t.Errorf("a delay of an hour: %v, want field delay_ns refused with its bounds", err)
	}
	report.Delay = time.Second
	_, err = e.AdmitRTChannel(nobody, report, &fakeOwner{pid: 1})
	var tm *TooManyError
	if !errors.As(err, &tm) || !strings.Contains(err.Error(), "--max-user-rt-utilization") || !strings.Contains(err.Error(), "over the 0.5") {
		t.Errorf("the report's channel: %v, want refused over the user's share", err)
	}
	if _, err := e.AdmitRTChannel(nobody, at(0.3, time.Second), &fakeOwner{pid: 3}); err != nil {
		t.Fatalf("a channel of 0.3: %v", err)
	}
	_, err = e.AdmitRTChannel(nobody, at(0.25, time.Second), &fakeOwner{pid: 4})
	if !errors.As(err, &tm) || !strings.Contains(err.Error(), "uid 65534's channels on it would take 0.55") {
		t.Errorf("0.3 + 0.25: %v, want refused naming the user's sum", err)
	}
	if _, err := e.AdmitRTChannel(alice, at(0.25, time.Second), &fakeOwner{pid: 5}); err != nil {
		t.Errorf("another user's 0.25: %v", err)
	}
	// Root's channel is admitted beside them: the link is not taken.
	if _, err := e.AdmitRTChannel(root, at(0.4, 20*time.Millisecond), &fakeOwner{pid: 6}); err != nil {
		t.Errorf("root's channel beside the users': %v", err)
	}
	if all, _ := e.RTChannels(root, 0); len(all) != 3 {
		t.Errorf("admitted %d channels, want 3", len(all))
	}
	// The bound is the engine's setting.
	env := newEnv(t, link100+"[[class]]\nname = \"voice\"\nuser_allowed = true\n")
	env.cfg.MaxUserRTUtilization = 0.2
	e = env.start(t)
	if _, err := e.AdmitRTChannel(nobody, at(0.3, time.Second), &fakeOwner{pid: 3}); !errors.As(err, &tm) || !strings.Contains(err.Error(), "over the 0.2") {
		t.Errorf("0.3 with a bound of 0.2: %v", err)
	}

	// Absurd fields, by name.
	for _, c := range []struct {
		field string
		req   api.RTChannelRequest
	}{
		{"message_bytes", api.RTChannelRequest{Link: "eth0", MessageBytes: 2 << 20, Period: time.Second, Burst: 1, Delay: time.Second}},
		{"period_ns", api.RTChannelRequest{Link: "eth0", MessageBytes: 100, Period: time.Hour, Burst: 1, Delay: time.Second}},
		{"period_ns", api.RTChannelRequest{Link: "eth0", MessageBytes: 100, Period: time.Nanosecond, Burst: 1, Delay: time.Second}},
		{"burst", api.RTChannelRequest{Link: "eth0", MessageBytes: 100, Period: time.Second, Burst: 65536, Delay: time.Second}},
		{"delay_ns", api.RTChannelRequest{Link: "eth0", MessageBytes: 100, Period: time.Second, Burst: 1, Delay: 11 * time.Second}},
		{"destination", api.RTChannelRequest{Link: "eth0", Destination: "198.18.0.2", MessageBytes: 100, Period: time.Second, Burst: 1, Delay: time.Second}},
		{"destination", api.RTChannelRequest{Link: "eth0", Destination: "0.0.0.0:7000", MessageBytes: 100, Period: time.Second, Burst: 1, Delay: time.Second}},
		{"destination", api.RTChannelRequest{Link: "eth0", Destination: "host:7000", MessageBytes: 100, Period: time.Second, Burst: 1, Delay: time.Second}},
	} {
		if _, err := e.AdmitRTChannel(root, c.req, &fakeOwner{pid: 9}); !errors.As(err, &fe) || fe.Field != c.field {
			t.Errorf("%+v: %v, want field %s refused", c.req, err, c.field)
		}
	}
}

// TestRTChannelOwnerLeaves: every channel on a link gets a leaf of its
// own under the link's real-time class, guaranteed its own rate with a
// bucket of its burst, at the HTB priority of its local bound's rank; a
// channel socket (a qsocket in the channels' class naming its channel)
// goes to that channel's leaf, only its own process may name it, and a
// channel keeps its leaf while another comes and goes.
func TestRTChannelOwnerLeaves(t *testing.T) {
	env := newEnv(t, rtConfig)
	env.cfg.MaxUserRTUtilization = 1
	e := env.start(t)
	small := func(name string) api.RTChannelRequest {
		r := rtReq(name)
		r.MessageBytes = 1200
		r.Destination = "198.18.0.2:7000"
		return r
	}
	a, b := &fakeOwner{pid: 100}, &fakeOwner{pid: 200}
	a1, err := e.AdmitRTChannel(alice, small("a1"), a)
	if err != nil {
		t.Fatal(err)
	}
	if a1.Destination != "198.18.0.2:7000" {
		t.Errorf("admitted channel's destination %q, want the request's", a1.Destination)
	}
	tight := small("a2")
	tight.Delay /= 2 // a tighter local bound: a better rank
	a2, err := e.AdmitRTChannel(alice, tight, a)
	if err != nil {
		t.Fatal(err)
	}
	cb, err := e.AdmitRTChannel(nobody, small("b"), b)
	if err != nil {
		t.Fatal(err)
	}
	leaves := func() map[uint16]shaper.HTBClass {
		out := map[uint16]shaper.HTBClass{}
		for _, c := range env.k.Snapshot().Trees[2].Classes {
			if c.Minor >= shaper.RTMinor && c.Minor <= shaper.RTMinor+shaper.MaxRTOwners {
				out[c.Minor] = c
			}
		}
		return out
	}
	l := leaves()
	one := l[shaper.RTMinor+1].Rate
	if cls := l[shaper.RTMinor]; cls.Leaf || len(l) != 4 || one == 0 || l[shaper.RTMinor+2].Rate != one || l[shaper.RTMinor+3].Rate != one ||
		cls.Rate != 3*one || l[shaper.RTMinor+1].Ceil != cls.Rate {
		t.Fatalf("real-time classes %+v: want an inner class over a leaf per channel, each guaranteed its rate", l)
	}
	// a2's bound ranks first (prio 0); a1 and b share the second.
	if l[shaper.RTMinor+2].Prio != 0 || l[shaper.RTMinor+1].Prio != 1 || l[shaper.RTMinor+3].Prio != 1 {
		t.Errorf("leaf priorities a1 %d, a2 %d, b %d: want 1, 0, 1", l[shaper.RTMinor+1].Prio, l[shaper.RTMinor+2].Prio, l[shaper.RTMinor+3].Prio)
	}
	// A burst of one 1,200-byte message with its headers.
	if l[shaper.RTMinor+1].Burst < 1200+64+14 {
		t.Errorf("leaf burst %d: want at least a message", l[shaper.RTMinor+1].Burst)
	}
	voice := func(pid int, ch uint64) (uint32, error) {
		e.mu.Lock()
		defer e.mu.Unlock()
		return e.rtClassLocked(Caller{UID: alice.UID, PID: pid}, api.QSockParams{Class: rtchan.DaemonClass, RTChannel: ch}, 7)
	}
	if c, err := voice(100, a2.ID); err != nil || c != shaper.RTOwnerClassID(2) || e.className(c) != rtchan.DaemonClass {
		t.Errorf("a2's socket: class %x (%v), want its own leaf", c, err)
	}
	if c, err := voice(200, cb.ID); err != nil || c != shaper.RTOwnerClassID(3) {
		t.Errorf("b's socket: class %x (%v), want its own leaf", c, err)
	}
	if c, err := voice(100, 0); err != nil || c != shaper.RTOwnerClassID(1) {
		t.Errorf("a socket naming no channel: class %x (%v), want its process's first channel's leaf", c, err)
	}
	var fe *policy.FieldError
	if _, err := voice(100, cb.ID); !errors.As(err, &fe) || fe.Field != "rt_channel" {
		t.Errorf("naming another process's channel: %v, want field rt_channel refused", err)
	}
	// The first process goes; the second's channel keeps its leaf.
	a.dead = true
	e.SweepRTChannels()
	if l := leaves(); len(l) != 2 || l[shaper.RTMinor+3].Rate == 0 {
		t.Errorf("after the first process exited: %+v, want the second's leaf only", l)
	}
	if err := e.CloseRTChannel(nobody, cb.ID); err != nil {
		t.Fatal(err)
	}
	if l := leaves(); len(l) != 0 {
		t.Errorf("no channels: real-time classes %+v", l)
	}
}
