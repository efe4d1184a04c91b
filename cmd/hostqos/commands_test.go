package main

import (
	"bytes"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/policy"
)

// runFake runs the CLI against c with in-memory streams, as main does,
// and returns stdout, stderr and the exit code.
func runFake(c *fakeClient, args ...string) (string, string, exitCode) {
	var out, errOut bytes.Buffer
	f := newFactory(ioStreams{In: strings.NewReader(""), Out: &out, Err: &errOut})
	f.newClient = func() apiClient { return c }
	f.now = func() time.Time { return time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC) }
	f.uplink = func() string { return "" } // the hints name the fallback, eth0
	root := newRootCmd(f)
	root.SetArgs(args)
	code := exitWith(f.io, execute(f, root))
	return out.String(), errOut.String(), code
}

func testRules() []api.RuleInfo {
	voice := policy.Rule{Name: "zoom", Exe: "/opt/zoom/zoom", Proto: "udp", Class: "voice", DSCP: policy.NoDSCP, DSCPIn: policy.NoDSCP, Precedence: 10}
	backup := policy.Rule{Name: "backup", Comm: "restic", Remote: netip.MustParsePrefix("198.18.0.0/15"), DSCP: 10, DSCPIn: policy.NoDSCP,
		MaxBW: 20e6, MinBW: 1e6}
	run := policy.Rule{Name: "run-1", Cgroup: "/hostqos/run-1", DSCP: policy.NoDSCP, DSCPIn: policy.NoDSCP, UserRun: true, Action: policy.ActionDrop}
	return []api.RuleInfo{{Rule: voice, Source: "config"}, {Rule: backup, Source: "api"}, {Rule: run, Source: "run"}}
}

func TestCommandOutput(t *testing.T) {
	status := api.Status{
		Daemon: api.DaemonStatus{Version: "1.2.3", PID: 42, Started: time.Date(2026, 1, 2, 2, 4, 5, 0, time.UTC),
			Config: "/etc/hostqos/hostqos.toml", StateDir: "/var/lib/hostqos", BPFFSDir: "/sys/fs/bpf/hostqos", Generation: 7,
			CgroupMount: "/sys/fs/cgroup", BPFFSMount: "/sys/fs/bpf", BPFFSMountOwn: true},
		Datapath: api.DatapathStatus{Loaded: true, Packets: 1000, Classified: 900, ParseErrors: 1, FlowInsertFail: 2},
		Links:    []api.LinkStatus{{Link: policy.Link{Name: "eth0", EgressRate: 20e6}, Attached: true, Reserved: 2e6, Reservable: 16e6}},
		Counts:   api.Counts{Links: 1, Classes: 5, Rules: 3, Flows: 12, Runs: 1},
		Warnings: []string{"class bulk: no rule uses it"},
	}
	counter := api.Counter{Packets: 1500, Bytes: 3 << 20, Drops: 4, RateBps: 2.5e6, PktRate: 210}
	in := api.Counter{Packets: 3000, Bytes: 40 << 20, Drops: 7, RateBps: 50e6, PktRate: 4200}
	flows := make([]api.FlowStat, 3)
	for i := range flows {
		flows[i] = api.FlowStat{Proto: "tcp", Local: "198.18.0.1:40000", Remote: "198.18.1.2:443", Counter: counter, In: in}
	}
	flows[0].PID, flows[0].Comm, flows[0].Rule = 77, "curl", "https"
	fc := func() *fakeClient {
		return &fakeClient{
			status: status,
			rules:  testRules(),
			stats: map[string]api.Stats{
				api.StatRules:   {Rules: []api.RuleStat{{Rule: "zoom", Class: "voice", Counter: counter, In: in}, {Rule: "backup", Class: "default"}}},
				api.StatFlows:   {Flows: flows},
				api.StatClasses: {Classes: []api.ClassStat{{Class: "voice", Link: "eth0", Backlog: 2, Counter: counter, In: in}}},
				api.StatLinks:   {Links: []api.LinkStat{{Link: "eth0", Counter: counter, In: in}}},
			},
		}
	}
	for _, c := range []struct {
		name   string
		args   []string
		out    string
		errOut string
		code   exitCode
		calls  []string
		fail   error // every call of the fake fails with it
		outHas []string
	}{
		{
			name: "rule list",
			args: []string{"rule", "list"},
			out: `RULE    PREC  SELECTORS                         ACTION  CLASS    DSCP   LIMITS                 SOURCE
zoom    10    exe=/opt/zoom/zoom proto=udp      pass    voice    class  -                      config
backup  0     comm=restic remote=198.18.0.0/15  pass    default  AF11   min 1mbit, max 20mbit  api
run-1   user  cgroup=/hostqos/run-1             drop    default  class  -                      run (user, after admin rules)
`,
			calls: []string{"Rules.List"},
		},
		{
			name:   "rule show",
			args:   []string{"rule", "show", "nothing"},
			errOut: "hostqos: rule \"nothing\": not found\n",
			code:   exitNotFound,
			calls:  []string{"Rules.Get nothing"},
		},
		{
			name: "stat",
			args: []string{"stat"},
			out: `RULE    CLASS    OUT RATE    IN RATE      OUT BYTES  IN BYTES  OUT PKTS  IN PKTS  OUT DROPS  IN DROPS
zoom    voice    2.50mbit/s  50.00mbit/s  3.00MiB    40.00MiB  1500      3000     4          7
backup  default  0bit/s      0bit/s       0B         0B        0         0        0          0
`,
			calls: []string{"Stats.Get rules"},
		},
		{
			name: "stat classes",
			args: []string{"stat", "classes"},
			out: `LINK  CLASS  BACKLOG  OUT RATE    IN RATE      OUT BYTES  IN BYTES  OUT PKTS  IN PKTS  OUT DROPS  IN DROPS
eth0  voice  2        2.50mbit/s  50.00mbit/s  3.00MiB    40.00MiB  1500      3000     4          7
`,
			calls: []string{"Stats.Get classes"},
		},
		{
			name: "stat links",
			args: []string{"stat", "links"},
			out: `LINK  OUT RATE    IN RATE      OUT BYTES  IN BYTES  OUT PKTS  IN PKTS  OUT DROPS  IN DROPS
eth0  2.50mbit/s  50.00mbit/s  3.00MiB    40.00MiB  1500      3000     4          7
`,
			calls: []string{"Stats.Get links"},
		},
		{
			name: "stat flows --limit",
			args: []string{"stat", "flows", "--limit", "2"},
			out: `PROTO  LOCAL             REMOTE          APP       RULE   OUT RATE    IN RATE      OUT BYTES  IN BYTES  OUT PKTS  IN PKTS  OUT DROPS  IN DROPS
tcp    198.18.0.1:40000  198.18.1.2:443  curl[77]  https  2.50mbit/s  50.00mbit/s  3.00MiB    40.00MiB  1500      3000     4          7
tcp    198.18.0.1:40000  198.18.1.2:443  -         -      2.50mbit/s  50.00mbit/s  3.00MiB    40.00MiB  1500      3000     4          7
(1 more; --limit 0 shows all)
`,
			calls: []string{"Stats.Get flows"},
		},
		{
			name: "status",
			args: []string{"status"},
			out: `daemon:    hostqosd 1.2.3, pid 42, up 1h0m0s
config:    /etc/hostqos/hostqos.toml (state /var/lib/hostqos)
datapath:  loaded, pins /sys/fs/bpf/hostqos; 1000 packets seen, 900 classified, 1 parse errors, 2 flow-table insert failures
mounts:    cgroup2 /sys/fs/cgroup, bpffs /sys/fs/bpf (mounted by hostqosd)
policy:    1 links, 5 classes, 3 rules, 1 runs; 12 flows in the flow table (generation 7)

LINK  EGRESS RATE  INGRESS RATE  RESERVED         STATE
eth0  20mbit       -             2mbit of 16mbit  attached
warning: class bulk: no rule uses it
`,
			calls: []string{"Status"},
		},
		{
			name:   "status -o json",
			args:   []string{"status", "-o", "json"},
			outHas: []string{`"version": "1.2.3"`, `"generation": 7`},
			calls:  []string{"Status"},
		},
		{
			name:   "bad -o is refused when parsed",
			args:   []string{"rule", "list", "-o", "yaml"},
			errOut: "hostqos: flag --output = \"yaml\": want table or json\n",
			code:   exitUsage,
		},
		{
			name:   "daemon error with field errors",
			args:   []string{"rule", "add", "web", "--proto", "tcp", "--maxbw", "10mbit", "--temporary"},
			fail:   &api.Error{Status: 400, Body: api.ErrorBody{Error: "invalid rule", Fields: []*policy.FieldError{{Object: "rule \"web\"", Field: "class", Value: "gold", Reason: "no such class", Fix: "add it first"}}}},
			errOut: "hostqos: invalid rule\n  rule \"web\": field class = \"gold\": no such class; add it first\n",
			code:   exitInvalid,
			calls:  []string{`Rules.AddFields web maxbw="10mbit" proto="tcp" (temporary)`},
		},
		{
			name:   "daemon not running",
			args:   []string{"status"},
			fail:   fmt.Errorf("connect to /x.sock: %w", api.ErrDaemonDown),
			errOut: "hostqos: connect to /x.sock: hostqosd is not running\n",
			code:   exitNoDaemon,
			calls:  []string{"Status"},
		},
		{
			name:   "block add --maxbw-in 0 is refused, not taken as drop",
			args:   []string{"block", "add", "198.51.100.7/32", "--maxbw-in", "0bit"},
			errOut: "hostqos: flag --maxbw-in = \"0bit\": 0 is no limit (as for every rate), which would pass everything from the prefix; leave --maxbw-in out to drop everything from the prefix, or quarantine at 8kbit or more, e.g. 1mbit\n",
			code:   exitUsage,
		},
		{
			name:  "rule set clears a field",
			args:  []string{"rule", "set", "backup", "--maxbw", ""},
			out:   "changed rule backup\n",
			calls: []string{`Rules.Set backup maxbw=null`},
		},
		{
			name:  "class add fills the priority",
			args:  []string{"class", "add", "gold", "--dscp", "AF21"},
			out:   "added class gold\n",
			calls: []string{`Classes.AddFields gold dscp="AF21" priority=3`},
		},
		{
			name:  "link remove",
			args:  []string{"link", "remove", "eth0"},
			out:   "removed link eth0\n",
			calls: []string{"Links.Remove eth0"},
		},
		{
			// docs/ddos.md's example: only the SYN limits are sent, so
			// the link's rate (and what it enforces) stays.
			name:   "link set sends only the flags given",
			args:   []string{"link", "set", "eth0", "--syn-rate", "2000/s", "--syn-rate-per-source", "20/s"},
			outHas: []string{"LINK  EGRESS RATE"},
			calls:  []string{`Links.Set eth0 syn_rate=2000 syn_rate_per_source=20`},
		},
		{
			name:   "link set clears with 0 and forces",
			args:   []string{"link", "set", "eth0", "--egress-rate", "0", "--ingress-rate", "95mbit", "--reservable", "0.9", "--syn-rate", "0", "--force"},
			outHas: []string{"LINK  EGRESS RATE"},
			calls:  []string{`Links.Set eth0 egress_rate=null ingress_rate="95mbit" reservable=0.9 syn_rate=null (force)`},
		},
		{
			name:   "link set refuses a bad rate before sending",
			args:   []string{"link", "set", "eth0", "--egress-rate", "20tbit"},
			errOut: "hostqos: flag --egress-rate = \"20tbit\": above 10tbit, the most a rate may be; give the real rate, at most 10tbit\n",
			code:   exitUsage,
		},
		{
			name:   "reload --force",
			args:   []string{"reload", "--force"},
			outHas: []string{"reloaded"},
			calls:  []string{"Reload (force)"},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := fc()
			f.err = c.fail
			out, errOut, code := runFake(f, c.args...)
			if c.outHas == nil && out != c.out {
				t.Errorf("stdout:\n%s\nwant:\n%s", out, c.out)
			}
			for _, h := range c.outHas {
				if !strings.Contains(out, h) {
					t.Errorf("stdout does not have %q:\n%s", h, out)
				}
			}
			if errOut != c.errOut {
				t.Errorf("stderr: %q, want %q", errOut, c.errOut)
			}
			if code != c.code {
				t.Errorf("exit code %d, want %d", code, c.code)
			}
			if strings.Join(f.calls, "\n") != strings.Join(c.calls, "\n") {
				t.Errorf("calls:\n%s\nwant:\n%s", strings.Join(f.calls, "\n"), strings.Join(c.calls, "\n"))
			}
		})
	}
}

// TestConfigCheckRefusesOverflowingMinBW: `hostqos config check` of two
// classes at minbw 2⁶³−1 bit/s and one at 10mbit (whose sum wrapped to
// 9.999998 Mbit/s and passed) fails naming each field, its value and the
// bound.
func TestConfigCheckRefusesOverflowingMinBW(t *testing.T) {
	file := filepath.Join(t.TempDir(), "hostqos.toml")
	cfg := `
[[link]]
name = "eth0"
egress_rate = "100mbit"
[[class]]
name = "a"
minbw = "9223372036854775807bit"
[[class]]
name = "b"
minbw = "9223372036854775807bit"
[[class]]
name = "c"
minbw = "10mbit"
`
	if err := os.WriteFile(file, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := runFake(&fakeClient{}, "config", "check", file)
	for _, want := range []string{
		file + `:7: class "a": field minbw = "9223372036854775807bit": above 10tbit, the most a rate may be; give the real rate, at most 10tbit`,
		file + `:10: class "b": field minbw = "9223372036854775807bit": above 10tbit`,
	} {
		if !strings.Contains(errOut, want) {
			t.Errorf("config check: stderr %q does not say %q", errOut, want)
		}
	}
	if code == exitOK || strings.Contains(out, "ok") {
		t.Errorf("config check: exit %d, stdout %q; want a failure", code, out)
	}
}
