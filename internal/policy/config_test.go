package policy

import (
	"errors"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
)

const goodConfig = `# test config
[[link]]
name = "veth0"
egress_rate = "20mbit"
reservable = 0.9

[[link]]
name = "eth1"

[[class]]
name = "voice"
minbw = "2mbit"

[[class]]
name = "backup"
dscp = "AF12"
priority = 5
maxbw = "5mbit"
user_allowed = true

[[rule]]
name = "zoom"
exe = "/opt/zoom/zoom"
class = "voice"

[[rule]]
name = "web"
proto = "tcp"
remote = "198.18.0.0/15"
rport = "80"
lport = "1000-2000"
dscp_in = 0
dscp = "AF21"
maxbw = "4mbit"
minbw = "1mbit"
precedence = 10

[[rule]]
name = "nightly"
unit = "backup.service"
user = 1000
class = "backup"
maxbw = "2.5mbit"

[[rule]]
name = "block"
remote = "2001:db8::/32"
action = "drop"

[[rule]]
name = "flood"
proto = "udp"
rport = "9000"
police = "5mbit"
burst = "32KiB"

[[rule]]
name = "flood-default-burst"
proto = "udp"
rport = "9001"
police = "100mbit"
`

func TestLoadGood(t *testing.T) {
	p, err := Load([]byte(goodConfig), "/etc/hostqos/hostqos.toml")
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if !reflect.DeepEqual(p.Links, []Link{{Name: "veth0", EgressRate: 20_000_000, Reservable: 0.9}, {Name: "eth1"}}) {
		t.Errorf("links = %+v", p.Links)
	}
	if len(p.Classes) != 6 {
		t.Fatalf("classes = %+v", p.Classes)
	}
	// voice: built-in position, built-in DSCP/priority, file's minbw.
	if c := p.Classes[0]; c != (Class{Name: "voice", DSCP: 46, Priority: 0, MinBW: 2_000_000}) {
		t.Errorf("voice = %+v", c)
	}
	if c := p.Classes[5]; c != (Class{Name: "backup", DSCP: 12, Priority: 5, MaxBW: 5_000_000, UserAllowed: true}) {
		t.Errorf("backup = %+v", c)
	}
	web, _ := p.Rule("web")
	want := NewRule("web")
	want.Proto, want.Remote, want.RPort, want.LPort = "tcp", netip.MustParsePrefix("198.18.0.0/15"), PortRange{80, 80}, PortRange{1000, 2000}
	want.DSCPIn, want.DSCP, want.MaxBW, want.MinBW, want.Precedence = 0, 18, 4_000_000, 1_000_000, 10
	if !reflect.DeepEqual(web, want) {
		t.Errorf("web = %+v\nwant  %+v", web, want)
	}
	if n, _ := p.Rule("nightly"); n.User != "1000" || n.DSCP != NoDSCP || n.DSCPIn != NoDSCP {
		t.Errorf("nightly = %+v", n)
	}
	if f, _ := p.Rule("flood"); f.Police != 5_000_000 || f.Burst != 32<<10 || f.PoliceBurst() != 32<<10 {
		t.Errorf("flood = %+v", f)
	}
	// Default burst: 10 ms at the rate (125000 bytes at 100mbit), at least 64KiB.
	if f, _ := p.Rule("flood-default-burst"); f.Burst != 0 || f.PoliceBurst() != 125_000 {
		t.Errorf("flood-default-burst = %+v, burst %v", f, f.PoliceBurst())
	}
	if DefaultBurst(1_000_000) != 64<<10 {
		t.Errorf("DefaultBurst(1mbit) = %v", DefaultBurst(1_000_000))
	}
}

func TestLoadDefaultsAndEmpty(t *testing.T) {
	p, err := Load(nil, "empty.toml")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(p, DefaultPolicy()) {
		t.Errorf("empty config = %+v", p)
	}
	p, err = Load([]byte("builtin_classes = false\n[[class]]\nname = \"gold\"\n"), "x.toml")
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Classes) != 2 || p.Classes[1].Name != "default" || p.Classes[0] != (Class{Name: "gold", DSCP: 0, Priority: 2}) {
		t.Errorf("classes = %+v", p.Classes)
	}
	// Overriding default keeps its user_allowed unless set.
	p, err = Load([]byte("[[class]]\nname = \"default\"\ndscp = \"AF11\"\n"), "x.toml")
	if err != nil {
		t.Fatal(err)
	}
	if c, _ := p.Class("default"); c != (Class{Name: "default", DSCP: 10, Priority: 2, UserAllowed: true}) {
		t.Errorf("default = %+v", c)
	}
}

func TestLoadErrors(t *testing.T) {
	const src = "/etc/hostqos/hostqos.toml"
	cases := []struct {
		name string
		conf string
		want []string // each must appear in the error text
	}{
		{"bad CIDR", "[[rule]]\nname = \"web\"\nremote = \"10.0.0.300/8\"\n",
			[]string{src + `:3: rule "web": field remote = "10.0.0.300/8": not a valid CIDR prefix (want e.g. 198.18.0.0/15 or 2001:db8::/32)`}},
		{"host bits", "[[rule]]\nname = \"web\"\nlocal = \"198.18.0.1/15\"\n",
			[]string{src + `:3: rule "web": field local = "198.18.0.1/15": 198.18.0.1/15 has host bits set; did you mean 198.18.0.0/15?`}},
		{"unknown class", "\n[[rule]]\nname = \"web\"\ncomm = \"curl\"\nclass = \"gold\"\n",
			[]string{src + `:5: rule "web": field class = "gold": no such class`}},
		{"over capacity", "[[link]]\nname = \"veth0\"\negress_rate = \"20mbit\"\n[[class]]\nname = \"voice\"\nminbw = \"2mbit\"\n[[rule]]\nname = \"upload\"\ncomm = \"rsync\"\nminbw = \"16mbit\"\n",
			[]string{src + `:1: link "veth0": guarantees 18mbit exceed reservable capacity 16mbit (0.8 × 20mbit): rule upload 16mbit, class voice 2mbit; lower a minbw or raise egress_rate/reservable`}},
		{"block maxbw_in 0", "[[block]]\nprefix = \"198.51.100.7/32\"\nmaxbw_in = \"0bit\"\n",
			[]string{src + `:3: block "198.51.100.7/32": field maxbw_in = "0bit": 0 is no limit (as for every rate), which would pass everything from the prefix; leave maxbw_in out to drop everything from the prefix, or quarantine at 8kbit or more, e.g. 1mbit`}},
		{"block maxbw_in integer 0", "[[block]]\nprefix = \"198.51.100.7/32\"\nmaxbw_in = 0\n",
			[]string{src + `:3: block "198.51.100.7/32": field maxbw_in = 0: 0 is no limit`}},
		{"spaces around a prefix", "[[block]]\nprefix = \"1.2.3.4/32 \"\n",
			[]string{src + `:2: block #1: field prefix = "1.2.3.4/32 ": has spaces around it; write "1.2.3.4/32"`}},
		{"malformed rate", "[[link]]\nname = \"veth0\"\negress_rate = \"20 megabits\"\n",
			[]string{src + `:3: link "veth0": field egress_rate = "20 megabits": unknown rate unit "megabits"`}},
		{"burst in bits", "[[rule]]\nname = \"r\"\ncomm = \"x\"\npolice = \"1mbit\"\nburst = \"64kbit\"\n",
			[]string{src + `:5: rule "r": field burst = "64kbit": unknown size unit "kbit": that is a rate unit, a size counts bytes`}},
		{"burst negative", "[[rule]]\nname = \"r\"\ncomm = \"x\"\npolice = \"1mbit\"\nburst = -1\n",
			[]string{src + `:5: rule "r": field burst = -1: out of range`}},
		{"rate without unit", "[[rule]]\nname = \"r\"\ncomm = \"x\"\nmaxbw = 20000000\n",
			[]string{src + `:4: rule "r": field maxbw = 20000000: a rate needs a unit; write maxbw = "20mbit" for 20000000 bits/s`}},
		{"string rate without unit", "[[rule]]\nname = \"r\"\ncomm = \"x\"\nmaxbw = \"300\"\n",
			[]string{src + `:4: rule "r": field maxbw = "300": 300 has no unit; add one, e.g. 300bit`}},
		{"unknown key", "[[rule]]\nname = \"r\"\ncomm = \"x\"\nmax_bw = \"1mbit\"\n",
			[]string{src + `:4: rule "r": unknown key "max_bw"; did you mean maxbw?`}},
		{"unknown top key", "# c\nlinks = 3\n", []string{src + `:2: unknown key "links"; did you mean link?`}},
		{"unknown key in class", "[[class]]\nname = \"voice\"\n\n  colour = \"red\"\n",
			[]string{src + `:4: class "voice": unknown key "colour"; known keys: name, dscp`}},
		{"type error", "[[class]]\nname = \"x\"\npriority = \"high\"\n",
			[]string{src + `:3: class "x": field priority = "high": want an integer, got string`}},
		{"bool type", "[[class]]\nname = \"x\"\nuser_allowed = \"yes\"\n",
			[]string{src + `:3: class "x": field user_allowed = "yes": want true or false, got string`}},
		{"table not array", "[rule]\nname = \"x\"\n",
			[]string{src + `:1: field rule: want an array of tables; write each entry as a [[rule]] section, with double brackets`}},
		{"syntax", "[[rule]]\nname = \"x\nexe = 3\n", []string{src + ":2: invalid TOML"}},
		{"bad dscp", "[[rule]]\nname = \"x\"\ncomm = \"x\"\ndscp = \"AF5\"\n", []string{src + `:4: rule "x": field dscp = "AF5": unknown DSCP "AF5"`}},
		{"bad port", "[[rule]]\nname = \"x\"\nproto = \"tcp\"\nlport = 70000\n", []string{src + `:4: rule "x": field lport = 70000: not a port number`}},
		{"port needs proto", "[[rule]]\nname = \"x\"\nlport = 80\n", []string{src + `:3: rule "x": field lport = "80": lport needs --proto tcp or udp`}},
		{"no selector", "[[rule]]\nname = \"x\"\nclass = \"bulk\"\n", []string{src + `:1: rule "x": a rule needs at least one selector`}},
		{"missing name", "[[rule]]\ncomm = \"x\"\n", []string{src + `:1: rule #1: field name: missing`}},
		{"all at once", "[[link]]\nname = \"veth0\"\negress_rate = \"fast\"\n[[rule]]\nname = \"a\"\nremote = \"1.2.3.4/33\"\n[[rule]]\nname = \"b\"\ncomm = \"b\"\nclass = \"nope\"\nfoo = 1\n",
			[]string{
				src + `:3: link "veth0": field egress_rate = "fast": not a rate`,
				src + `:6: rule "a": field remote = "1.2.3.4/33": not a valid CIDR prefix`,
				src + `:10: rule "b": field class = "nope": no such class`,
				src + `:11: rule "b": unknown key "foo"`,
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Load([]byte(tc.conf), src)
			if err == nil {
				t.Fatalf("no error; policy %+v", p)
			}
			if p != nil {
				t.Error("policy returned with an error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error:\n%v\nlacks:\n%s", err, w)
				}
			}
			if len(AsErrors(err)) != len(tc.want) {
				t.Errorf("got %d errors, want %d:\n%v", len(AsErrors(err)), len(tc.want), err)
			}
		})
	}
}

func TestLoadFile(t *testing.T) {
	dir := t.TempDir()
	_, err := LoadFile(filepath.Join(dir, "missing.toml"))
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: %v, want fs.ErrNotExist", err)
	}
	path := filepath.Join(dir, "hostqos.toml")
	if err := os.WriteFile(path, []byte(goodConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadFile(path); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("[[rule]]\nname = \"web\"\nremote = \"bad\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = LoadFile(path)
	if err == nil || !strings.HasPrefix(err.Error(), path+":3: rule \"web\": field remote = \"bad\"") {
		t.Errorf("got %v", err)
	}
}

func TestMarshalTOMLRoundTrip(t *testing.T) {
	p, err := Load([]byte(goodConfig), "a.toml")
	if err != nil {
		t.Fatal(err)
	}
	tmp := NewRule("tmp")
	tmp.Cgroup, tmp.Temporary = "/hostqos/run-1", true
	p.Rules = append(p.Rules, tmp)
	// A removed built-in must stay removed.
	p.Classes = slices.DeleteFunc(p.Classes, func(c Class) bool { return c.Name == "scavenger" })
	out, err := p.MarshalTOML()
	if err != nil {
		t.Fatal(err)
	}
	q, err := Load(out, "dump.toml")
	if err != nil {
		t.Fatalf("reload: %v\n%s", err, out)
	}
	p.Rules = p.Rules[:len(p.Rules)-1] // temporary rules are not written
	if !reflect.DeepEqual(p, q) {
		t.Errorf("round trip differs:\n%+v\n%+v\n%s", p, q, out)
	}
	again, _ := q.MarshalTOML()
	if string(again) != string(out) {
		t.Errorf("not canonical:\n%s\n---\n%s", out, again)
	}
	if !strings.Contains(string(out), "builtin_classes = false") || strings.Contains(string(out), "tmp") {
		t.Errorf("dump:\n%s", out)
	}
}

func TestLocateKeys(t *testing.T) {
	conf := "a = 1\n[[rule]]\nname = \"x\"\ns = \"\"\"\nname = 5\n\"\"\"\narr = [\n 1,\n]\n\"quoted key\" = 2\n[[rule]]\n  name = \"y\" # c\n[tbl]\nk = 1\n"
	loc := locateKeys([]byte(conf))
	want := map[keyLoc]int{
		{"", -1, "a"}: 1, {"rule", 0, ""}: 2, {"rule", 0, "name"}: 3, {"rule", 0, "s"}: 4, {"rule", 0, "arr"}: 7,
		{"rule", 0, "quoted key"}: 10, {"rule", 1, ""}: 11, {"rule", 1, "name"}: 12, {"tbl", -1, ""}: 13, {"tbl", -1, "k"}: 14,
	}
	if !reflect.DeepEqual(loc, want) {
		t.Errorf("locateKeys = %v\nwant %v", loc, want)
	}
}

func TestTOMLTextTypes(t *testing.T) {
	// The unit types also work with BurntSushi/toml directly, as strings.
	type S struct {
		R Rate      `toml:"r"`
		D DSCP      `toml:"d"`
		P PortRange `toml:"p"`
	}
	var buf strings.Builder
	if err := toml.NewEncoder(&buf).Encode(S{R: 1_500_000, D: 34, P: PortRange{1000, 2000}}); err != nil {
		t.Fatal(err)
	}
	want := "r = \"1.5mbit\"\nd = \"AF41\"\np = \"1000-2000\"\n"
	if buf.String() != want {
		t.Errorf("encode:\n%s\nwant\n%s", buf.String(), want)
	}
	var s S
	if _, err := toml.Decode(want, &s); err != nil || s != (S{1_500_000, 34, PortRange{1000, 2000}}) {
		t.Errorf("decode = %+v, %v", s, err)
	}
	if _, err := toml.Decode(`r = "10"`, &s); err == nil || !strings.Contains(err.Error(), "no unit") {
		t.Errorf("decode bare rate: %v", err)
	}
}

func TestLoadOddShapes(t *testing.T) {
	// Inline array of tables, odd strings, floats and ints where allowed.
	conf := `link = [{ name = "eth0", egress_rate = "1gbit", reservable = 1 }]
[[rule]]
name = "q"
exe = "/opt/we\"ird\\path/app"
comm = "tab\there"
`
	p, err := Load([]byte(conf), "odd.toml")
	if err != nil {
		t.Fatal(err)
	}
	if p.Links[0] != (Link{Name: "eth0", EgressRate: 1e9, Reservable: 1}) || p.Rules[0].Exe != `/opt/we"ird\path/app` || p.Rules[0].Comm != "tab\there" {
		t.Errorf("got %+v %+v", p.Links, p.Rules)
	}
	out, _ := p.MarshalTOML()
	q, err := Load(out, "dump.toml")
	if err != nil || !reflect.DeepEqual(p, q) {
		t.Errorf("round trip: %v\n%s", err, out)
	}
	for conf, want := range map[string]string{
		"link = 5\n":           `odd.toml:1: field link = 5: want an array of tables`,
		"[[link]]\nname = 3\n": `odd.toml:2: link #1: field name = 3: want a string, got integer; quote it: name = "3"`,
		"[[link]]\nname = \"e\"\nreservable = \"0.5\"\n":           `odd.toml:3: link "e": field reservable = "0.5": want a number, got string`,
		"[[rule]]\nname = \"r\"\nremote = 10\n":                    `odd.toml:3: rule "r": field remote = 10: want a CIDR prefix string, got integer`,
		"[[rule]]\nname = \"r\"\ndscp_in = 99\n":                   `odd.toml:3: rule "r": field dscp_in = 99: DSCP out of range`,
		"[[rule]]\nname = \"r\"\nlport = [1, 2]\n":                 `odd.toml:3: rule "r": field lport = […]: want a port (80) or a range`,
		"builtin_classes = \"no\"\n":                               `odd.toml:1: field builtin_classes = "no": want true or false`,
		"[[class]]\nname = \"c\"\nminbw = true\n":                  `odd.toml:3: class "c": field minbw = true: want a rate string such as "10mbit", got boolean`,
		"[[rule]]\nname = \"r\"\nuser = 1.5\n":                     `odd.toml:3: rule "r": field user = 1.5: want a user name or uid, got float`,
		"[[rule]]\nname = \"r\"\ncomm = \"c\"\nprecedence = 1e3\n": `odd.toml:4: rule "r": field precedence = 1000: want an integer, got float`,
	} {
		_, err := Load([]byte(conf), "odd.toml")
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Load(%q) error:\n%v\nwant:\n%s", conf, err, want)
		}
	}
}

// TestDocsExamples keeps docs/config.md honest: its complete example loads,
// and its precedence example evaluates in the order the text gives.
func TestDocsExamples(t *testing.T) {
	doc, err := os.ReadFile("../../docs/config.md")
	if err != nil {
		t.Fatalf("read docs: %v", err)
	}
	blocks := tomlBlocks(string(doc))
	var complete, worked string
	for _, b := range blocks {
		switch {
		case strings.Contains(b, "# /etc/hostqos/hostqos.toml"):
			complete = b
		case strings.Contains(b, `name = "a-tie"`):
			worked = b
		}
	}
	p, err := Load([]byte(complete), "docs complete example")
	if err != nil {
		t.Fatalf("complete example: %v\n%s", err, complete)
	}
	if len(p.Rules) != 9 || len(p.Links) != 1 {
		t.Errorf("complete example: %d rules, %d links", len(p.Rules), len(p.Links))
	}
	p, err = Load([]byte(worked), "docs worked example")
	if err != nil {
		t.Fatalf("worked example: %v", err)
	}
	var got []string
	for _, r := range p.OrderedRules() {
		got = append(got, r.Name)
	}
	want := []string{"block", "override", "zoom", "host", "a-tie", "b-tie", "dns", "lan", "all-udp"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("worked example order %v, want %v", got, want)
	}
	ws := strings.Join(p.Warnings(), "\n")
	if !strings.Contains(ws, `rule "lan" never matches: rule "block"`) || !strings.Contains(ws, `rule "all-udp" never matches: rule "override"`) {
		t.Errorf("worked example warnings:\n%s", ws)
	}
	// Every TOML snippet in the docs must at least parse and validate.
	for _, b := range blocks {
		if _, err := Load([]byte(b), "docs snippet"); err != nil {
			t.Errorf("docs snippet does not load: %v\n%s", err, b)
		}
	}
}

func tomlBlocks(doc string) []string {
	var out []string
	for {
		i := strings.Index(doc, "```toml\n")
		if i < 0 {
			return out
		}
		doc = doc[i+len("```toml\n"):]
		j := strings.Index(doc, "```")
		if j < 0 {
			return out
		}
		out = append(out, doc[:j])
		doc = doc[j:]
	}
}
