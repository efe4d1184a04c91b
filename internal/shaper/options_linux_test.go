//go:build linux

package shaper

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/hostqos/hostqos/internal/testutil"
)

// TestRetryDump: an interrupted dump is retried and its partial result is
// never returned; a dump interrupted every time gives up after dumpTries.
func TestRetryDump(t *testing.T) {
	calls := 0
	got, err := retryDump(func() ([]int, error) {
		calls++
		if calls < 3 {
			return []int{-1}, netlink.ErrDumpInterrupted
		}
		return []int{1, 2}, nil
	})
	if err != nil || len(got) != 2 || calls != 3 {
		t.Errorf("got %v, err %v after %d calls; want [1 2], nil after 3", got, err, calls)
	}

	calls = 0
	got, err = retryDump(func() ([]int, error) {
		calls++
		return []int{-1}, netlink.ErrDumpInterrupted
	})
	if !errors.Is(err, netlink.ErrDumpInterrupted) || got != nil || calls != dumpTries {
		t.Errorf("always interrupted: got %v, err %v after %d calls; want nil, ErrDumpInterrupted after %d", got, err, calls, dumpTries)
	}

	calls = 0
	other := errors.New("boom")
	if _, err := retryDump(func() (int, error) { calls++; return 0, other }); err != other || calls != 1 {
		t.Errorf("other error: err %v after %d calls; want boom after 1", err, calls)
	}
}

// TestApplyLogsToGivenLogger: Apply and Remove log to the logger passed with
// WithLogger, tagged component=shaper.
func TestApplyLogsToGivenLogger(t *testing.T) {
	testutil.NeedRoot(t)
	ns, ifx := newVeth(t)
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	ns.MustDo(t, func() error {
		if err := Apply(testPlanA(t, ifx), WithLogger(log)); err != nil {
			return err
		}
		return Remove(ifx, WithLogger(log))
	})
	out := buf.String()
	for _, want := range []string{"HTB tree updated", "HTB tree removed", "component=shaper", "link=hq0"} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
}
