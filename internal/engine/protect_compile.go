package engine

import (
	"net/netip"
	"sort"
	"strconv"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/policy"
)

// How protected clients compile (docs/ddos.md, "Protected clients get a
// class"). Besides its XDP entry (never SYN-throttled), each protected
// client becomes a hidden rule of the compiled policy, protRuleName
// ("prot:ADDR:PORT", a name no user rule can have): remote = the client's
// address, proto tcp and lport = the protected port (any protocol and
// port when 0, the admin's "every port"), class = the class the
// entry names. So our answers to the client leave with that class's DSCP,
// priority and HTB leaf through the ordinary rule machinery.
//
// Precedence: a client protected by root or group hostqos is evaluated
// with the reservations (precedence 65535), before the admin's ordinary
// rules; a client protected by an ordinary user compiles as a rule of
// that user's tier (like their runs: after every admin rule, and only for
// sockets of their uid), so the admin's drops, limits and marks win.

// ProtectedClass is the class a protected client's flows go into when
// the request names none (the default class when the policy lacks it).
const ProtectedClass = "interactive"

// protPrecedence is the precedence of an admin's protected client.
const protPrecedence = policy.MaxPrecedence

func protRuleName(ap netip.AddrPort) string { return "prot:" + ap.String() }

// withProtectedLocked returns p with a rule per protected client (p is
// not changed; p itself when there is none).
func (e *Engine) withProtectedLocked(p *policy.Policy) *policy.Policy {
	if e.shieldKernel() == nil {
		return p
	}
	s, err := e.shieldLocked()
	if err != nil || len(s.Protected) == 0 {
		return p
	}
	return protectedRules(p, s)
}

func protectedRules(p *policy.Policy, s *shieldState) *policy.Policy {
	keys := make([]netip.AddrPort, 0, len(s.Protected))
	for ap := range s.Protected {
		keys = append(keys, ap)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].Compare(keys[j]) < 0 })
	ep := *p
	ep.Rules = append(make([]policy.Rule, 0, len(p.Rules)+len(keys)), p.Rules...)
	for _, ap := range keys {
		rec := s.Protected[ap]
		r := policy.Rule{
			Name:   protRuleName(ap),
			Remote: netip.PrefixFrom(ap.Addr(), ap.Addr().BitLen()),
			Class:  classOr(&ep, protClassOf(rec)),
			DSCP:   policy.NoDSCP, DSCPIn: policy.NoDSCP, // the class's DSCP, any incoming
		}
		if ap.Port() != 0 {
			r.Proto, r.LPort = "tcp", policy.PortRange{From: ap.Port(), To: ap.Port()}
		}
		if rec.Admin {
			r.Precedence = protPrecedence
		} else {
			r.UserRun, r.User = true, strconv.FormatUint(uint64(rec.UID), 10)
		}
		ep.Rules = append(ep.Rules, r)
	}
	return &ep
}

func protClassOf(rec *protRec) string {
	if rec.Class == "" {
		return ProtectedClass
	}
	return rec.Class
}

// protectClass decides the class of a protection req asks for: the named
// one (it must exist; an ordinary user may name only user_allowed
// classes), else ProtectedClass — for an ordinary user only when it is
// user_allowed, else the default class.
func (e *Engine) protectClass(who Caller, req api.ProtectRequest) (string, error) {
	e.mu.Lock()
	p := e.eff.Policy
	e.mu.Unlock()
	if p == nil {
		return "", errNotLoaded
	}
	if req.Class == "" {
		name := classOr(p, ProtectedClass)
		if c, _ := p.Class(name); !who.Privileged && !c.UserAllowed {
			name = policy.DefaultClassName
		}
		return name, nil
	}
	c, ok := p.Class(req.Class)
	if !ok {
		return "", &policy.FieldError{Source: "api", Object: "protected client", Field: "class", Value: policy.Clip(req.Class),
			Reason: "no such class", Fix: "name a class of `hostqos class list`, or leave it out for " + ProtectedClass}
	}
	if !who.Privileged && !c.UserAllowed {
		return "", &policy.FieldError{Source: "api", Object: "protected client", Field: "class", Value: policy.Clip(req.Class),
			Reason: "the class is not open to ordinary users", Fix: "pick a class with user_allowed = true, or ask the admin to set it"}
	}
	return c.Name, nil
}
