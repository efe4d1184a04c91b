package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/hostqos/hostqos/internal/engine"
	"github.com/hostqos/hostqos/internal/policy"
)

// The node's link from a ClusterQoSPolicy (docs/kubernetes.md): the
// oldest ClusterQoSPolicy with a link that selects the node sets the
// fields it gives (egress and ingress rate, reservable share) on the link
// it names, or on the node's one managed link when it names none. It is a
// persistent change of the link, as `hostqos link set` makes: it stays
// when the API server is gone, across restarts, and when the policy goes
// (until the config file or another policy changes it). A rate "auto"
// makes the node find the link's capacity and follow it
// (docs/autorate.md), within the link's own egress_min/egress_max (and
// ingress_min/ingress_max).

// LinkSetter changes a link (the engine's PatchLink): a Target that has
// it takes the cluster's link settings.
type LinkSetter interface {
	PatchLink(ctx context.Context, who engine.Caller, name string, patch []byte, o engine.LinkChange) (policy.Link, error)
}

const linkTimeout = 30 * time.Second

// applyLink applies m's link, if any, and notes why it did not apply in
// a.linkErr (the policy's condition says it).
func (a *Agent) applyLink(m Mapping) {
	a.linkErr = ""
	if m.Link == nil {
		a.linkDone = ""
		return
	}
	ls, ok := a.target.(LinkSetter)
	src, ok2 := a.target.(LinkSource)
	if !ok || !ok2 {
		a.linkErr = "this node does not take link settings from the cluster"
		return
	}
	l := m.Link
	name := l.Name
	links := src.Links()
	if name == "" {
		if len(links) != 1 {
			a.linkErr = fmt.Sprintf("link: the node manages %d links; name the one to set (link.name)", len(links))
			return
		}
		name = links[0].Name
	}
	patch := map[string]any{}
	var cur *policy.Link
	for i := range links {
		if links[i].Name == name {
			cur = &links[i].Link
		}
	}
	same := cur != nil
	for _, f := range []struct {
		field, v string
		cur      policy.LinkRate
	}{{"egress_rate", l.EgressRate, rateOf(cur, true)}, {"ingress_rate", l.IngressRate, rateOf(cur, false)}} {
		if f.v == "" {
			continue
		}
		r := policy.RateAuto
		if f.v != "auto" {
			rate, err := parseRate(f.v)
			if err != nil {
				a.linkErr = fmt.Sprintf("link %s: %s %q: %v", name, f.field, policy.Clip(f.v), err)
				return
			}
			r = policy.LinkRate(rate)
		}
		patch[f.field] = r
		same = same && policy.LinkRate(r) == f.cur
	}
	if l.Reservable != nil {
		patch["reservable"] = *l.Reservable
		same = same && cur.Reservable == *l.Reservable
	}
	body, err := json.Marshal(patch)
	if err != nil {
		a.linkErr = err.Error()
		return
	}
	done := name + string(body)
	if same || len(patch) == 0 {
		a.linkDone = done
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), linkTimeout)
	defer cancel()
	who := engine.Caller{PID: os.Getpid(), Privileged: true}
	if _, err := ls.PatchLink(ctx, who, name, body, engine.LinkChange{}); err != nil {
		a.linkErr = fmt.Sprintf("link %s: %v", name, err)
		a.log.Warn("set the node's link from the cluster", "policy", m.LinkFrom, "link", name, "err", err)
		return
	}
	a.linkDone = done
	a.log.Info("set the node's link from the cluster", "policy", m.LinkFrom, "link", name, "settings", string(body))
}

func rateOf(l *policy.Link, egress bool) policy.LinkRate {
	switch {
	case l == nil:
		return 0
	case egress:
		return l.EgressRate
	}
	return l.IngressRate
}
