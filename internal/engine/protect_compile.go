package engine

import (
	"net/netip"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/derive"
	"github.com/hostqos/hostqos/internal/policy"
)

// Protected clients become rules in the derive (internal/derive,
// protectedClients); here is what the API lets a caller choose: the class
// their flows go into.

// ProtectedClass is the class a protected client's flows go into when
// the request names none (the default class when the policy lacks it).
const ProtectedClass = derive.ProtectedClass

func protRuleName(ap netip.AddrPort) string { return derive.ProtKey(ap) }

func protClassOf(rec *protRec) string {
	if rec.Class == "" {
		return ProtectedClass
	}
	return rec.Class
}

// classOr is name when the policy has that class, else the default class.
func classOr(p *policy.Policy, name string) string {
	if _, ok := p.Class(name); ok {
		return name
	}
	return policy.DefaultClassName
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
