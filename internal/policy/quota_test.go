package policy

import (
	"testing"
	"time"
)

func TestScheduleWindows(t *testing.T) {
	s, err := ParseSchedule("Mon-Fri 09:00-18:00, Sat 22:00-02:00, Fri-Mon 12:00-12:30")
	if err != nil {
		t.Fatal(err)
	}
	at := func(day, hh, mm int) time.Time { return time.Date(2026, 11, 22+day, hh, mm, 0, 0, time.UTC) } // day 0 = Sunday
	for _, c := range []struct {
		t  time.Time
		on bool
	}{
		{at(1, 8, 59), false}, {at(1, 9, 0), true}, {at(5, 17, 59), true}, {at(5, 18, 0), false},
		{at(6, 21, 59), false}, {at(6, 22, 0), true}, {at(7, 1, 59), true}, {at(7, 2, 0), false}, // Saturday night into Sunday
		{at(0, 12, 10), true}, {at(3, 12, 10), true}, // Fri-Mon wraps over the weekend; Wednesday inside Mon-Fri 09-18
		{at(6, 12, 10), true}, {at(6, 13, 0), false},
	} {
		if got := s.Active(c.t, time.UTC); got != c.on {
			t.Errorf("%s: active %v, want %v", c.t.Format("Mon 15:04"), got, c.on)
		}
	}
	if nc := s.NextChange(at(5, 17, 0), time.UTC); !nc.Equal(at(5, 18, 0)) {
		t.Errorf("next change Friday 17:00: %v", nc)
	}
	daily, _ := ParseSchedule("daily")
	if !daily.Active(at(2, 3, 0), time.UTC) || !daily.NextChange(at(2, 3, 0), time.UTC).IsZero() {
		t.Error("daily: always on, never changes")
	}
	for _, bad := range []string{"", "Mon 9-10", "Mon 09:00-09:00", "Foo 09:00-10:00", "Mon 09:00-25:00", "Mon 09:00 10:00 x"} {
		if _, err := ParseSchedule(bad); err == nil {
			t.Errorf("schedule %q accepted", bad)
		}
	}
}

func TestQuotaPeriods(t *testing.T) {
	now := time.Date(2026, 11, 25, 3, 0, 0, 0, time.UTC) // a Wednesday, before the 06:00 reset
	for _, c := range []struct {
		period      string
		start, next time.Time
	}{
		{PeriodDay, time.Date(2026, 11, 24, 6, 0, 0, 0, time.UTC), time.Date(2026, 11, 25, 6, 0, 0, 0, time.UTC)},
		{PeriodWeek, time.Date(2026, 11, 23, 6, 0, 0, 0, time.UTC), time.Date(2026, 11, 30, 6, 0, 0, 0, time.UTC)},
		{PeriodMonth, time.Date(2026, 11, 1, 6, 0, 0, 0, time.UTC), time.Date(2026, 12, 1, 6, 0, 0, 0, time.UTC)},
	} {
		start, next := QuotaPeriodAt(now, c.period, 6*60, time.UTC)
		if !start.Equal(c.start) || !next.Equal(c.next) {
			t.Errorf("%s: [%v, %v), want [%v, %v)", c.period, start, next, c.start, c.next)
		}
	}
	// Monday before the reset belongs to the previous week.
	start, _ := QuotaPeriodAt(time.Date(2026, 11, 23, 5, 0, 0, 0, time.UTC), PeriodWeek, 6*60, time.UTC)
	if !start.Equal(time.Date(2026, 11, 16, 6, 0, 0, 0, time.UTC)) {
		t.Errorf("week of Monday 05:00 starts %v", start)
	}
	a, err := ParseQuotaAction("limit 1mbit")
	if err != nil || a.Kind != QuotaLimit || a.Limit != 1_000_000 || a.String() != "limit 1mbit" {
		t.Errorf("limit 1mbit: %+v %v", a, err)
	}
}

// FuzzParseSchedule: no panic; an accepted schedule has 1 to
// MaxScheduleWindows windows with times in a day, and at the time
// NextChange gives, Active has changed.
func FuzzParseSchedule(f *testing.F) {
	for _, s := range []string{"Mon-Fri 09:00-18:00", "daily", "Sat 22:00-02:00, Sun", "Fri-Mon 12:00-24:00", "mon 9:00-10:00", ",", "Mon 24:00-01:00", "* 00:00-23:59"} {
		f.Add(s, int64(1795000000))
	}
	f.Fuzz(func(t *testing.T, s string, unix int64) {
		sc, err := ParseSchedule(s)
		if err != nil {
			return
		}
		if len(sc) == 0 || len(sc) > MaxScheduleWindows {
			t.Fatalf("ParseSchedule(%q): %d windows", s, len(sc))
		}
		for _, w := range sc {
			if w.Start < 0 || w.Start >= 24*60 || w.End < 0 || w.End > 24*60 || w.Start == w.End {
				t.Fatalf("ParseSchedule(%q): window %+v", s, w)
			}
		}
		now := time.Unix(unix%(1<<34), 0)
		if nc := sc.NextChange(now, time.UTC); !nc.IsZero() && sc.Active(nc, time.UTC) == sc.Active(now, time.UTC) {
			t.Fatalf("ParseSchedule(%q): at %v, NextChange %v does not change Active", s, now, nc)
		}
	})
}

// FuzzParseQuotaAction: no panic, and String parses back to the same.
func FuzzParseQuotaAction(f *testing.F) {
	for _, s := range []string{"", "event", "block", "limit 1mbit", "limit", "limit 0", "limit 1mbit 2", "Block"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		a, err := ParseQuotaAction(s)
		if err != nil {
			return
		}
		back, err := ParseQuotaAction(a.String())
		if err != nil || back != a {
			t.Fatalf("ParseQuotaAction(%q) = %+v; String %q parses to %+v, %v", s, a, a.String(), back, err)
		}
	})
}
