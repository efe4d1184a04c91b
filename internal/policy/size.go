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

// Size units, as in tc(8): k and m are powers of 1024 ("64kb" = 65536
// bytes). Suffixes are case-insensitive.
var sizeUnits = []struct {
	suffix string
	mult   uint64
}{
	// Longest suffixes first.
	{"kib", 1 << 10}, {"mib", 1 << 20}, {"gib", 1 << 30},
	{"kb", 1 << 10}, {"mb", 1 << 20}, {"gb", 1 << 30},
	{"k", 1 << 10}, {"m", 1 << 20}, {"g", 1 << 30},
	{"b", 1},
}

const sizeUnitHelp = "units: b (bytes), kb or k (1024 bytes), mb or m (1024² bytes), gb or g; a plain number is bytes"

// maxSize bounds sizes so that byte arithmetic downstream (bits, ns at a
// rate) cannot overflow.
const maxSize = 1 << 40

// ParseSize parses a byte size such as "1500", "1500b", "64kb", "64k",
// "1.5mb" or "64kib". A plain number counts bytes. Fractions are rounded
// to the nearest byte.
func ParseSize(s string) (Size, error) {
	in, err := asWritten(s)
	if err != nil {
		return 0, err
	}
	if in == "" {
		return 0, errors.New("empty size; write e.g. 64kb")
	}
	num, unit, err := splitQuantity(in, "size", "a number and optionally a unit, e.g. 64kb ("+sizeUnitHelp+")")
	if err != nil {
		return 0, err
	}
	mult := uint64(0)
	if unit == "" {
		mult = 1
	}
	for _, u := range sizeUnits {
		if unit == u.suffix {
			mult = u.mult
			break
		}
	}
	if mult == 0 {
		hint := ""
		if strings.Contains(unit, "bit") || strings.Contains(unit, "ps") {
			hint = "; that is a rate unit, a size counts bytes"
		}
		return 0, fmt.Errorf("unknown size unit %q%s (%s)", unit, hint, sizeUnitHelp)
	}
	v, err := mulDecimal(num, mult)
	if err != nil && strings.Contains(err.Error(), "not a number") {
		return 0, err
	}
	if err != nil || v > maxSize {
		return 0, fmt.Errorf("size %s too large: at most 1tb", in)
	}
	return Size(v), nil
}

// String formats the size with the largest unit that keeps it exact:
// "64kb", "1500b", "1mb". Zero is "0".
func (s Size) String() string {
	if s == 0 {
		return "0"
	}
	v := uint64(s)
	for _, u := range []struct {
		s string
		m uint64
	}{{"gb", 1 << 30}, {"mb", 1 << 20}, {"kb", 1 << 10}} {
		if v >= u.m && v%u.m == 0 {
			return strconv.FormatUint(v/u.m, 10) + u.s
		}
	}
	return strconv.FormatUint(v, 10) + "b"
}

// MarshalText writes the size as String does.
func (s Size) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText parses a size as ParseSize does; "" means not set.
func (s *Size) UnmarshalText(b []byte) error { return unmarshalUnitText(b, s, ParseSize) }

// MarshalJSON writes the size as a string, e.g. "64kb".
func (s Size) MarshalJSON() ([]byte, error) { return json.Marshal(s.String()) }

// UnmarshalJSON accepts a string ("64kb") or a JSON number of bytes.
func (s *Size) UnmarshalJSON(b []byte) error {
	return unmarshalUnitJSON(b, s, ParseSize, func(v uint64) (Size, error) {
		if v > maxSize {
			return 0, fmt.Errorf("size %d: at most 1tb", v)
		}
		return Size(v), nil
	}, "size %s: want a whole number of bytes or a string like \"64kb\"")
}
