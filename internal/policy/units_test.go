package policy

import (
	"encoding/json"
	"net/netip"
	"strings"
	"testing"
)

func TestParseRate(t *testing.T) {
	good := []struct {
		in   string
		want Rate
		str  string
	}{
		{"10mbit", 10_000_000, "10mbit"},
		{"10Mbit", 10_000_000, "10mbit"},
		{"10MBIT", 10_000_000, "10mbit"},
		{"128kbit", 128_000, "128kbit"},
		{"1gbit", 1_000_000_000, "1gbit"},
		{"500bit", 500, "500bit"},
		{"1.5mbit", 1_500_000, "1.5mbit"},
		{".5mbit", 500_000, "500kbit"},
		{"1.234567mbit", 1_234_567, "1.234567mbit"},
		{"1MB/s", 8_000_000, "8mbit"},
		{"1kB/s", 8_000, "8kbit"},
		{"1KB/s", 8_000, "8kbit"},
		{"125B/s", 1000, "1kbit"},
		{"2.5MB/s", 20_000_000, "20mbit"},
		{"20Mbit/s", 20_000_000, "20mbit"},
		{"1 Gbit/s", 1_000_000_000, "1gbit"},
		{"2tbit", 2_000_000_000_000, "2tbit"},
		{"20 mbit", 20_000_000, "20mbit"},
		{"20mbit/s", 20_000_000, "20mbit"},
		{"0", 0, "0"},
		{"0bit", 0, "0"},
		{"0.0015kbit", 2, "2bit"}, // 1.5 bit rounds to 2
		{"1.0000004kbit", 1000, "1kbit"},
	}
	for _, tc := range good {
		got, err := ParseRate(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseRate(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
			continue
		}
		if s := got.String(); s != tc.str {
			t.Errorf("Rate(%d).String() = %q, want %q", got, s, tc.str)
		}
	}
	bad := []struct{ in, wantMsg string }{
		{"10", "has no unit"},
		{"10000000", "10000000bit"},
		{"", "empty"},
		{"10M", "ambiguous"},
		{"10mb", "ambiguous"},
		// The spellings with two readings name both and what to write.
		{"19mbps", "19mbps is ambiguous: most tools read it as megabits per second, tc(8) as megabytes per second; write 19mbit for megabits per second or 19MB/s for megabytes per second (19MB/s = 152mbit)"},
		{"19Mbps", "write 19mbit for megabits per second or 19MB/s for megabytes per second"},
		{"64kbps", "write 64kbit for kilobits per second or 64kB/s for kilobytes per second (64kB/s = 512kbit)"},
		{"1gbps", "write 1gbit for gigabits per second or 1GB/s for gigabytes per second (1GB/s = 8gbit)"},
		{"125bps", "write 125bit for bits per second or 125B/s for bytes per second"},
		{"10Mb/s", "it may mean megabits or megabytes per second; write 10mbit"},
		{"10mb/s", "ambiguous"},
		{"10MB", "is a size, not a rate; write 10MB/s for megabytes per second or 10mbit"},
		{"10MiB/s", "rates count in powers of 1000"},
		{"2mbits", `unknown rate unit "mbits"; write 2mbit`},
		{"10furlong", "unknown rate unit"},
		{"-5mbit", "negative"},
		{"mbit", "not a rate"},
		{"1.2.3mbit", "not a number"},
		{"99999999999999999999gbit", "above 10tbit"},
		{"18446744073709551615kbit", "above 10tbit"},
		{"10.000000000001tbit", "above 10tbit, the most a rate may be; give the real rate, at most 10tbit"},
		{"9223372036854775807bit", "above 10tbit"},
		{"2TB/s", "above 10tbit"},
	}
	if r, err := ParseRate("10tbit"); err != nil || r != MaxRate {
		t.Errorf("ParseRate(10tbit) = %d, %v; want MaxRate", r, err)
	}
	for _, tc := range bad {
		_, err := ParseRate(tc.in)
		if err == nil || !strings.Contains(err.Error(), tc.wantMsg) {
			t.Errorf("ParseRate(%q) error = %v; want one containing %q", tc.in, err, tc.wantMsg)
		}
	}
}

// TestRateJSONBound: a rate given as a JSON number is held to MaxRate as
// the parser holds a string (the qsocket attack sent 2⁶⁴ − 3999999).
func TestRateJSONBound(t *testing.T) {
	var v struct{ R Rate }
	for _, in := range []string{`{"R":18446744073705551617}`, `{"R":10000000000001}`, `{"R":"18446744073705551617bit"}`} {
		if err := json.Unmarshal([]byte(in), &v); err == nil || !strings.Contains(err.Error(), "above 10tbit") {
			t.Errorf("%s: %v, want refused above 10tbit", in, err)
		}
	}
	if err := json.Unmarshal([]byte(`{"R":10000000000000}`), &v); err != nil || v.R != MaxRate {
		t.Errorf("10 Tbit/s as a number: %d, %v", v.R, err)
	}
}

func TestRateJSON(t *testing.T) {
	var v struct{ R Rate }
	for in, want := range map[string]Rate{`{"R":"10mbit"}`: 10_000_000, `{"R":1500000}`: 1_500_000, `{"R":"0"}`: 0} {
		v.R = 7
		if err := json.Unmarshal([]byte(in), &v); err != nil || v.R != want {
			t.Errorf("unmarshal %s = %d, %v; want %d", in, v.R, err, want)
		}
	}
	for _, in := range []string{`{"R":"10"}`, `{"R":-1}`, `{"R":1.5}`, `{"R":true}`} {
		if err := json.Unmarshal([]byte(in), &v); err == nil {
			t.Errorf("unmarshal %s: no error", in)
		}
	}
	b, _ := json.Marshal(struct{ R Rate }{1_500_000})
	if string(b) != `{"R":"1.5mbit"}` {
		t.Errorf("marshal = %s", b)
	}
}

func TestParseDSCP(t *testing.T) {
	good := []struct {
		in   string
		want DSCP
		str  string
	}{
		{"EF", 46, "EF"}, {"ef", 46, "EF"}, {"VA", 44, "VA"}, {"LE", 1, "LE"},
		{"AF11", 10, "AF11"}, {"af12", 12, "AF12"}, {"AF13", 14, "AF13"},
		{"AF21", 18, "AF21"}, {"AF33", 30, "AF33"}, {"AF41", 34, "AF41"}, {"AF43", 38, "AF43"},
		{"CS0", 0, "CS0"}, {"cs1", 8, "CS1"}, {"CS5", 40, "CS5"}, {"CS7", 56, "CS7"},
		{"DF", 0, "CS0"}, {"be", 0, "CS0"}, {"default", 0, "CS0"},
		{"0", 0, "CS0"}, {"46", 46, "EF"}, {"63", 63, "63"}, {"5", 5, "5"},
		{"", NoDSCP, "unset"},
	}
	for _, tc := range good {
		got, err := ParseDSCP(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseDSCP(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
			continue
		}
		if got.String() != tc.str {
			t.Errorf("DSCP(%d).String() = %q, want %q", got, got.String(), tc.str)
		}
	}
	for _, in := range []string{"64", "-1", "AF14", "AF51", "CS8", "voice", "4 6"} {
		if _, err := ParseDSCP(in); err == nil || !strings.Contains(err.Error(), strings.TrimSpace(in)) {
			t.Errorf("ParseDSCP(%q) error = %v; want one naming the value", in, err)
		}
	}
}

func TestDSCPJSON(t *testing.T) {
	type S struct {
		D DSCP `json:"d,omitzero"`
	}
	for _, tc := range []struct {
		v    DSCP
		want string
	}{{46, `{"d":"EF"}`}, {0, `{"d":"CS0"}`}, {NoDSCP, `{}`}, {7, `{"d":"7"}`}} {
		b, err := json.Marshal(S{tc.v})
		if err != nil || string(b) != tc.want {
			t.Errorf("marshal %d = %s, %v; want %s", tc.v, b, err, tc.want)
		}
	}
	for in, want := range map[string]DSCP{`{"d":"AF41"}`: 34, `{"d":46}`: 46, `{"d":""}`: NoDSCP, `{"d":null}`: NoDSCP, `{"d":"10"}`: 10} {
		s := S{D: 3}
		if err := json.Unmarshal([]byte(in), &s); err != nil || s.D != want {
			t.Errorf("unmarshal %s = %d, %v; want %d", in, s.D, err, want)
		}
	}
	for _, in := range []string{`{"d":64}`, `{"d":"XX"}`, `{"d":true}`} {
		var s S
		if err := json.Unmarshal([]byte(in), &s); err == nil {
			t.Errorf("unmarshal %s: no error", in)
		}
	}
}

func TestParsePortRange(t *testing.T) {
	good := []struct {
		in   string
		want PortRange
		str  string
	}{
		{"80", PortRange{80, 80}, "80"},
		{"1000-2000", PortRange{1000, 2000}, "1000-2000"},
		{"1000 - 2000", PortRange{1000, 2000}, "1000-2000"},
		{"65535", PortRange{65535, 65535}, "65535"},
		{"5-5", PortRange{5, 5}, "5"},
		{"", PortRange{}, ""},
	}
	for _, tc := range good {
		got, err := ParsePortRange(tc.in)
		if err != nil || got != tc.want || got.String() != tc.str {
			t.Errorf("ParsePortRange(%q) = %v (%q), %v; want %v", tc.in, got, got.String(), err, tc.want)
		}
	}
	bad := map[string]string{
		"0":         "port 0",
		"65536":     "65536",
		"2000-1000": "backwards; write 1000-2000",
		"1000:2000": "FROM-TO",
		"http":      "http",
		"80-":       `""`,
		"-80":       `""`,
	}
	for in, want := range bad {
		_, err := ParsePortRange(in)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParsePortRange(%q) error = %v; want one containing %q", in, err, want)
		}
	}
	var pr PortRange
	if err := json.Unmarshal([]byte(`443`), &pr); err != nil || pr != (PortRange{443, 443}) {
		t.Errorf("unmarshal 443 = %v, %v", pr, err)
	}
	if err := json.Unmarshal([]byte(`"1-1024"`), &pr); err != nil || pr != (PortRange{1, 1024}) {
		t.Errorf("unmarshal \"1-1024\" = %v, %v", pr, err)
	}
	if b, _ := json.Marshal(PortRange{1000, 2000}); string(b) != `"1000-2000"` {
		t.Errorf("marshal = %s", b)
	}
	if !(PortRange{}).Contains(9) || !(PortRange{10, 20}).Contains(20) || (PortRange{10, 20}).Contains(21) {
		t.Error("Contains wrong")
	}
}

func TestParsePrefix(t *testing.T) {
	good := map[string]string{
		"198.18.0.0/15":  "198.18.0.0/15",
		"2001:db8::/32":  "2001:db8::/32",
		"198.18.0.7":     "198.18.0.7/32",
		"2001:db8::1":    "2001:db8::1/128",
		"0.0.0.0/0":      "0.0.0.0/0",
		"2001:DB8::/32":  "2001:db8::/32",
		"198.18.0.1/32":  "198.18.0.1/32",
		"2001:db8::/128": "2001:db8::/128",
	}
	for in, want := range good {
		p, err := ParsePrefix(in)
		if err != nil || p.String() != want {
			t.Errorf("ParsePrefix(%q) = %v, %v; want %s", in, p, err, want)
		}
	}
	if p, err := ParsePrefix(""); err != nil || p.IsValid() {
		t.Errorf("ParsePrefix(\"\") = %v, %v; want zero", p, err)
	}
	bad := map[string]string{
		"10.0.0.300/8":       "not a valid CIDR prefix (want e.g. 198.18.0.0/15 or 2001:db8::/32)",
		"198.18.0.1/15":      "198.18.0.1/15 has host bits set; did you mean 198.18.0.0/15?",
		"2001:db8::1/32":     "did you mean 2001:db8::/32?",
		"10.0.0.0/33":        "not a valid CIDR prefix",
		"example.com":        "not a valid address",
		"fe80::1%eth0":       "zone",
		"::ffff:1.2.3.0/120": "did you mean 1.2.3.0/24?",
	}
	for in, want := range bad {
		_, err := ParsePrefix(in)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParsePrefix(%q) error = %v; want one containing %q", in, err, want)
		}
	}
	_ = netip.Prefix{}
}

// FuzzParseRate checks that ParseRate never panics and that String
// round-trips. Without -fuzz it runs the seed corpus as a normal test.
func FuzzParseRate(f *testing.F) {
	for _, s := range []string{"10mbit", "1.5mbit", "128kbit", "1gbit", "500bit", "1MB/s", "0", "10", ".", "1.", ".5kbit",
		"18446744073709551615bit", "18446744073709551616bit", "1.99999999999999999999999gbit", "9TB/s", "1e3kbit", "½mbit"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseRate(s)
		if err != nil {
			return
		}
		if r > MaxRate {
			t.Fatalf("ParseRate(%q) = %d, above MaxRate", s, r)
		}
		back, err := ParseRate(r.String())
		if err != nil || back != r {
			t.Fatalf("ParseRate(%q) = %d; String %q parses to %d, %v", s, r, r.String(), back, err)
		}
	})
}

// FuzzParseDSCP checks that ParseDSCP never panics, accepts only 0..63 and
// NoDSCP, and that String round-trips.
func FuzzParseDSCP(f *testing.F) {
	for _, s := range []string{"EF", "af41", "CS7", "63", "64", "0x2e", "", "-1", "LE", "default", "255", "AF44"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseDSCP(s)
		if err != nil {
			return
		}
		if d == NoDSCP {
			return
		}
		if !d.Valid() {
			t.Fatalf("ParseDSCP(%q) = %d, out of range", s, d)
		}
		back, err := ParseDSCP(d.String())
		if err != nil || back != d {
			t.Fatalf("ParseDSCP(%q) = %d; String %q parses to %d, %v", s, d, d.String(), back, err)
		}
	})
}

// TestValuesTakenAsWritten: a value with spaces around it is refused by
// every parser, with the value to write instead (one convention for every
// field: the API's, the config file's and the CLI's), and nothing is
// taken from it.
func TestValuesTakenAsWritten(t *testing.T) {
	parsers := map[string]func(string) error{
		"rate":   func(s string) error { _, err := ParseRate(s); return err },
		"size":   func(s string) error { _, err := ParseSize(s); return err },
		"dscp":   func(s string) error { _, err := ParseDSCP(s); return err },
		"ports":  func(s string) error { _, err := ParsePortRange(s); return err },
		"prefix": func(s string) error { _, err := ParsePrefix(s); return err },
	}
	for _, c := range []struct{ kind, in, want string }{
		{"rate", " 20mbit", `has spaces around it; write "20mbit"`},
		{"rate", "20 mbit\t", `has spaces around it; write "20 mbit"`},
		{"size", "64kb ", `has spaces around it; write "64kb"`},
		{"dscp", "EF ", `has spaces around it; write "EF"`},
		{"ports", " 80", `has spaces around it; write "80"`},
		{"prefix", "1.2.3.4/32 ", `has spaces around it; write "1.2.3.4/32"`},
		{"prefix", " 2001:db8::/32", `has spaces around it; write "2001:db8::/32"`},
		{"prefix", "  ", "is only spaces; write a value, or leave it out"},
	} {
		err := parsers[c.kind](c.in)
		if err == nil || err.Error() != c.want {
			t.Errorf("%s %q: %v; want %q", c.kind, c.in, err, c.want)
		}
	}
}
