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
		{"1500", 1500, "1500b"},
		{"1500b", 1500, "1500b"},
		{"64kb", 65536, "64kb"},
		{"64K", 65536, "64kb"},
		{"64kib", 65536, "64kb"},
		{"1.5mb", 1572864, "1536kb"},
		{"2m", 2 << 20, "2mb"},
		{"1gb", 1 << 30, "1gb"},
		{"3000 b", 3000, "3000b"},
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
		{"64kbit", "that is a rate unit"},
		{"10mbps", "that is a rate unit"},
		{"5 parsecs", `unknown size unit "parsecs"`},
		{"2048gb", "too large"},
		{"1.2.3", "not a number"},
	} {
		if _, err := ParseSize(c.in); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseSize(%q) error %v, want %q", c.in, err, c.want)
		}
	}
}

func TestSizeJSON(t *testing.T) {
	var v struct{ A, B, C Size }
	if err := json.Unmarshal([]byte(`{"A":"64kb","B":1500,"C":null}`), &v); err != nil || v.A != 65536 || v.B != 1500 || v.C != 0 {
		t.Fatalf("unmarshal: %+v %v", v, err)
	}
	out, _ := json.Marshal(v)
	if string(out) != `{"A":"64kb","B":"1500b","C":"0"}` {
		t.Errorf("marshal: %s", out)
	}
	if err := json.Unmarshal([]byte(`{"A":-5}`), &v); err == nil {
		t.Error("negative size accepted")
	}
}
