package policy

import (
	"errors"
	"fmt"
	"net/netip"
	"os/user"
	"strconv"
	"strings"
	"testing"
)

// basePolicy is a valid policy the validation cases modify.
func basePolicy() *Policy {
	p := DefaultPolicy()
	p.Links = []Link{{Name: "veth0", EgressRate: 20_000_000}}
	r := NewRule("web")
	r.Exe = "/usr/bin/curl"
	r.Class = "bulk"
	p.Rules = []Rule{r}
	return p
}

func TestValidateOK(t *testing.T) {
	p := basePolicy()
	r := NewRule("all-options")
	r.Exe, r.Comm, r.Cgroup, r.Unit, r.User = "/opt/*/bin/[a-z]*", "firefox", "/system.slice/x.service", "user@1000.service", "www-data"
	r.Proto, r.Local, r.Remote = "tcp", netip.MustParsePrefix("198.18.0.0/15"), netip.MustParsePrefix("198.19.1.0/24")
	r.LPort, r.RPort, r.DSCPIn = PortRange{1000, 2000}, PortRange{443, 443}, 46
	r.Class, r.DSCP, r.MinBW, r.MaxBW, r.Action, r.Precedence = "voice", 34, 1_000_000, 2_000_000, ActionPass, MaxPrecedence
	p.Rules = append(p.Rules, r)
	drop := NewRule("drop-it")
	drop.Remote, drop.Action = netip.MustParsePrefix("2001:db8::/32"), ActionDrop
	p.Rules = append(p.Rules, drop)
	uid := NewRule("by-uid")
	uid.User = "1000"
	p.Rules = append(p.Rules, uid)
	p.Links = append(p.Links, Link{Name: "eth0.100", Reservable: 1})
	if err := p.Validate("api"); err != nil {
		t.Fatalf("Validate: %v", err)
	}
}

func TestValidate(t *testing.T) {
	cases := []struct {
		name   string
		mod    func(p *Policy)
		object string
		field  string
		want   string // substring of Error()
	}{
		{"empty rule name", func(p *Policy) { p.Rules[0].Name = "" }, `rule #1`, "name", "missing"},
		{"bad rule name", func(p *Policy) { p.Rules[0].Name = "Web Server" }, `rule "Web Server"`, "name", "web-server"},
		{"long name", func(p *Policy) { p.Rules[0].Name = strings.Repeat("a", 64) }, "", "name", "too long: 64 bytes, at most 63"},
		{"dup rule", func(p *Policy) { p.Rules = append(p.Rules, p.Rules[0]) }, `rule "web"`, "name", "duplicate rule name"},
		{"dup class", func(p *Policy) { p.Classes = append(p.Classes, p.Classes[0]) }, `class "voice"`, "name", "duplicate class name"},
		{"link name empty", func(p *Policy) { p.Links[0].Name = "" }, `link #1`, "name", "missing"},
		{"link name long", func(p *Policy) { p.Links[0].Name = "abcdefghijklmnop" }, "", "name", "at most 15"},
		{"link name slash", func(p *Policy) { p.Links[0].Name = "a/b" }, "", "name", "no '/'"},
		{"link name space", func(p *Policy) { p.Links[0].Name = "a b" }, "", "name", "spaces"},
		{"dup link", func(p *Policy) { p.Links = append(p.Links, p.Links[0]) }, `link "veth0"`, "name", "duplicate link"},
		{"reservable >1", func(p *Policy) { p.Links[0].Reservable = 1.5 }, `link "veth0"`, "reservable", "(0, 1]"},
		{"reservable <0", func(p *Policy) { p.Links[0].Reservable = -0.1 }, `link "veth0"`, "reservable", "= -0.1"},
		{"class prio", func(p *Policy) { p.Classes[0].Priority = 8 }, `class "voice"`, "priority", "priority = 8: out of range"},
		{"class dscp", func(p *Policy) { p.Classes[0].DSCP = 64 }, `class "voice"`, "dscp", "0..63"},
		{"class min>max", func(p *Policy) { p.Classes[0].MinBW, p.Classes[0].MaxBW = 2e6, 1e6 }, `class "voice"`, "minbw", `minbw = "2mbit": greater than maxbw 1mbit`},
		{"no default class", func(p *Policy) { p.Classes = p.Classes[:2] }, `class "default"`, "", "must always have class default"},
		{"unknown class", func(p *Policy) { p.Rules[0].Class = "gold" }, `rule "web"`, "class", `class = "gold": no such class; defined classes: bulk, default, interactive, scavenger, voice`},
		{"rule min>max", func(p *Policy) { p.Rules[0].MinBW, p.Rules[0].MaxBW = 3e6, 1e6 }, `rule "web"`, "minbw", "greater than maxbw 1mbit"},
		{"rule max>class max", func(p *Policy) {
			p.Classes[3].MaxBW = 5e6
			p.Rules[0].MaxBW = 6e6
		}, `rule "web"`, "maxbw", "exceeds the maxbw 5mbit of its class bulk"},
		{"proto", func(p *Policy) { p.Rules[0].Proto = "sctp" }, `rule "web"`, "proto", `proto = "sctp": unknown protocol`},
		{"proto case", func(p *Policy) { p.Rules[0].Proto = "TCP" }, `rule "web"`, "proto", "lower case: tcp"},
		{"lport without proto", func(p *Policy) { p.Rules[0].LPort = PortRange{80, 80} }, `rule "web"`, "lport", "lport needs --proto tcp or udp"},
		{"rport with icmp", func(p *Policy) { p.Rules[0].Proto, p.Rules[0].RPort = "icmp", PortRange{1, 2} }, `rule "web"`, "rport", "rport needs --proto tcp or udp"},
		{"bad port range", func(p *Policy) { p.Rules[0].Proto, p.Rules[0].RPort = "tcp", PortRange{9, 2} }, `rule "web"`, "rport", "not a port range"},
		{"family mismatch", func(p *Policy) {
			p.Rules[0].Local, p.Rules[0].Remote = netip.MustParsePrefix("198.18.0.0/15"), netip.MustParsePrefix("2001:db8::/32")
		}, `rule "web"`, "remote", "address family differs from local 198.18.0.0/15"},
		{"host bits", func(p *Policy) { p.Rules[0].Remote = netip.MustParsePrefix("198.18.0.1/15") }, `rule "web"`, "remote", "did you mean 198.18.0.0/15?"},
		{"exe relative", func(p *Policy) { p.Rules[0].Exe = "curl" }, `rule "web"`, "exe", `exe = "curl": must be an absolute path or glob`},
		{"exe bad glob", func(p *Policy) { p.Rules[0].Exe = "/usr/bin/[a" }, `rule "web"`, "exe", "bad glob syntax"},
		{"exe unclean", func(p *Policy) { p.Rules[0].Exe = "/usr//bin/curl" }, `rule "web"`, "exe", "write /usr/bin/curl"},
		{"comm long", func(p *Policy) { p.Rules[0].Comm = "a-very-long-command" }, `rule "web"`, "comm", `use comm = "a-very-long-com"`},
		{"user bad", func(p *Policy) { p.Rules[0].User = "bad user" }, `rule "web"`, "user", "not a user name or numeric uid"},
		{"user -1", func(p *Policy) { p.Rules[0].User = "4294967295" }, `rule "web"`, "user", "numeric uid"},
		{"cgroup relative", func(p *Policy) { p.Rules[0].Cgroup = "system.slice" }, `rule "web"`, "cgroup", "must start with /"},
		{"cgroup unclean", func(p *Policy) { p.Rules[0].Cgroup = "/system.slice/" }, `rule "web"`, "cgroup", "write /system.slice"},
		{"unit", func(p *Policy) { p.Rules[0].Unit = "nginx" }, `rule "web"`, "unit", "did you mean nginx.service?"},
		{"unit bad suffix", func(p *Policy) { p.Rules[0].Unit = "nginx.conf" }, `rule "web"`, "unit", "not a systemd unit name"},
		{"action", func(p *Policy) { p.Rules[0].Action = "reject" }, `rule "web"`, "action", "use pass, drop or observe"},
		{"drop with props", func(p *Policy) {
			p.Rules[0].Action, p.Rules[0].MaxBW, p.Rules[0].DSCP = ActionDrop, 1e6, 46
		}, `rule "web"`, "action", "class, dscp, maxbw would be ignored with action drop"},
		{"observe with minbw", func(p *Policy) {
			p.Rules[0].Class, p.Rules[0].Action, p.Rules[0].MinBW = "", ActionObserve, 1e6
		}, `rule "web"`, "action", "minbw would be ignored with action observe"},
		{"police with drop", func(p *Policy) {
			p.Rules[0].Class, p.Rules[0].Action, p.Rules[0].Police = "", ActionDrop, 1e6
		}, `rule "web"`, "action", "police would be ignored with action drop"},
		{"police too low", func(p *Policy) { p.Rules[0].Police = 999 }, `rule "web"`, "police", `police = "999bit": below 1kbit`},
		{"burst without police", func(p *Policy) { p.Rules[0].Burst = 64 << 10 }, `rule "web"`, "burst", "set without police; add police = RATE"},
		{"burst too small", func(p *Policy) { p.Rules[0].Police, p.Rules[0].Burst = 1e6, 1000 }, `rule "web"`, "burst",
			`burst = "1kB": smaller than one full-size Ethernet frame (1514B)`},
		{"burst too large", func(p *Policy) { p.Rules[0].Police, p.Rules[0].Burst = 1e6, 2<<30 }, `rule "web"`, "burst", "larger than 1GiB"},
		{"no selector", func(p *Policy) { p.Rules[0].Exe = "" }, `rule "web"`, "", "a rule needs at least one selector"},
		{"precedence", func(p *Policy) { p.Rules[0].Precedence = 70000 }, `rule "web"`, "precedence", "precedence = 70000: out of range"},
		{"negative precedence", func(p *Policy) { p.Rules[0].Precedence = -1 }, `rule "web"`, "precedence", "out of range"},
		{"rule dscp", func(p *Policy) { p.Rules[0].DSCP = 64 }, `rule "web"`, "dscp", "out of range"},
		{"rule dscp_in", func(p *Policy) { p.Rules[0].DSCPIn = 99 }, `rule "web"`, "dscp_in", "out of range"},
		// Bounds: the value is echoed clipped, with its length.
		{"exe too long", func(p *Policy) { p.Rules[0].Exe = "/" + strings.Repeat("a", 5000) }, `rule "web"`, "exe",
			`field exe = "/` + strings.Repeat("a", 63) + `… (5001 bytes)": too long: 5001 bytes, at most 4095`},
		{"cgroup too long", func(p *Policy) { p.Rules[0].Cgroup = "/" + strings.Repeat("c", 4095) }, `rule "web"`, "cgroup", "too long: 4096 bytes, at most 4095"},
		{"unit too long", func(p *Policy) { p.Rules[0].Unit = strings.Repeat("u", 300) + ".service" }, `rule "web"`, "unit", "at most 255"},
		{"user too long", func(p *Policy) { p.Rules[0].User = strings.Repeat("u", 33) }, `rule "web"`, "user", "at most 32"},
		{"class ref too long", func(p *Policy) { p.Rules[0].Class = strings.Repeat("c", 100) }, `rule "web"`, "class", "… (100 bytes)"},
		{"exe long name", func(p *Policy) { p.Rules[0].Exe = "/usr/" + strings.Repeat("n", 300) }, `rule "web"`, "exe", "has a name of 300 bytes"},
		{"cgroup long name", func(p *Policy) { p.Rules[0].Cgroup = "/" + strings.Repeat("n", 256) }, `rule "web"`, "cgroup", "has a name of 256 bytes"},
		{"exe NUL", func(p *Policy) { p.Rules[0].Exe = "/usr/bin/a\x00b" }, `rule "web"`, "exe", "NUL byte"},
		{"huge name clipped", func(p *Policy) { p.Rules[0].Name = strings.Repeat("n", 100000) }, "", "name", "(100000 bytes)\": too long: 100000 bytes, at most 63"},
		{"class priority missing", func(p *Policy) { p.Classes[0].Priority = NoPriority }, `class "voice"`, "priority", "field priority: missing; use 0 (highest) .. 7 (lowest)"},
		{"class dscp missing", func(p *Policy) { p.Classes[0].DSCP = NoDSCP }, `class "voice"`, "dscp", "field dscp: missing"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := basePolicy()
			tc.mod(p)
			err := p.Validate("/etc/hostqos/hostqos.toml")
			if err == nil {
				t.Fatal("no error")
			}
			es := AsErrors(err)
			var hit *FieldError
			for _, e := range es {
				if e.Field == tc.field && (tc.object == "" || e.Object == tc.object) {
					hit = e
				}
			}
			if hit == nil {
				t.Fatalf("no error for object %q field %q in:\n%v", tc.object, tc.field, err)
			}
			msg := hit.Error()
			if !strings.Contains(msg, tc.want) {
				t.Errorf("error %q does not contain %q", msg, tc.want)
			}
			if !strings.HasPrefix(msg, "/etc/hostqos/hostqos.toml: ") {
				t.Errorf("error %q does not name the source", msg)
			}
			if tc.field != "" && !strings.Contains(msg, "field "+tc.field) {
				t.Errorf("error %q does not name field %s", msg, tc.field)
			}
		})
	}
}

func TestValidateReportsAll(t *testing.T) {
	p := basePolicy()
	p.Rules[0].Proto = "sctp"
	p.Rules[0].Class = "gold"
	p.Links[0].Reservable = 2
	es := AsErrors(p.Validate("api"))
	if len(es) != 3 {
		t.Fatalf("got %d errors, want 3:\n%v", len(es), es)
	}
	if n := strings.Count(es.Error(), "\n"); n != 2 {
		t.Errorf("Errors.Error() has %d newlines, want 2", n)
	}
	var fe *FieldError
	if !errors.As(error(es), &fe) {
		t.Error("errors.As(*FieldError) failed")
	}
}

func TestFieldErrorFormat(t *testing.T) {
	e := &FieldError{Source: "/etc/hostqos/hostqos.toml", Object: `rule "web"`, Field: "remote", Value: "10.0.0.300/8",
		Reason: "not a valid CIDR prefix (want e.g. 198.18.0.0/15 or 2001:db8::/32)"}
	want := `/etc/hostqos/hostqos.toml: rule "web": field remote = "10.0.0.300/8": not a valid CIDR prefix (want e.g. 198.18.0.0/15 or 2001:db8::/32)`
	if e.Error() != want {
		t.Errorf("got  %s\nwant %s", e.Error(), want)
	}
	e.Line = 12
	if !strings.HasPrefix(e.Error(), "/etc/hostqos/hostqos.toml:12: rule") {
		t.Errorf("with line: %s", e.Error())
	}
	e2 := &FieldError{Object: `class "voice"`, Field: "priority", Value: "9", Literal: true, Reason: "out of range", Fix: "use 0..7"}
	if got := e2.Error(); got != `class "voice": field priority = 9: out of range; use 0..7` {
		t.Errorf("got %s", got)
	}
}

func TestResolveUser(t *testing.T) {
	if uid, err := ResolveUser("1234"); err != nil || uid != 1234 {
		t.Errorf("ResolveUser(1234) = %d, %v", uid, err)
	}
	if u, err := user.Current(); err == nil {
		uid, err := ResolveUser(u.Username)
		if err != nil || u.Uid != strconv.FormatUint(uint64(uid), 10) {
			t.Errorf("ResolveUser(%q) = %d, %v; want %s", u.Username, uid, err, u.Uid)
		}
	}
	if _, err := ResolveUser("no-such-user-hostqos-x"); err == nil || !strings.Contains(err.Error(), "no-such-user-hostqos-x") {
		t.Errorf("ResolveUser(unknown) error = %v", err)
	}
}

// TestRuleCapacity: MaxRules rules, MaxAppRules of them by app, pass; one
// more of either is refused with a message naming the count and the limit.
func TestRuleCapacity(t *testing.T) {
	mk := func(n, apps int) *Policy {
		p := &Policy{Classes: DefaultClasses()}
		for i := 0; i < n; i++ {
			r := Rule{Name: fmt.Sprintf("r%d", i), Class: "bulk", Proto: "udp", RPort: PortRange{From: uint16(1 + i%60000), To: uint16(1 + i%60000)}}
			if i < apps {
				r = Rule{Name: r.Name, Class: "bulk", Comm: fmt.Sprintf("c%d", i)}
			}
			p.Rules = append(p.Rules, r)
		}
		return p
	}
	if err := mk(MaxRules, MaxAppRules).Validate("t"); err != nil {
		t.Fatalf("policy at the limits refused: %.500v", err)
	}
	for _, c := range []struct {
		p    *Policy
		want string
	}{
		{mk(MaxRules+1, 0), fmt.Sprintf("t: policy: field rule = %d rules: more rules than hostqos holds (%d)", MaxRules+1, MaxRules)},
		{mk(MaxAppRules+1, MaxAppRules+1), fmt.Sprintf("t: policy: field rule = %d rules with app selectors: more rules with an exe, comm, user, cgroup or unit selector than hostqos holds (%d)", MaxAppRules+1, MaxAppRules)},
	} {
		err := c.p.Validate("t")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("error %.300v, want one containing %q", err, c.want)
		}
	}
}
