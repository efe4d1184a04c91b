package policy

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestParseSize(t *testing.T) {
	for _, c := range []struct {
		in   string
		want Size
		str  string
	}{
		{"1500", 1500, "1500B"},
		{"1500b", 1500, "1500B"},
		{"1500B", 1500, "1500B"},
		{"64KiB", 65536, "64KiB"},
		{"64kib", 65536, "64KiB"},
		{"1.5MiB", 1572864, "1536KiB"},
		{"2MiB", 2 << 20, "2MiB"},
		{"1GiB", 1 << 30, "1GiB"},
		{"1TiB", 1 << 40, "1TiB"},
		// SI units count 1000s, as rates do.
		{"64kB", 64000, "64kB"},
		{"64KB", 64000, "64kB"},
		{"5GB", 5_000_000_000, "5GB"},
		{"1.5MB", 1_500_000, "1500kB"},
		{"3000 B", 3000, "3kB"},
		{"2048000", 2048000, "2000KiB"},
	} {
		got, err := ParseSize(c.in)
		if err != nil || got != c.want || got.String() != c.str {
			t.Errorf("ParseSize(%q) = %d (%v), %v; want %d (%s)", c.in, got, got, err, c.want, c.str)
		}
	}
	for _, c := range []struct{ in, want string }{
		{"", "empty size"},
		{"-1", "cannot be negative"},
		{"kb", "not a size"},
		// The spellings with two readings name both and what to write.
		{"64kb", "64kb is ambiguous: 64KiB (65,536 bytes, as tc and earlier hostqos read it) or 64kB (64,000 bytes); write one of them"},
		{"64K", "64K is ambiguous: 64KiB (65,536 bytes"},
		{"10mb", "10MiB (10,485,760 bytes, as tc and earlier hostqos read it) or 10MB (10,000,000 bytes)"},
		{"2m", "ambiguous"},
		{"5gb", "5GiB (5,368,709,120 bytes"},
		{"1Tb", "ambiguous"},
		{"64kbit", "that is a rate unit"},
		{"10mbps", "that is a rate unit"},
		{"5 parsecs", `unknown size unit "parsecs"`},
		{"2048GiB", "too large: at most 1TiB"},
		{"1.1TB", "too large"},
		{"1.2.3", "not a number"},
	} {
		if _, err := ParseSize(c.in); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseSize(%q) error %v, want %q", c.in, err, c.want)
		}
	}
}

func TestSizeJSON(t *testing.T) {
	var v struct{ A, B, C Size }
	if err := json.Unmarshal([]byte(`{"A":"64KiB","B":1500,"C":null}`), &v); err != nil || v.A != 65536 || v.B != 1500 || v.C != 0 {
		t.Fatalf("unmarshal: %+v %v", v, err)
	}
	out, _ := json.Marshal(v)
	if string(out) != `{"A":"64KiB","B":"1500B","C":"0"}` {
		t.Errorf("marshal: %s", out)
	}
	if err := json.Unmarshal([]byte(`{"A":-5}`), &v); err == nil {
		t.Error("negative size accepted")
	}
}

// TestSizeJSONKeepsOldSpellings: the JSON of earlier versions (state files,
// API clients) wrote sizes as "64kb", "10mb" (powers of 1024); they keep
// that meaning, where the config file and the CLI refuse them.
func TestSizeJSONKeepsOldSpellings(t *testing.T) {
	var v struct{ A, B, C, D Size }
	if err := json.Unmarshal([]byte(`{"A":"64kb","B":"10mb","C":"2g","D":"1500b"}`), &v); err != nil {
		t.Fatal(err)
	}
	if v.A != 64<<10 || v.B != 10<<20 || v.C != 2<<30 || v.D != 1500 {
		t.Errorf("old spellings read as %d %d %d %d", v.A, v.B, v.C, v.D)
	}
	if err := v.A.UnmarshalText([]byte("64kb")); err == nil {
		t.Error("text (the config file) takes 64kb")
	}
}
