package policy

import (
	"net/netip"
	"reflect"
	"testing"
)

func TestSpecificity(t *testing.T) {
	r := func(mod func(*Rule)) Rule { x := NewRule("x"); mod(&x); return x }
	cases := []struct {
		name string
		r    Rule
		want int
	}{
		{"exe", r(func(x *Rule) { x.Exe = "/usr/bin/curl" }), 48},
		{"exe glob", r(func(x *Rule) { x.Exe = "/usr/bin/*" }), 32},
		{"unit", r(func(x *Rule) { x.Unit = "a.service" }), 40},
		{"cgroup", r(func(x *Rule) { x.Cgroup = "/a" }), 40},
		{"comm", r(func(x *Rule) { x.Comm = "a" }), 32},
		{"user", r(func(x *Rule) { x.User = "a" }), 16},
		{"proto", r(func(x *Rule) { x.Proto = "udp" }), 8},
		{"dscp_in", r(func(x *Rule) { x.DSCPIn = 0 }), 8},
		{"v4 /32", r(func(x *Rule) { x.Remote = netip.MustParsePrefix("198.18.0.1/32") }), 33},
		{"v4 /24", r(func(x *Rule) { x.Remote = netip.MustParsePrefix("198.18.0.0/24") }), 25},
		{"v4 /0", r(func(x *Rule) { x.Local = netip.MustParsePrefix("0.0.0.0/0") }), 1},
		{"v6 /128", r(func(x *Rule) { x.Remote = netip.MustParsePrefix("2001:db8::1/128") }), 33},
		{"v6 /64", r(func(x *Rule) { x.Remote = netip.MustParsePrefix("2001:db8::/64") }), 17},
		{"one port", r(func(x *Rule) { x.Proto, x.RPort = "tcp", PortRange{443, 443} }), 8 + 17},
		{"two ports", r(func(x *Rule) { x.Proto, x.RPort = "tcp", PortRange{80, 81} }), 8 + 16},
		{"1000-2000", r(func(x *Rule) { x.Proto, x.LPort = "tcp", PortRange{1000, 2000} }), 8 + 7},
		{"all ports", r(func(x *Rule) { x.Proto, x.LPort = "tcp", PortRange{1, 65535} }), 8 + 1},
		{"combo", r(func(x *Rule) {
			x.Exe, x.User, x.Proto, x.RPort, x.Remote = "/usr/bin/ssh", "alice", "tcp", PortRange{22, 22}, netip.MustParsePrefix("198.18.0.0/15")
		}), 48 + 16 + 8 + 17 + 16},
	}
	for _, tc := range cases {
		if got := tc.r.Specificity(); got != tc.want {
			t.Errorf("%s: Specificity = %d, want %d", tc.name, got, tc.want)
		}
	}
}

func TestOrderedRules(t *testing.T) {
	mk := func(name string, prec int, mod func(*Rule)) Rule {
		r := NewRule(name)
		r.Precedence = prec
		mod(&r)
		return r
	}
	p := DefaultPolicy()
	p.Rules = []Rule{
		mk("all-udp", 0, func(r *Rule) { r.Proto = "udp" }),                                                      // 8
		mk("dns", 0, func(r *Rule) { r.Proto, r.RPort = "udp", PortRange{53, 53} }),                              // 25
		mk("zoom", 0, func(r *Rule) { r.Exe = "/opt/zoom/zoom" }),                                                // 48
		mk("lan", 0, func(r *Rule) { r.Remote = netip.MustParsePrefix("198.18.0.0/15") }),                        // 16
		mk("host", 0, func(r *Rule) { r.Remote = netip.MustParsePrefix("198.18.0.9/32") }),                       // 33
		mk("block", 100, func(r *Rule) { r.Remote = netip.MustParsePrefix("198.18.0.0/15"); r.Action = "drop" }), // prec 100
		mk("override", 10, func(r *Rule) { r.Proto = "udp" }),                                                    // prec 10
		mk("b-tie", 0, func(r *Rule) { r.Comm = "b" }),                                                           // 32
		mk("a-tie", 0, func(r *Rule) { r.Comm = "a" }),                                                           // 32
	}
	var got []string
	for _, r := range p.OrderedRules() {
		got = append(got, r.Name)
	}
	want := []string{"block", "override", "zoom", "host", "a-tie", "b-tie", "dns", "lan", "all-udp"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("order = %v\nwant    %v", got, want)
	}
	if p.Rules[0].Name != "all-udp" {
		t.Error("OrderedRules modified p.Rules")
	}
}

// TestUserRunTier: the rule of an ordinary user's run comes after every
// admin rule, whatever the precedences; among
// themselves the usual order holds.
func TestUserRunTier(t *testing.T) {
	mk := func(name string, prec int, user bool, mod func(*Rule)) Rule {
		r := NewRule(name)
		r.Precedence, r.UserRun = prec, user
		mod(&r)
		return r
	}
	p := DefaultPolicy()
	p.Rules = []Rule{
		mk("run-b", MaxPrecedence, true, func(r *Rule) { r.Cgroup = "/hostqos/run-b" }),
		mk("run-a", 0, true, func(r *Rule) { r.Cgroup = "/hostqos/run-a" }),
		mk("admin-run", 60000, false, func(r *Rule) { r.Cgroup = "/hostqos/run-c" }),
		mk("catch-all", 0, false, func(*Rule) {}),
		mk("block", 1000, false, func(r *Rule) { r.Remote = netip.MustParsePrefix("198.18.0.2/32"); r.Action = "drop" }),
		mk("ef", 1, false, func(r *Rule) { r.Proto, r.RPort = "udp", PortRange{7000, 7000} }),
	}
	var got []string
	for _, r := range p.OrderedRules() {
		got = append(got, r.Name)
	}
	want := []string{"admin-run", "block", "ef", "catch-all", "run-b", "run-a"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("order = %v\nwant    %v", got, want)
	}
}
