package engine

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/policy"
	"github.com/hostqos/hostqos/internal/shaper"
)

// The example of over-promising: on a 20 Mbit/s link (16 Mbit/s
// reservable) a rule's 10 Mbit/s guarantee and a 4 Mbit/s guaranteed
// reservation hold 14; a real-time channel of 1200 bytes every 2 ms (about
// 5 Mbit/s on the wire) does not fit beside them, one every 8 ms does.
const budgetConfig = `
[[link]]
name = "eth0"
egress_rate = "20mbit"

[[rule]]
name = "web"
proto = "tcp"
rport = "443"
minbw = "10mbit"
`

func TestOneAdmissionPerLink(t *testing.T) {
	env := newEnv(t, budgetConfig)
	e := env.start(t)
	if _, err := e.AddReservation(context.Background(), root, testResv("media", policy.ServiceGuaranteed, 4e6), false); err != nil {
		t.Fatal(err)
	}
	req := api.RTChannelRequest{Name: "telemetry", Link: "eth0", MessageBytes: 1200, Period: 2 * time.Millisecond, Burst: 1, Delay: 50 * time.Millisecond}
	calls := len(env.k.Calls)
	_, err := e.AdmitRTChannel(root, req, &fakeOwner{pid: 300})
	if err == nil {
		t.Fatal("a channel over the link's budget was admitted")
	}
	for _, want := range []string{"rtchannel \"telemetry\"", "over its reservable capacity 16mbit", "rule web 10mbit", "reservation media 4mbit"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q does not name %q", err, want)
		}
	}
	if len(env.k.Calls) != calls {
		t.Errorf("a refused channel changed the kernel: %v", env.k.Calls[calls:])
	}
	req.Period = 8 * time.Millisecond
	ch, err := e.AdmitRTChannel(root, req, &fakeOwner{pid: 300})
	if err != nil {
		t.Fatalf("a channel that fits refused: %v", err)
	}
	// Its own HTB leaf at its wire rate; the link's view names it.
	plan := env.k.Trees[2]
	leaf := false
	for _, c := range plan.Classes {
		if c.Minor == shaper.RTMinor {
			leaf = c.Rate > 1_200_000 && c.Rate < 1_300_000 && c.Ceil == c.Rate
		}
	}
	if !leaf {
		t.Errorf("no real-time leaf of about 1.24 Mbit/s on eth0: %+v", plan.Classes)
	}
	ls := e.Links()
	if ls[0].Reserved < 15_200_000 || ls[0].Reserved > 15_300_000 || len(ls[0].Guarantees) != 3 || ls[0].Guarantees[2].Kind != "rtchannel" {
		t.Errorf("link view: reserved %v by %+v", ls[0].Reserved, ls[0].Guarantees)
	}
	// So is a scheduled qsocket's rate (the qsched class is on every
	// shaped link).
	e.mu.Lock()
	err = e.admitQSchedBudgetLocked(1e6, 1e6)
	e.mu.Unlock()
	if err == nil || !strings.Contains(err.Error(), "rtchannel") || !strings.Contains(err.Error(), "rule web 10mbit") {
		t.Errorf("a scheduled qsocket over the budget: %v", err)
	}
	// A rule's guarantee that no longer fits beside the channel is refused
	// naming it; nothing changes.
	_, err = e.AddRule(context.Background(), root, policy.Rule{Name: "more", Proto: "udp", MinBW: 1e6, DSCP: policy.NoDSCP, DSCPIn: policy.NoDSCP}, false)
	if err == nil || !strings.Contains(err.Error(), "rtchannel") {
		t.Errorf("a rule over the budget beside a channel: %v", err)
	}
	// Taking the link's shaping away under the channel is refused naming
	// it, unless forced.
	err = e.SetLink(context.Background(), root, "eth0", policy.Link{Name: "eth0"}, LinkChange{})
	if err == nil || !strings.Contains(err.Error(), "rtchannel") || !strings.Contains(err.Error(), "unenforced") {
		t.Errorf("removing the link's egress_rate under a channel: %v", err)
	}
	// Closed, the channel gives its share and its leaf back.
	if err := e.CloseRTChannel(root, ch.ID); err != nil {
		t.Fatal(err)
	}
	for _, c := range env.k.Trees[2].Classes {
		if c.Minor == shaper.RTMinor {
			t.Errorf("the real-time leaf outlived its last channel: %+v", c)
		}
	}
	if _, err := e.AddRule(context.Background(), root, policy.Rule{Name: "more", Proto: "udp", MinBW: 1e6, DSCP: policy.NoDSCP, DSCPIn: policy.NoDSCP}, false); err != nil {
		t.Errorf("the rule fits once the channel closed: %v", err)
	}
}
