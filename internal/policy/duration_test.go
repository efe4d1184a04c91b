package policy

import (
	"strings"
	"testing"
	"time"
)

// TestParseDuration: Go's and systemd's forms, and a plain number of
// seconds, mean the same everywhere.
func TestParseDuration(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"1s":        time.Second,
		"1":         time.Second,
		"0.5":       500 * time.Millisecond,
		"0":         0,
		"200ms":     200 * time.Millisecond,
		"1h30m":     90 * time.Minute,
		"2h 30min":  150 * time.Minute,
		"5 min":     5 * time.Minute,
		"1.5s":      1500 * time.Millisecond,
		"7d":        7 * 24 * time.Hour,
		"2w":        14 * 24 * time.Hour,
		"1d12h":     36 * time.Hour,
		"100us":     100 * time.Microsecond,
		"100µs":     100 * time.Microsecond,
		"3 seconds": 3 * time.Second,
		"1 hour":    time.Hour,
		"500msec":   500 * time.Millisecond,
		"1H":        time.Hour,
	} {
		got, err := ParseDuration(in)
		if err != nil || got != want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for in, want := range map[string]string{
		"":                     "empty duration",
		"-1s":                  "cannot be negative",
		"1x":                   `unknown unit "x"`,
		"1s 5":                 `5 has no unit; write 5s`,
		"s":                    "not a duration",
		"1.2.3s":               "not a number",
		"300000w":              "at most 290 years",
		" 1s":                  "has spaces around it",
		"1month":               `unknown unit "month"`,
		"99999999999999999999": "at most 290 years",
	} {
		if _, err := ParseDuration(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseDuration(%q) error %v, want %q", in, err, want)
		}
	}
}

// FuzzParseDuration checks that ParseDuration never panics, never gives a
// negative duration, and reads FormatSpan's output back.
func FuzzParseDuration(f *testing.F) {
	for _, s := range []string{"1s", "2h 30min", "0.5", "7d", "1.5µs", "99999999999w", "1e3s", "."} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseDuration(s)
		if err != nil {
			return
		}
		if d < 0 {
			t.Fatalf("ParseDuration(%q) = %v", s, d)
		}
		if back, err := ParseDuration(FormatSpan(d)); err != nil || back != d {
			t.Fatalf("ParseDuration(%q) = %v; FormatSpan %q reads as %v, %v", s, d, FormatSpan(d), back, err)
		}
	})
}
