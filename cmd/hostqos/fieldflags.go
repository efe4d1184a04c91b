package main

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/policy"
)

// Flags that set an object's fields (rule, class, reservation, link): each
// command that changes an object has one table of them, a row per flag
// ({flag, JSON field, help, value}). A value is parsed and checked when the
// command line is parsed, so a bad one is refused before anything is sent,
// naming the flag and the value; a flag that is not given leaves its field
// as it is, and one given as "" (where its value says so, also as 0)
// clears it.

// fieldFlag is one row of an object's flag table: --flag sets the JSON
// field json.
type fieldFlag struct {
	flag, json, help string
	value            fieldValue
}

// fieldValue is the value of a fieldFlag.
type fieldValue interface {
	pflag.Value
	// field is what to send once the flag was given: the parsed value, or
	// nil to clear the field.
	field() any
	// choices are the values to complete (nil: none).
	choices() []string
}

// fieldFlags is an object's flag table.
type fieldFlags []fieldFlag

// register adds the table's flags to cmd, each with its completions.
func (t fieldFlags) register(cmd *cobra.Command) {
	for _, f := range t {
		cmd.Flags().Var(f.value, f.flag, f.help)
		if c := f.value.choices(); c != nil {
			_ = cmd.RegisterFlagCompletionFunc(f.flag, cobra.FixedCompletions(c, cobra.ShellCompDirectiveNoFileComp))
		}
	}
}

// fields returns the fields of the flags given on cmd's command line.
func (t fieldFlags) fields(cmd *cobra.Command) api.Fields {
	out := api.Fields{}
	for _, f := range t {
		if cmd.Flags().Changed(f.flag) {
			out[f.json] = f.value.field()
		}
	}
	return out
}

// changeFlags are the flags of a command that adds or changes an object:
// its flag table and --temporary.
type changeFlags struct {
	table fieldFlags
	temp  bool
}

// register adds table and --temporary to cmd; what names what --temporary
// keeps from being persisted.
func (c *changeFlags) register(cmd *cobra.Command, table fieldFlags, what string) {
	c.table = table
	table.register(cmd)
	cmd.Flags().BoolVar(&c.temp, "temporary", false, "do not persist: forget the "+what+" when the daemon stops (a crash keeps it)")
}

// fields returns the fields of the flags given on cmd's command line.
func (c *changeFlags) fields(cmd *cobra.Command) api.Fields { return c.table.fields(cmd) }

// How a value given to a flag clears its field.
const (
	clearEmpty = 1 << iota // "" clears
	clearZero              // a value that parses as zero clears ("0": none)
)

// parsed is a flag value read by parse; its field is the parsed value.
type parsed[T comparable] struct {
	typ    string // names the value in usage messages
	parse  func(string) (T, error)
	clears int // clearEmpty, clearZero
	values []string

	raw string
	v   *T // nil: clear the field
}

func (p *parsed[T]) String() string { return p.raw }

// Type names the value in usage messages.
func (p *parsed[T]) Type() string { return p.typ }

// Set parses and checks v.
func (p *parsed[T]) Set(v string) error {
	p.raw = v
	if v == "" && p.clears&clearEmpty != 0 {
		p.v = nil
		return nil
	}
	x, err := p.parse(v)
	if err != nil {
		return err
	}
	var zero T
	if x == zero && p.clears&clearZero != 0 {
		p.v = nil
		return nil
	}
	p.v = &x
	return nil
}

func (p *parsed[T]) field() any {
	if p.v == nil {
		return nil
	}
	return *p.v
}

func (p *parsed[T]) choices() []string { return p.values }

// zeroClears makes 0 clear the field too (a rate or limit of "none").
func (p *parsed[T]) zeroClears() *parsed[T] { p.clears |= clearZero; return p }

// noClear makes "" a value like any other, parsed.
func (p *parsed[T]) noClear() *parsed[T] { p.clears = 0; return p }

func value[T comparable](typ string, parse func(string) (T, error)) *parsed[T] {
	return &parsed[T]{typ: typ, parse: parse, clears: clearEmpty}
}

// The values of the flag tables.

func rateValue() *parsed[policy.Rate] { return value("rate", policy.ParseRate) }
func linkRateValue() *parsed[policy.LinkRate] {
	p := value("rate|auto", policy.ParseLinkRate)
	p.values = []string{"auto"}
	return p
}
func sizeValue() *parsed[policy.Size]       { return value("size", policy.ParseSize) }
func dscpValue() *parsed[policy.DSCP]       { return value("dscp", policy.ParseDSCP) }
func portsValue() *parsed[policy.PortRange] { return value("N[-M]", policy.ParsePortRange) }

func prefixValue() *parsed[netip.Prefix] { return value("cidr", policy.ParsePrefix) }

// textValue is any string.
func textValue(typ string) *parsed[string] {
	return value(typ, func(v string) (string, error) { return v, nil })
}

// checkedValue is a string that ok accepts; want says what is wanted.
func checkedValue(typ string, ok func(string) bool, want string) *parsed[string] {
	return value(typ, func(v string) (string, error) {
		if !ok(v) {
			return "", errors.New(want)
		}
		return v, nil
	})
}

// enumValue is one of choices, which it completes.
func enumValue(choices ...string) *parsed[string] {
	p := checkedValue(strings.Join(choices, "|"), func(v string) bool { return slices.Contains(choices, v) },
		"want "+strings.Join(choices, ", "))
	p.values = choices
	return p
}

// boolValue is true or false (as strconv.ParseBool reads them).
func boolValue() *parsed[bool] {
	p := value("true|false", func(v string) (bool, error) {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return false, errors.New("want true or false")
		}
		return b, nil
	})
	p.values = []string{"true", "false"}
	return p
}

// intValue is a whole number from lo to hi; want says what is wanted.
func intValue(lo, hi int, want string) *parsed[int] {
	return value("N", func(v string) (int, error) {
		n, err := strconv.Atoi(v)
		if err != nil || n < lo || n > hi {
			return 0, errors.New(want)
		}
		return n, nil
	})
}

// absPath is an absolute path (or glob), e.g. of an executable or a cgroup.
func absPath(want string) *parsed[string] {
	return checkedValue("path", func(v string) bool { return strings.HasPrefix(v, "/") }, want)
}

// checkedBy is a string that parse accepts, sent as it was given.
func checkedBy[T any](typ string, parse func(string) (T, error)) *parsed[string] {
	return value(typ, func(v string) (string, error) {
		_, err := parse(v)
		return v, err
	})
}

// durationValue is the value of every duration flag of the CLI: Go's and
// systemd's forms alike (policy.ParseDuration: "1s", "500ms", "2h 30min",
// "7d", a plain number of seconds), checked against its bounds when the
// command line is parsed.
type durationValue struct {
	p        *time.Duration
	min, max time.Duration // max 0: no bound
	zero     bool          // 0 is taken below min ("0: once", "0: never")
	want     string        // what is wanted, when out of bounds
}

func (d *durationValue) String() string { return policy.FormatSpan(*d.p) }

// Type names the value in usage messages (and tells refuseExplicitZero a
// duration).
func (d *durationValue) Type() string { return "duration" }

// Set parses v and checks its bounds.
func (d *durationValue) Set(v string) error {
	x, err := policy.ParseDuration(v)
	if err != nil {
		return err
	}
	if !(x == 0 && d.zero) && (x < d.min || d.max > 0 && x > d.max) {
		return errors.New(d.want)
	}
	*d.p = x
	return nil
}

// durationFlag adds a duration flag (short may be "") of default def to
// fs; the value's bounds are set on what it returns.
func durationFlag(fs *pflag.FlagSet, p *time.Duration, name, short string, def time.Duration, help string) *durationValue {
	*p = def
	d := &durationValue{p: p}
	fs.VarP(d, name, short, help)
	return d
}

// within bounds the duration to [min, max] (max 0: no bound); want says
// what is wanted.
func (d *durationValue) within(min, max time.Duration, want string) *durationValue {
	d.min, d.max, d.want = min, max, want
	return d
}

// orZero takes 0 too, below the bounds.
func (d *durationValue) orZero() *durationValue { d.zero = true; return d }

// selectorFlags are the selectors of a rule (app and flow selectors) and
// of a reservation's session; app and flow say which they are in help.
func selectorFlags(app, flow string) fieldFlags {
	return fieldFlags{
		{"exe", "exe", app + " selector: executable path or glob (e.g. /usr/bin/restic, /opt/zoom/*)",
			absPath("want an absolute path or glob, e.g. /usr/bin/curl")},
		{"comm", "comm", fmt.Sprintf("%s selector: process command name (as in ps -o comm, at most %d bytes)", app, policy.MaxCommLen),
			checkedValue("name", func(v string) bool { return len(v) <= policy.MaxCommLen },
				fmt.Sprintf("command names have at most %d bytes (the kernel truncates them)", policy.MaxCommLen))},
		{"cgroup", "cgroup", app + " selector: cgroup v2 path, e.g. /system.slice/nginx.service (and below)",
			absPath("want a path below the cgroup2 root starting with /, e.g. /system.slice/nginx.service")},
		{"unit", "unit", app + " selector: systemd unit, e.g. nginx.service", textValue("unit")},
		{"user", "user", app + " selector: user name or uid owning the process", textValue("user")},
		{"container", "container", app + " selector: a container's name or glob (web, web-*) or the start of its id (12+ hex digits); see hostqos container list", textValue("name")},
		{"image", "image", app + " selector: the container's image, e.g. nginx, nginx:1.27, docker.io/library/nginx:* (* does not cross /)", textValue("image")},
		{"container-label", "container_label", app + " selector: a label of the container, KEY=VALUE, e.g. tier=db", textValue("KEY=VALUE")},
		{"proto", "proto", flow + " selector: tcp, udp or icmp", enumValue("tcp", "udp", "icmp")},
		{"local", "local", flow + " selector: local address or CIDR (IPv4 or IPv6)", prefixValue()},
		{"remote", "remote", flow + " selector: remote address or CIDR (IPv4 or IPv6)", prefixValue()},
		{"lport", "lport", flow + " selector: local port or range N-M (needs --proto tcp|udp)", portsValue()},
		{"rport", "rport", flow + " selector: remote port or range N-M (needs --proto tcp|udp)", portsValue()},
	}
}

// sessionFlags are the per-session admission flags of rules and
// reservations.
func sessionFlags() fieldFlags {
	return fieldFlags{
		{"max-sessions", "max_sessions", "per-session admission: at most N sessions (sockets) at once; the next connect() fails with EPERM (0: any)",
			intValue(0, policy.MaxSessions, fmt.Sprintf("want 0 … %d (0: any)", policy.MaxSessions))},
		{"per-session-maxbw", "per_session_maxbw", "per-session admission: each session's ceiling, e.g. 200kbit (needs --max-sessions)", rateValue()},
		{"per-session-minbw", "per_session_minbw", "per-session admission: each session's guarantee, e.g. 100kbit; N × it is admission-controlled (needs --max-sessions)", rateValue()},
	}
}
