package policy

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	_ "time/tzdata" // time zones resolve the same on hosts without /usr/share/zoneinfo
)

// Quota periods, directions and actions (Rule.QuotaPeriod,
// QuotaDirection, QuotaAction).
const (
	PeriodDay   = "day"
	PeriodWeek  = "week" // resets on Mondays
	PeriodMonth = "month"

	DirOut  = "out"
	DirIn   = "in"
	DirBoth = "both"

	QuotaEvent = "event" // only publish an event
	QuotaBlock = "block" // drop the rule's traffic until the reset
	QuotaLimit = "limit" // "limit RATE": a ceiling until the reset
)

// MaxScheduleWindows bounds the windows of one schedule.
const MaxScheduleWindows = 32

// QuotaActionSpec is a parsed Rule.QuotaAction.
type QuotaActionSpec struct {
	Kind  string // QuotaEvent, QuotaBlock or QuotaLimit
	Limit Rate   // with QuotaLimit
}

// ParseQuotaAction parses "event", "block" or "limit RATE" ("" is event).
func ParseQuotaAction(s string) (QuotaActionSpec, error) {
	f := strings.Fields(s)
	switch {
	case len(f) == 0:
		return QuotaActionSpec{Kind: QuotaEvent}, nil
	case len(f) == 1 && (f[0] == QuotaEvent || f[0] == QuotaBlock):
		return QuotaActionSpec{Kind: f[0]}, nil
	case f[0] == QuotaLimit && len(f) == 2:
		r, err := ParseRate(f[1])
		if err != nil {
			return QuotaActionSpec{}, err
		}
		if r < MinPolice {
			return QuotaActionSpec{}, fmt.Errorf("limit %s below %s", r, MinPolice)
		}
		return QuotaActionSpec{Kind: QuotaLimit, Limit: r}, nil
	case f[0] == QuotaLimit:
		return QuotaActionSpec{}, fmt.Errorf("limit needs one rate, e.g. \"limit 1mbit\"")
	}
	return QuotaActionSpec{}, fmt.Errorf("unknown action")
}

// String is the action as written in a rule.
func (a QuotaActionSpec) String() string {
	if a.Kind == QuotaLimit {
		return QuotaLimit + " " + a.Limit.String()
	}
	return a.Kind
}

// ParseClock parses a time of day "HH:MM" into minutes after midnight;
// "24:00" (the end of a day) only when allowEnd.
func ParseClock(s string, allowEnd bool) (int, error) {
	h, m, ok := strings.Cut(strings.TrimSpace(s), ":")
	hh, err1 := strconv.Atoi(h)
	mm, err2 := strconv.Atoi(m)
	if !ok || err1 != nil || err2 != nil || len(m) != 2 || hh < 0 || mm < 0 || mm > 59 {
		return 0, fmt.Errorf("want a time of day HH:MM, e.g. 09:00")
	}
	if hh == 24 && mm == 0 && allowEnd {
		return 24 * 60, nil
	}
	if hh > 23 {
		return 0, fmt.Errorf("hour %d out of range 0..23", hh)
	}
	return hh*60 + mm, nil
}

// Location resolves a rule's time zone ("" is the host's local time).
func Location(tz string) (*time.Location, error) {
	if tz == "" {
		return time.Local, nil
	}
	return time.LoadLocation(tz)
}

// QuotaPeriodAt is the period of a quota that t falls in: [start, next).
// A day runs from the reset time to the next day's; a week from Monday's
// reset time; a month from the 1st's. Times are wall-clock times in loc.
func QuotaPeriodAt(t time.Time, period string, resetMin int, loc *time.Location) (start, next time.Time) {
	t = t.In(loc)
	h, m := resetMin/60, resetMin%60
	y, mo, d := t.Date()
	switch period {
	case PeriodWeek:
		back := (int(t.Weekday()) + 6) % 7 // days since Monday
		start = time.Date(y, mo, d-back, h, m, 0, 0, loc)
		if start.After(t) {
			start = time.Date(y, mo, d-back-7, h, m, 0, 0, loc)
		}
		sy, smo, sd := start.Date()
		next = time.Date(sy, smo, sd+7, h, m, 0, 0, loc)
	case PeriodMonth:
		start = time.Date(y, mo, 1, h, m, 0, 0, loc)
		if start.After(t) {
			start = time.Date(y, mo-1, 1, h, m, 0, 0, loc)
		}
		sy, smo, _ := start.Date()
		next = time.Date(sy, smo+1, 1, h, m, 0, 0, loc)
	default: // day
		start = time.Date(y, mo, d, h, m, 0, 0, loc)
		if start.After(t) {
			start = time.Date(y, mo, d-1, h, m, 0, 0, loc)
		}
		sy, smo, sd := start.Date()
		next = time.Date(sy, smo, sd+1, h, m, 0, 0, loc)
	}
	return start, next
}

// Window is one window of a schedule: the days it starts on (by
// time.Weekday) and its start and end in minutes after midnight. An end
// at or before the start runs past midnight into the next day.
type Window struct {
	Days       [7]bool
	Start, End int
}

// ScheduleSpec is a parsed Rule.Schedule: the rule is on inside any of its
// windows.
type ScheduleSpec []Window

var dayNames = map[string]time.Weekday{"mon": time.Monday, "tue": time.Tuesday, "wed": time.Wednesday,
	"thu": time.Thursday, "fri": time.Friday, "sat": time.Saturday, "sun": time.Sunday}

const scheduleHelp = `windows separated by commas, each DAYS [HH:MM-HH:MM], DAYS a day (Mon), a range (Mon-Fri) or "daily"; e.g. "Mon-Fri 09:00-18:00, Sat 10:00-14:00"`

// ParseSchedule parses windows such as "Mon-Fri 09:00-18:00, Sat-Sun"
// (a window without times lasts the whole day; "22:00-06:00" runs past
// midnight).
func ParseSchedule(s string) (ScheduleSpec, error) {
	var out ScheduleSpec
	items := strings.Split(s, ",")
	if len(items) > MaxScheduleWindows {
		return nil, fmt.Errorf("%d windows, at most %d", len(items), MaxScheduleWindows)
	}
	for _, item := range items {
		f := strings.Fields(item)
		if len(f) == 0 || len(f) > 2 {
			return nil, fmt.Errorf("window %q: want DAYS [HH:MM-HH:MM] (%s)", strings.TrimSpace(item), scheduleHelp)
		}
		w := Window{Start: 0, End: 24 * 60}
		if err := parseDays(f[0], &w.Days); err != nil {
			return nil, fmt.Errorf("window %q: %w (%s)", strings.TrimSpace(item), err, scheduleHelp)
		}
		if len(f) == 2 {
			from, to, ok := strings.Cut(f[1], "-")
			var err error
			if !ok {
				return nil, fmt.Errorf("window %q: want a time range HH:MM-HH:MM", strings.TrimSpace(item))
			}
			if w.Start, err = ParseClock(from, false); err != nil {
				return nil, fmt.Errorf("window %q: start: %w", strings.TrimSpace(item), err)
			}
			if w.End, err = ParseClock(to, true); err != nil {
				return nil, fmt.Errorf("window %q: end: %w", strings.TrimSpace(item), err)
			}
			if w.End == w.Start {
				return nil, fmt.Errorf("window %q: starts and ends at the same time; leave the times out for the whole day", strings.TrimSpace(item))
			}
		}
		out = append(out, w)
	}
	return out, nil
}

func parseDays(s string, days *[7]bool) error {
	ls := strings.ToLower(s)
	if ls == "daily" || ls == "*" {
		for i := range days {
			days[i] = true
		}
		return nil
	}
	from, to, isRange := strings.Cut(ls, "-")
	a, ok := dayNames[from]
	if !ok {
		return fmt.Errorf("unknown day %q", from)
	}
	b := a
	if isRange {
		if b, ok = dayNames[to]; !ok {
			return fmt.Errorf("unknown day %q", to)
		}
	}
	for d := a; ; d = (d + 1) % 7 { // Fri-Mon wraps over the weekend
		days[d] = true
		if d == b {
			return nil
		}
	}
}

// Active reports whether t (in loc's wall-clock time) falls in a window.
func (s ScheduleSpec) Active(t time.Time, loc *time.Location) bool {
	t = t.In(loc)
	day, min := t.Weekday(), t.Hour()*60+t.Minute()
	yesterday := (day + 6) % 7
	for _, w := range s {
		if w.End > w.Start {
			if w.Days[day] && min >= w.Start && min < w.End {
				return true
			}
			continue
		}
		// Runs past midnight: the evening of its day or the morning after.
		if (w.Days[day] && min >= w.Start) || (w.Days[yesterday] && min < w.End) {
			return true
		}
	}
	return false
}

// NextChange is the first moment after t at which Active changes, looking
// at most nine days ahead (zero time: never, e.g. "daily"). Only the
// windows' starts and ends can be such moments.
func (s ScheduleSpec) NextChange(t time.Time, loc *time.Location) time.Time {
	cur := s.Active(t, loc)
	lt := t.In(loc)
	y, mo, d := lt.Date()
	var cands []time.Time
	for i := -1; i <= 8; i++ {
		for _, w := range s {
			for _, m := range []int{w.Start, w.End} {
				c := time.Date(y, mo, d+i, m/60, m%60, 0, 0, loc)
				if c.After(t) {
					cands = append(cands, c)
				}
			}
		}
	}
	slices.SortFunc(cands, func(a, b time.Time) int { return a.Compare(b) })
	for _, c := range cands {
		if s.Active(c, loc) != cur {
			return c
		}
	}
	return time.Time{}
}

// HasQuota reports whether the rule carries a quota.
func (r Rule) HasQuota() bool { return r.Quota > 0 }

// quotaSchedule checks the quota and schedule fields of a rule.
func (v *validator) quotaSchedule(obj string, r Rule) {
	if r.TimeZone != "" {
		if len(r.TimeZone) > 64 {
			v.add(obj, "timezone", r.TimeZone, fmt.Sprintf("too long: %d bytes, at most 64", len(r.TimeZone)), "use an IANA name such as Europe/Berlin or UTC")
		} else if _, err := Location(r.TimeZone); err != nil {
			v.add(obj, "timezone", r.TimeZone, "unknown time zone", "use an IANA name such as Europe/Berlin or UTC, or leave it out for the host's local time")
		} else if !r.HasQuota() && r.Schedule == "" {
			v.add(obj, "timezone", r.TimeZone, "set without quota or schedule", "add a quota or schedule, or remove timezone")
		}
	}
	if len(r.Schedule) > 1024 {
		v.add(obj, "schedule", r.Schedule, fmt.Sprintf("too long: %d bytes, at most 1024", len(r.Schedule)), "use fewer windows")
	} else if r.Schedule != "" {
		if _, err := ParseSchedule(r.Schedule); err != nil {
			v.add(obj, "schedule", r.Schedule, err.Error(), `e.g. schedule = "Mon-Fri 09:00-18:00"`)
		}
	}
	if !r.HasQuota() {
		for _, f := range []struct{ name, val string }{{"quota_period", r.QuotaPeriod}, {"quota_direction", r.QuotaDirection},
			{"quota_reset", r.QuotaReset}, {"quota_action", r.QuotaAction}} {
			if f.val != "" {
				v.add(obj, f.name, f.val, "set without quota", "add quota = SIZE (e.g. \"5GiB\") or remove "+f.name)
			}
		}
		return
	}
	switch r.QuotaPeriod {
	case "", PeriodDay, PeriodWeek, PeriodMonth:
	default:
		v.add(obj, "quota_period", r.QuotaPeriod, "unknown period", "use day, week or month")
	}
	switch r.QuotaDirection {
	case "", DirOut, DirIn, DirBoth:
	default:
		v.add(obj, "quota_direction", r.QuotaDirection, "unknown direction", "use out (sent), in (received) or both")
	}
	if r.QuotaReset != "" {
		if _, err := ParseClock(r.QuotaReset, false); err != nil {
			v.add(obj, "quota_reset", r.QuotaReset, err.Error(), "write the time of day the quota starts again, e.g. 00:00 or 06:30")
		}
	}
	if a, err := ParseQuotaAction(r.QuotaAction); err != nil {
		v.add(obj, "quota_action", r.QuotaAction, err.Error(), `use event, block or "limit RATE" (e.g. "limit 1mbit")`)
	} else if a.Kind == QuotaLimit && (r.QuotaDirection == DirIn || r.QuotaDirection == DirBoth) && a.Limit < MinMaxBWIn {
		v.add(obj, "quota_action", r.QuotaAction, "a limit of received traffic below "+MinMaxBWIn.String()+" cannot hold TCP (two segments per round trip)",
			"limit at "+MinMaxBWIn.String()+" or more, or use block")
	} else if a.Kind != QuotaEvent && r.Action != "" && r.Action != ActionPass {
		v.add(obj, "quota_action", r.QuotaAction, "with action "+string(r.Action)+" there is nothing to "+a.Kind, "use quota_action = \"event\" or action pass")
	}
}

// QuotaSpec is a rule's quota with its defaults filled in and parsed.
type QuotaSpec struct {
	Size      uint64
	Period    string
	Direction string
	ResetMin  int
	Action    QuotaActionSpec
	Loc       *time.Location
}

// QuotaOf parses a valid rule's quota (ok false: none).
func (r Rule) QuotaOf() (QuotaSpec, bool) {
	if !r.HasQuota() {
		return QuotaSpec{}, false
	}
	q := QuotaSpec{Size: uint64(r.Quota), Period: r.QuotaPeriod, Direction: r.QuotaDirection}
	if q.Period == "" {
		q.Period = PeriodDay
	}
	if q.Direction == "" {
		q.Direction = DirOut
	}
	if r.QuotaReset != "" {
		q.ResetMin, _ = ParseClock(r.QuotaReset, false)
	}
	q.Action, _ = ParseQuotaAction(r.QuotaAction)
	var err error
	if q.Loc, err = Location(r.TimeZone); err != nil {
		q.Loc = time.Local
	}
	return q, true
}

// ScheduleOf parses a valid rule's schedule (ok false: none).
func (r Rule) ScheduleOf() (ScheduleSpec, *time.Location, bool) {
	if r.Schedule == "" {
		return nil, nil, false
	}
	s, err := ParseSchedule(r.Schedule)
	if err != nil {
		return nil, nil, false
	}
	loc, err := Location(r.TimeZone)
	if err != nil {
		loc = time.Local
	}
	return s, loc, true
}
