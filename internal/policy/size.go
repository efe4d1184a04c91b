package policy

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Size is an amount of bytes, e.g. a policer's burst. Zero means "not set".
type Size uint64

// Sizes count bytes with the convention of units.go: the SI units kB, MB,
// GB and TB are powers of 1000, the IEC units KiB, MiB, GiB and TiB powers
// of 1024. "64kb", "64k" (65,536 bytes in tc(8) and in earlier hostqos,
// 64,000 under SI) and the like are refused as ambiguous.

// iecUnits are the binary size units (case-insensitive), largest first.
var iecUnits = []struct {
	suffix string
	mult   uint64
}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}}

// siUnits are the decimal size units (the prefix in either case, B upper
// case), largest first.
var siUnits = []struct {
	suffix string
	mult   uint64
}{{"TB", 1e12}, {"GB", 1e9}, {"MB", 1e6}, {"kB", 1e3}}

const sizeUnitHelp = "units: B (bytes; a plain number is bytes too), KiB, MiB, GiB, TiB (powers of 1024) or kB, MB, GB, TB (powers of 1000)"

// maxSize bounds sizes so that byte arithmetic downstream (bits, ns at a
// rate) cannot overflow.
const maxSize = 1 << 40

// ParseSize parses a byte size such as "1500", "1500B", "64KiB", "1.5MiB",
// "64kB" or "4GB": a plain number counts bytes; KiB, MiB, GiB and TiB
// (case-insensitive) are powers of 1024; kB, MB, GB and TB (B upper case)
// powers of 1000. The spellings with two readings ("64kb", "64k", "10mb")
// are refused with both readings named. Fractions are rounded to the
// nearest byte.
func ParseSize(s string) (Size, error) { return parseSize(s, false) }

// parseSize is ParseSize; legacy reads the spellings of earlier versions
// ("64kb", "64k", "10mb": powers of 1024, as tc(8) reads them) as they
// were read then, instead of refusing them.
func parseSize(s string, legacy bool) (Size, error) {
	in, err := asWritten(s)
	if err != nil {
		return 0, err
	}
	if in == "" {
		return 0, errors.New("empty size; write e.g. 64KiB")
	}
	num, unit, err := splitQuantity(in, "size", "a number and optionally a unit, e.g. 64KiB ("+sizeUnitHelp+")")
	if err != nil {
		return 0, err
	}
	mult, err := sizeMult(num, unit, legacy)
	if err != nil {
		return 0, err
	}
	v, err := mulDecimal(num, mult)
	if err != nil && strings.Contains(err.Error(), "not a number") {
		return 0, err
	}
	if err != nil || v > maxSize {
		return 0, fmt.Errorf("size %s too large: at most 1TiB", in)
	}
	return Size(v), nil
}

// sizeMult is the bytes of one unit (as written), or why the unit is
// refused.
func sizeMult(num, unit string, legacy bool) (uint64, error) {
	if unit == "" || unit == "B" || unit == "b" {
		return 1, nil
	}
	lower := strings.ToLower(unit)
	for _, u := range iecUnits {
		if lower == strings.ToLower(u.suffix) {
			return u.mult, nil
		}
	}
	for _, u := range siUnits {
		if strings.EqualFold(unit[:len(unit)-1], u.suffix[:1]) && strings.HasSuffix(unit, "B") && len(unit) == 2 {
			return u.mult, nil
		}
	}
	if strings.Contains(lower, "bit") || strings.Contains(lower, "ps") || strings.Contains(lower, "/s") {
		return 0, fmt.Errorf("unknown size unit %q: that is a rate unit, a size counts bytes (%s)", unit, sizeUnitHelp)
	}
	prefix := strings.TrimSuffix(lower, "b")
	for i, p := range []string{"k", "m", "g", "t"} {
		if prefix != p {
			continue
		}
		iec, si := iecUnits[3-i], siUnits[3-i]
		if legacy {
			return iec.mult, nil
		}
		return 0, fmt.Errorf("%s%s is ambiguous: %s%s (%s bytes, as tc and earlier hostqos read it) or %s%s (%s bytes); write one of them",
			num, unit, num, iec.suffix, times(num, iec.mult), num, si.suffix, times(num, si.mult))
	}
	return 0, fmt.Errorf("unknown size unit %q (%s)", unit, sizeUnitHelp)
}

// times writes num × mult in full ("65,536"), or "num × mult" when it
// does not fit.
func times(num string, mult uint64) string {
	v, err := mulDecimal(num, mult)
	if err != nil {
		return num + " × " + strconv.FormatUint(mult, 10)
	}
	d := strconv.FormatUint(v, 10)
	var b strings.Builder
	for i, c := range d {
		if i > 0 && (len(d)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// String formats the size with the largest unit that keeps it exact:
// "64KiB", "4GiB", "4GB", "64kB", "1500B". Zero is "0".
func (s Size) String() string {
	if s == 0 {
		return "0"
	}
	v := uint64(s)
	best, suffix := uint64(1), "B"
	for _, u := range append(iecUnits[:len(iecUnits):len(iecUnits)], siUnits...) {
		if u.mult > best && v%u.mult == 0 {
			best, suffix = u.mult, u.suffix
		}
	}
	return strconv.FormatUint(v/best, 10) + suffix
}

// MarshalText writes the size as String does.
func (s Size) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText parses a size as ParseSize does; "" means not set.
func (s *Size) UnmarshalText(b []byte) error { return unmarshalUnitText(b, s, ParseSize) }

// MarshalJSON writes the size as a string, e.g. "64KiB".
func (s Size) MarshalJSON() ([]byte, error) { return json.Marshal(s.String()) }

// UnmarshalJSON accepts a string ("64KiB") or a JSON number of bytes. It
// also reads the spellings of earlier versions ("64kb", "10mb": powers of
// 1024) as they were read then: the state files and API clients written
// before keep their meaning.
func (s *Size) UnmarshalJSON(b []byte) error {
	return unmarshalUnitJSON(b, s, func(v string) (Size, error) { return parseSize(v, true) }, func(v uint64) (Size, error) {
		if v > maxSize {
			return 0, fmt.Errorf("size %d: at most 1TiB", v)
		}
		return Size(v), nil
	}, "size %s: want a whole number of bytes or a string like \"64KiB\"")
}
