package engine

import (
	"context"
	"errors"
	"net/netip"
	"testing"

	"github.com/hostqos/hostqos/internal/store"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/datapath/xdp"
	"github.com/hostqos/hostqos/internal/host/fakehost"
	"github.com/hostqos/hostqos/internal/policy"
)

func (env *testEnv) startShield(t *testing.T) (*Engine, *fakehost.FakeShieldKernel) {
	t.Helper()
	sk := fakehost.NewFakeShieldKernel(env.k)
	e, err := New(env.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start(Host{Kernel: sk, Shield: sk}); err != nil {
		t.Fatal(err)
	}
	return e, sk
}

const shieldConfig = `
[[link]]
name = "eth0"

[[block]]
prefix = "203.0.113.0/24"
`

func TestBlocksAddListRemovePersist(t *testing.T) {
	env := newEnv(t, shieldConfig)
	e, sk := env.startShield(t)
	ctx := context.Background()
	// The config file's block is in the kernel, and the link carries XDP.
	if _, ok := sk.Blocks[netip.MustParsePrefix("203.0.113.0/24")]; !ok || len(sk.XDP) != 1 {
		t.Fatalf("blocks %v, xdp %v", sk.Blocks, sk.XDP)
	}
	if _, err := e.AddBlock(ctx, root, api.BlockRequest{Prefix: netip.MustParsePrefix("2001:db8:bad::/48"), MaxBWIn: 1_000_000, TTLSeconds: 3600}); err != nil {
		t.Fatal(err)
	}
	if sk.Blocks[netip.MustParsePrefix("2001:db8:bad::/48")] != 1_000_000 {
		t.Fatalf("quarantine not pushed: %v", sk.Blocks)
	}
	bs, err := e.Blocks()
	if err != nil || len(bs) != 2 || bs[0].Source != store.SrcConfig || bs[1].Source != store.SrcAPI || bs[1].Expires == nil {
		t.Fatalf("blocks %+v, %v", bs, err)
	}
	// Bad input changes nothing and names the field.
	for _, bad := range []api.BlockRequest{
		{Prefix: netip.MustParsePrefix("198.18.1.1/16")},
		{Prefix: netip.MustParsePrefix("198.18.0.0/16"), MaxBWIn: 100},
		{Prefix: netip.MustParsePrefix("198.18.0.0/16"), TTLSeconds: -1},
		{},
	} {
		_, err := e.AddBlock(ctx, root, bad)
		var fe *policy.FieldError
		if !errors.As(err, &fe) {
			t.Errorf("%+v: error %v, want a field error", bad, err)
		}
	}
	if len(sk.Blocks) != 2 {
		t.Fatalf("bad input changed the kernel: %v", sk.Blocks)
	}
	// Only admins change the drop list; the config file's entry stays.
	if _, err := e.AddBlock(ctx, alice, api.BlockRequest{Prefix: netip.MustParsePrefix("198.18.0.0/16")}); err == nil {
		t.Fatal("ordinary user added a block")
	}
	if err := e.RemoveBlock(ctx, root, "203.0.113.0/24"); err == nil {
		t.Fatal("removed the config file's block through the API")
	}
	// A restart keeps the API's entry with its deadline.
	e2, sk2 := env.startShield(t)
	bs2, _ := e2.Blocks()
	if len(bs2) != 2 || bs2[1].Expires == nil || !bs2[1].Expires.Equal(*bs[1].Expires) || len(sk2.Blocks) != 2 {
		t.Fatalf("after restart %+v (kernel %v)", bs2, sk2.Blocks)
	}
	if err := e2.RemoveBlock(ctx, root, "2001:db8:bad::/48"); err != nil {
		t.Fatal(err)
	}
	if len(sk2.Blocks) != 1 {
		t.Fatalf("remove: %v", sk2.Blocks)
	}
}

func TestBlockTTLExpires(t *testing.T) {
	env := newEnv(t, "[[link]]\nname = \"eth0\"\n")
	e, sk := env.startShield(t)
	if _, err := e.AddBlock(context.Background(), root, api.BlockRequest{Prefix: netip.MustParsePrefix("198.18.7.0/24"), TTLSeconds: 1}); err != nil {
		t.Fatal(err)
	}
	if len(sk.XDP) != 1 {
		t.Fatalf("link without XDP while the drop list is not empty: %v", sk.XDP)
	}
	// Pretend the deadline passed.
	e.mu.Lock()
	e.shield.Blocks[netip.MustParsePrefix("198.18.7.0/24")].Expires = 1
	e.mu.Unlock()
	e.Tick()
	if len(sk.Blocks) != 0 {
		t.Fatalf("expired block still in the kernel: %v", sk.Blocks)
	}
	if len(sk.XDP) != 0 {
		t.Fatalf("XDP left on a link that needs none: %v", sk.XDP)
	}
	e2, _ := env.startShield(t)
	if bs, _ := e2.Blocks(); len(bs) != 0 {
		t.Fatalf("expired block came back after restart: %+v", bs)
	}
}

func TestBlockFailedPushChangesNothing(t *testing.T) {
	env := newEnv(t, "[[link]]\nname = \"eth0\"\n")
	e, sk := env.startShield(t)
	sk.FailNth("AttachXDP", 1, errors.New("boom"))
	if _, err := e.AddBlock(context.Background(), root, api.BlockRequest{Prefix: netip.MustParsePrefix("198.18.7.0/24")}); err == nil {
		t.Fatal("failed push reported success")
	}
	if len(sk.Blocks) != 0 || len(sk.XDP) != 0 {
		t.Fatalf("half-applied: blocks %v xdp %v", sk.Blocks, sk.XDP)
	}
	if bs, _ := e.Blocks(); len(bs) != 0 {
		t.Fatalf("engine kept the failed block: %+v", bs)
	}
}

func TestSynLimitsOnLink(t *testing.T) {
	env := newEnv(t, "")
	e, sk := env.startShield(t)
	ctx := context.Background()
	if err := e.SetLink(ctx, root, "eth0", policy.Link{SynRate: 1000, SynRatePerSource: 50}, LinkChange{}); err != nil {
		t.Fatal(err)
	}
	if got := sk.XDP[2]; got != (xdp.SynLimits{Rate: 1000, PerSource: 50}) {
		t.Fatalf("syn limits %+v", got)
	}
	err := e.SetLink(ctx, root, "eth0", policy.Link{SynRate: -1}, LinkChange{})
	var fes policy.Errors
	if !errors.As(err, &fes) || fes[0].Field != "syn_rate" {
		t.Fatalf("negative syn_rate: %v", err)
	}
	if err := e.SetLink(ctx, root, "eth0", policy.Link{}, LinkChange{}); err != nil {
		t.Fatal(err)
	}
	if len(sk.XDP) != 0 {
		t.Fatalf("XDP left after the limits went: %v", sk.XDP)
	}
}

func TestProtectWhoMay(t *testing.T) {
	env := newEnv(t, "")
	e, sk := env.startShield(t)
	ctx := context.Background()
	client := netip.MustParseAddr("198.51.100.7")
	sk.Listeners[8443] = []uint32{alice.UID}
	// alice listens on 8443: she may protect a client there, not on
	// another port, not on every port.
	if _, err := e.Protect(ctx, alice, api.ProtectRequest{Addr: client, Port: 8443}); err != nil {
		t.Fatal(err)
	}
	for _, port := range []uint16{22, 0} {
		_, err := e.Protect(ctx, alice, api.ProtectRequest{Addr: client, Port: port})
		var fb *ForbiddenError
		if !errors.As(err, &fb) {
			t.Errorf("alice protecting port %d: %v", port, err)
		}
	}
	if _, err := e.Protect(ctx, nobody, api.ProtectRequest{Addr: client, Port: 8443}); err == nil {
		t.Error("nobody protected a client on alice's port")
	}
	if _, err := e.Protect(ctx, root, api.ProtectRequest{Addr: netip.MustParseAddr("2001:db8::7")}); err != nil {
		t.Fatal(err)
	}
	if !sk.Protected[xdp.Protected{Addr: client, Port: 8443}] || !sk.Protected[xdp.Protected{Addr: netip.MustParseAddr("2001:db8::7")}] {
		t.Fatalf("kernel protected %v", sk.Protected)
	}
	// Users see and end their own only.
	if ps, _ := e.Protected(alice); len(ps) != 1 {
		t.Fatalf("alice sees %+v", ps)
	}
	if err := e.Unprotect(ctx, nobody, "198.51.100.7:8443"); err == nil {
		t.Fatal("nobody ended alice's protection")
	}
	if err := e.Unprotect(ctx, alice, "198.51.100.7:8443"); err != nil {
		t.Fatal(err)
	}
	if len(sk.Protected) != 1 {
		t.Fatalf("kernel protected %v", sk.Protected)
	}
}
