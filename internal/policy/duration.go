package policy

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Durations take Go's form and systemd's (systemd.time(7)) alike, in the
// config file and on every command line: "90s", "1h30m", "1.5s", "200ms",
// "2h 30min", "5 min", "7d", "2w", and a plain number of seconds ("1",
// "0.5"). Units: ns (nsec), us (µs, usec), ms (msec), s (sec, second,
// seconds), m (min, minute, minutes), h (hr, hour, hours), d (day, days),
// w (week, weeks).

// durationUnits map every accepted unit to its length.
var durationUnits = map[string]time.Duration{
	"ns": time.Nanosecond, "nsec": time.Nanosecond,
	"us": time.Microsecond, "µs": time.Microsecond, "μs": time.Microsecond, "usec": time.Microsecond,
	"ms": time.Millisecond, "msec": time.Millisecond,
	"s": time.Second, "sec": time.Second, "second": time.Second, "seconds": time.Second,
	"m": time.Minute, "min": time.Minute, "minute": time.Minute, "minutes": time.Minute,
	"h": time.Hour, "hr": time.Hour, "hour": time.Hour, "hours": time.Hour,
	"d": day, "day": day, "days": day,
	"w": 7 * day, "week": 7 * day, "weeks": 7 * day,
}

const durationHelp = "e.g. 90s, 500ms, 1h30m, 2h 30min or 7d; units ns, us, ms, s, min (m), h, d, w; a plain number is seconds"

// ParseDuration reads a duration in Go's or systemd's form (see
// durationUnits): a sequence of numbers with units, spaces allowed between
// them ("1h30m", "2h 30min", "1.5s"), or a plain number of seconds ("1",
// "0.5"). Fractions are exact to the nanosecond. A negative duration, one
// without a number, an unknown unit and one above 290 years are refused,
// saying what to write.
func ParseDuration(s string) (time.Duration, error) {
	in, err := asWritten(s)
	if err != nil {
		return 0, err
	}
	if in == "" {
		return 0, errors.New("empty duration; write " + durationHelp)
	}
	if strings.HasPrefix(in, "-") {
		return 0, errors.New("a duration cannot be negative")
	}
	if isDecimal(in) {
		return durationOf(in, time.Second)
	}
	var total uint64
	for rest := in; rest != ""; {
		rest = strings.TrimLeft(rest, " ")
		i := 0
		for i < len(rest) && (rest[i] >= '0' && rest[i] <= '9' || rest[i] == '.') {
			i++
		}
		num := rest[:i]
		if num == "" {
			return 0, errors.New("not a duration; write " + durationHelp)
		}
		rest = strings.TrimLeft(rest[i:], " ")
		j := 0
		for j < len(rest) && !(rest[j] >= '0' && rest[j] <= '9' || rest[j] == '.' || rest[j] == ' ') {
			j++
		}
		unit := rest[:j]
		rest = rest[j:]
		if unit == "" {
			return 0, fmt.Errorf("%s has no unit; write %ss, or %s", num, num, durationHelp)
		}
		per, ok := durationUnits[unit]
		if !ok {
			per, ok = durationUnits[strings.ToLower(unit)]
		}
		if !ok {
			return 0, fmt.Errorf("unknown unit %q; write %s", Clip(unit), durationHelp)
		}
		d, err := durationOf(num, per)
		if err != nil {
			return 0, err
		}
		if total += uint64(d); total > math.MaxInt64 {
			return 0, errTooLong
		}
	}
	return time.Duration(total), nil
}

// isDecimal reports whether s is a plain number ("1", "0.5").
func isDecimal(s string) bool {
	_, err := strconv.ParseFloat(s, 64)
	return err == nil && strings.Trim(s, "0123456789.") == ""
}

// errTooLong is the refusal of a duration that does not fit.
var errTooLong = errors.New("too long a duration: at most 290 years")

// durationOf is num × per, exactly.
func durationOf(num string, per time.Duration) (time.Duration, error) {
	v, err := mulDecimal(num, uint64(per))
	if errors.Is(err, errTooLarge) || v > math.MaxInt64 {
		return 0, errTooLong
	}
	if err != nil {
		return 0, fmt.Errorf("%w; write %s", err, durationHelp)
	}
	return time.Duration(v), nil
}

// FormatSpan writes a duration the way ParseDuration reads it: whole days
// as "30d", otherwise the shortest of Go's form ("1h", "90s").
func FormatSpan(d time.Duration) string {
	if d >= day && d%day == 0 {
		return strconv.FormatInt(int64(d/day), 10) + "d"
	}
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
