package policy

import (
	"encoding/json"
	"os"
	"regexp"
	"testing"

	"github.com/hostqos/hostqos/internal/units"
)

// FuzzLoad feeds the config loader (what `hostqos config check` and the
// daemon both run) arbitrary files. Whatever the file: no panic; a refusal
// is a list of problems, each with a reason, and the same file gives the
// same answer twice (the message does not depend on map order); an
// accepted policy validates and passes admission again as loaded. Seeds:
// the packaged config, the examples of docs/config.md and testdata/fuzz.
func FuzzLoad(f *testing.F) {
	if b, err := os.ReadFile("../../packaging/hostqos.toml"); err == nil {
		f.Add(b)
	}
	if doc, err := os.ReadFile("../../docs/config.md"); err == nil {
		for _, m := range regexp.MustCompile("(?s)```toml\n(.*?)```").FindAllSubmatch(doc, -1) {
			f.Add(m[1])
		}
	}
	for _, s := range []string{
		"[[rule]]\nname = \"web\"\nproto = \"tcp\"\nrport = \"443\"\nclass = \"interactive\"\n",
		"[[link]]\nname = \"eth0\"\negress_rate = \"19mbit\"\n[[class]]\nname = \"gold\"\ndscp = \"AF21\"\nminbw = \"5mbit\"\n",
		"[[rule]]\nname = \"x\"\nmax_bw = 1\n",
		"builtin_classes = false\n",
		"[[rule]]\nname = \"a\"\n[[rule]]\nname = \"a\"\n",
		"[[link]]\nname = \"eth0\"\negress_rate = \"1mbit\"\nreservable = 2.0\n",
		"x = [",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Load(data, "fuzz.toml")
		p2, err2 := Load(data, "fuzz.toml")
		if (err == nil) != (err2 == nil) || (err != nil && err.Error() != err2.Error()) {
			t.Fatalf("two loads of the same file differ:\n%v\n%v", err, err2)
		}
		if err != nil {
			es := AsErrors(err)
			if len(es) == 0 {
				t.Fatalf("refusal is not a list of problems: %v", err)
			}
			for _, e := range es {
				if e.Reason == "" {
					t.Fatalf("problem without a reason: %+v", e)
				}
			}
			return
		}
		a, _ := json.Marshal(p)
		b, _ := json.Marshal(p2)
		if string(a) != string(b) {
			t.Fatalf("two loads of the same file give different policies:\n%s\n%s", a, b)
		}
		if err := p.Validate("again"); err != nil {
			t.Fatalf("a loaded policy does not validate again: %v", err)
		}
		if err := p.Admit("again"); err != nil {
			t.Fatalf("a loaded policy is not admitted again: %v", err)
		}
	})
}

// FuzzParseSize: no panic, at most 1 TiB, and String round-trips.
func FuzzParseSize(f *testing.F) {
	for _, s := range []string{"1500", "1500b", "64kb", "64k", "1.5mb", "64kib", "1gb", "1024gb", "1025gb", "0", "", "1mbit", ".5k", "1e3", "64KiB", "64kB", "1.5MiB", "5GB", "1TiB"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ParseSize(s)
		if err != nil {
			return
		}
		if v > maxSize {
			t.Fatalf("ParseSize(%q) = %d, over the limit %d", s, v, maxSize)
		}
		back, err := ParseSize(v.String())
		if err != nil || back != v {
			t.Fatalf("ParseSize(%q) = %d; String %q parses to %d, %v", s, v, v.String(), back, err)
		}
	})
}

// FuzzParsePortRange: no panic, never port 0 in a set range, From <= To,
// and String round-trips.
func FuzzParsePortRange(f *testing.F) {
	for _, s := range []string{"80", "1000-2000", "", "0", "65535", "65536", "2000-1000", "1:2", " 5 - 6 ", "-", "1-"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParsePortRange(s)
		if err != nil {
			return
		}
		if !p.IsZero() && (p.From == 0 || p.From > p.To) {
			t.Fatalf("ParsePortRange(%q) = %+v", s, p)
		}
		back, err := ParsePortRange(p.String())
		if err != nil || back != p {
			t.Fatalf("ParsePortRange(%q) = %+v; String %q parses to %+v, %v", s, p, p.String(), back, err)
		}
	})
}

// FuzzParsePrefix: no panic; an accepted prefix is canonical (no host
// bits), not IPv4-mapped, has no zone, and round-trips through String.
func FuzzParsePrefix(f *testing.F) {
	for _, s := range []string{"198.18.0.0/15", "2001:db8::/32", "198.18.0.1", "::ffff:1.2.3.4/128", "fe80::1%eth0", "198.18.0.1/15", "", "1.2.3.4/33", "::/0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParsePrefix(s)
		if err != nil || !p.IsValid() {
			return
		}
		if p.Masked() != p || p.Addr().Is4In6() || p.Addr().Zone() != "" {
			t.Fatalf("ParsePrefix(%q) = %v accepted", s, p)
		}
		back, err := ParsePrefix(p.String())
		if err != nil || back != p {
			t.Fatalf("ParsePrefix(%q) = %v; String parses to %v, %v", s, p, back, err)
		}
	})
}

// FuzzExactRate: every rate the daemon writes (units.ExactRate, in status,
// errors and saved state) parses back to the same number of bits per
// second, up to MaxRate; above it (only a sum in a refusal can be) it is
// refused with the bound.
func FuzzExactRate(f *testing.F) {
	for _, v := range []uint64{0, 1, 999, 1000, 1500, 128000, 1_000_001, 10_000_000_000, uint64(MaxRate), uint64(MaxRate) + 1, 1<<64 - 1} {
		f.Add(v)
	}
	f.Fuzz(func(t *testing.T, bps uint64) {
		s := units.ExactRate(bps)
		r, err := ParseRate(s)
		if bps > uint64(MaxRate) {
			if err == nil {
				t.Fatalf("ExactRate(%d) = %q parses to %d above MaxRate", bps, s, r)
			}
			return
		}
		if err != nil {
			t.Fatalf("ExactRate(%d) = %q does not parse: %v", bps, s, err)
		}
		if uint64(r) != bps {
			t.Fatalf("ExactRate(%d) = %q parses to %d", bps, s, r)
		}
	})
}
