package testutil

import (
	"os"
	"testing"
	"time"
)

// measuredPause is how long Measured waits between attempts: long enough
// for a stall of the shared machine (another job's build, a verifier run)
// to pass.
var measuredPause = 2 * time.Second

// Measured runs a measurement that a stall of a shared, loaded machine can
// spoil: fn (given the attempt's number, from 1) up to attempts times, with
// a pause (2 s) between, until one attempt reports ok. Each failed attempt
// is logged; when all fail the test fails with the last message. A real
// regression fails every attempt, so the bound stays the bound; only the
// noise of one attempt is forgiven. fn may call t.Fatal.
func Measured(tb testing.TB, what string, attempts int, fn func(n int) (ok bool, msg string)) {
	tb.Helper()
	for n := 1; n <= attempts; n++ {
		ok, msg := fn(n)
		if ok {
			return
		}
		tb.Logf("attempt %d: %s: %s", n, what, msg)
		if n == attempts {
			tb.Errorf("%s: %s (in %d attempts)", what, msg, attempts)
			return
		}
		time.Sleep(measuredPause)
	}
}

// LongEnv, set to 1, lets the long tests (Long) run. `make test-long`
// sets it; `make test` does not.
const LongEnv = "HOSTQOS_LONG_TESTS"

// Long skips a long end-to-end smoke test (a whole demo or benchmark run)
// unless LongEnv is set: `make test` leaves these to `make test-long`,
// which CI runs after it.
func Long(tb testing.TB) {
	tb.Helper()
	if os.Getenv(LongEnv) != "1" {
		tb.Skipf("a long smoke test: run it with make test-long (or %s=1 go test -run %s)", LongEnv, tb.Name())
	}
}
