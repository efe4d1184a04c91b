package engine

import (
	"context"
	"errors"
	"net/netip"
	"testing"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/datapath"
	"github.com/hostqos/hostqos/internal/datapath/xdp"
	"github.com/hostqos/hostqos/internal/host/fakehost"
	"github.com/hostqos/hostqos/internal/policy"
)

// protRule finds the compiled rule of a protected client and its index in
// evaluation order.
func protRule(t *testing.T, e *Engine, k *fakehost.FakeKernel, ap string) (datapath.Rule, int, bool) {
	t.Helper()
	e.mu.Lock()
	slot, ok := e.slots.Rules[protRuleName(netip.MustParseAddrPort(ap))]
	e.mu.Unlock()
	if !ok {
		return datapath.Rule{}, -1, false
	}
	for i, r := range k.Rules.Rules {
		if r.Slot == uint16(slot) {
			return r, i, true
		}
	}
	return datapath.Rule{}, -1, false
}

func ruleIndex(t *testing.T, e *Engine, k *fakehost.FakeKernel, name string) int {
	t.Helper()
	e.mu.Lock()
	slot, ok := e.slots.Rules[name]
	e.mu.Unlock()
	if !ok {
		t.Fatalf("rule %s has no slot", name)
	}
	for i, r := range k.Rules.Rules {
		if r.Slot == uint16(slot) {
			return i
		}
	}
	t.Fatalf("rule %s not in the datapath", name)
	return -1
}

const protConfig = `
[[link]]
name = "eth0"

[[rule]]
name = "web-bulk"
proto = "tcp"
lport = "443"
class = "bulk"
`

func TestProtectCompilesToClassRule(t *testing.T) {
	env := newEnv(t, protConfig)
	e, sk := env.startShield(t)
	ctx := context.Background()
	pi, err := e.Protect(ctx, root, api.ProtectRequest{Addr: netip.MustParseAddr("198.51.100.7"), Port: 443})
	if err != nil {
		t.Fatal(err)
	}
	if pi.Class != "interactive" {
		t.Fatalf("default class %q", pi.Class)
	}
	r, i, ok := protRule(t, e, env.k, "198.51.100.7:443")
	if !ok {
		t.Fatalf("no rule for the protected client: %+v", env.k.Rules.Rules)
	}
	if r.Remote != netip.MustParsePrefix("198.51.100.7/32") || r.LPortFrom != 443 || r.LPortTo != 443 || r.DSCP != 34 || r.DSCPIn != -1 || r.ClassID == 0 || r.UID != nil {
		t.Fatalf("compiled %+v", r)
	}
	// An admin's protection goes before the admin's ordinary rules.
	if web := ruleIndex(t, e, env.k, "web-bulk"); i > web {
		t.Fatalf("protected rule at %d after web-bulk at %d", i, web)
	}
	// Another class, IPv6, every port.
	if _, err := e.Protect(ctx, root, api.ProtectRequest{Addr: netip.MustParseAddr("2001:db8::7"), Class: "voice"}); err != nil {
		t.Fatal(err)
	}
	r6, _, ok := protRule(t, e, env.k, "[2001:db8::7]:0")
	if !ok || r6.DSCP != 46 || r6.LPortFrom != 0 || r6.LPortTo != 0 || r6.Remote.Bits() != 128 {
		t.Fatalf("ipv6 rule %+v (found %v)", r6, ok)
	}
	ps, _ := e.Protected(root)
	if len(ps) != 2 || ps[0].Class != "interactive" || ps[1].Class != "voice" {
		t.Fatalf("list %+v", ps)
	}
	// Removal takes the rule and the XDP entry away together.
	if err := e.Unprotect(ctx, root, "198.51.100.7:443"); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := protRule(t, e, env.k, "198.51.100.7:443"); ok {
		t.Fatal("rule left after unprotect")
	}
	if sk.Protected[xdp.Protected{Addr: netip.MustParseAddr("198.51.100.7"), Port: 443}] {
		t.Fatal("XDP entry left after unprotect")
	}
	// Persisted: a restart compiles the remaining one again.
	e.Detach()
	e2, _ := env.startShield(t)
	if _, _, ok := protRule(t, e2, env.k, "[2001:db8::7]:0"); !ok {
		t.Fatal("protected client's rule lost on restart")
	}
}

func TestProtectClassValidation(t *testing.T) {
	env := newEnv(t, protConfig)
	e, sk := env.startShield(t)
	ctx := context.Background()
	client := netip.MustParseAddr("198.51.100.8")
	sk.Listeners[8443] = []uint32{alice.UID}
	var fe *policy.FieldError
	_, err := e.Protect(ctx, root, api.ProtectRequest{Addr: client, Port: 8443, Class: "nosuch"})
	if !errors.As(err, &fe) || fe.Field != "class" || fe.Value != "nosuch" || fe.Fix == "" {
		t.Fatalf("unknown class: %v", err)
	}
	_, err = e.Protect(ctx, alice, api.ProtectRequest{Addr: client, Port: 8443, Class: "voice"})
	if !errors.As(err, &fe) || fe.Field != "class" || fe.Value != "voice" {
		t.Fatalf("alice naming voice: %v", err)
	}
	if len(sk.Protected) != 0 || len(env.k.Rules.Rules) != 1 {
		t.Fatalf("refused request changed something: %v %+v", sk.Protected, env.k.Rules.Rules)
	}
	// Without --class an ordinary user gets the default class
	// (interactive is not user_allowed); with a user_allowed one, that.
	pi, err := e.Protect(ctx, alice, api.ProtectRequest{Addr: client, Port: 8443})
	if err != nil || pi.Class != policy.DefaultClassName {
		t.Fatalf("alice default: %+v %v", pi, err)
	}
	pi, err = e.Protect(ctx, alice, api.ProtectRequest{Addr: client, Port: 8443, Class: "bulk"})
	if err != nil || pi.Class != "bulk" {
		t.Fatalf("alice bulk: %+v %v", pi, err)
	}
	// A user's protection is in the users' tier, for their own sockets:
	// after the admin's rules.
	r, i, ok := protRule(t, e, env.k, "198.51.100.8:8443")
	if !ok || r.UID == nil || *r.UID != alice.UID || r.DSCP != 1 { // class bulk: LE
		t.Fatalf("alice's rule %+v (found %v)", r, ok)
	}
	if web := ruleIndex(t, e, env.k, "web-bulk"); i < web {
		t.Fatalf("user's protected rule at %d before the admin's web-bulk at %d", i, web)
	}
}

// A failure at any kernel step of a protection leaves neither the XDP
// entry nor the rule, in the kernel or the state.
func TestProtectFailNthRollsBack(t *testing.T) {
	for _, op := range []struct {
		shield bool
		name   string
	}{{false, "ApplyRules"}, {true, "SetProtected"}} {
		t.Run(op.name, func(t *testing.T) {
			env := newEnv(t, protConfig)
			e, sk := env.startShield(t)
			ctx := context.Background()
			before := env.k.Rules
			if op.shield {
				sk.FailNth(op.name, 1, errors.New("boom"))
			} else {
				env.k.FailNth(op.name, 1, errors.New("boom"))
			}
			if _, err := e.Protect(ctx, root, api.ProtectRequest{Addr: netip.MustParseAddr("198.51.100.9"), Port: 443}); err == nil {
				t.Fatal("failed change reported success")
			}
			if len(sk.Protected) != 0 || len(env.k.Rules.Rules) != len(before.Rules) {
				t.Fatalf("half-applied: xdp %v rules %+v", sk.Protected, env.k.Rules.Rules)
			}
			if ps, _ := e.Protected(root); len(ps) != 0 {
				t.Fatalf("engine kept it: %+v", ps)
			}
			if _, _, ok := protRule(t, e, env.k, "198.51.100.9:443"); ok {
				t.Fatal("rule left")
			}
			// And removal: fail, everything stays.
			if _, err := e.Protect(ctx, root, api.ProtectRequest{Addr: netip.MustParseAddr("198.51.100.9"), Port: 443}); err != nil {
				t.Fatal(err)
			}
			if op.shield {
				sk.FailNth(op.name, 1, errors.New("boom"))
			} else {
				env.k.FailNth(op.name, 1, errors.New("boom"))
			}
			if err := e.Unprotect(ctx, root, "198.51.100.9:443"); err == nil {
				t.Fatal("failed removal reported success")
			}
			if _, _, ok := protRule(t, e, env.k, "198.51.100.9:443"); !ok || len(sk.Protected) != 1 {
				t.Fatalf("failed removal half-applied: rule %v xdp %v", ok, sk.Protected)
			}
		})
	}
}

// TTL expiry removes the rule with the XDP entry.
func TestProtectTTLExpiryRemovesRule(t *testing.T) {
	env := newEnv(t, protConfig)
	e, sk := env.startShield(t)
	if _, err := e.Protect(context.Background(), root, api.ProtectRequest{Addr: netip.MustParseAddr("198.51.100.10"), Port: 443, TTLSeconds: 60}); err != nil {
		t.Fatal(err)
	}
	e.mu.Lock()
	for _, p := range e.shield.Protected {
		p.Expires = 1
	}
	e.mu.Unlock()
	e.ExpireShield()
	if _, _, ok := protRule(t, e, env.k, "198.51.100.10:443"); ok || len(sk.Protected) != 0 {
		t.Fatalf("expired: rule %v xdp %v", ok, sk.Protected)
	}
}
