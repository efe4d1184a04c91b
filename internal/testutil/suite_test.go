package testutil

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// recorder is a testing.TB that records what Measured reports.
type recorder struct {
	testing.TB
	logs, errs []string
}

func (r *recorder) Helper()                      {}
func (r *recorder) Logf(format string, a ...any) { r.logs = append(r.logs, fmt.Sprintf(format, a...)) }
func (r *recorder) Errorf(format string, a ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, a...))
}

// TestMeasured: a measurement passes when one attempt does (the earlier
// ones logged), and fails with the last message when every attempt fails;
// it is not run again once it passed.
func TestMeasured(t *testing.T) {
	defer func(p time.Duration) { measuredPause = p }(measuredPause)
	measuredPause = 0
	for _, c := range []struct {
		name     string
		passFrom int // the first attempt that passes (0: none)
		runs     int
		logs     int
		err      string
	}{
		{"first attempt", 1, 1, 0, ""},
		{"third attempt", 3, 3, 2, ""},
		{"every attempt fails", 0, 3, 3, "rate: got 3, want 9 (in 3 attempts)"},
	} {
		r := &recorder{}
		runs := 0
		Measured(r, "rate", 3, func(n int) (bool, string) {
			runs++
			if n != runs {
				t.Errorf("%s: attempt numbered %d, want %d", c.name, n, runs)
			}
			return c.passFrom != 0 && n >= c.passFrom, fmt.Sprintf("got %d, want 9", n)
		})
		if runs != c.runs || len(r.logs) != c.logs || strings.Join(r.errs, "; ") != c.err {
			t.Errorf("%s: %d runs, logs %q, errors %q; want %d runs, %d logs, error %q", c.name, runs, r.logs, r.errs, c.runs, c.logs, c.err)
		}
	}
}
