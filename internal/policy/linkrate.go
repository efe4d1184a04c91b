package policy

import (
	"encoding/json"
	"fmt"
	"strings"
)

// LinkRate is a link's egress_rate or ingress_rate: a rate as Rate, or
// RateAuto — the daemon finds the link's capacity and keeps the rate just
// below it (docs/autorate.md), within the link's min and max.
type LinkRate uint64

// RateAuto is the LinkRate "auto". It is above every real rate (MaxRate),
// so "> 0" still means "set".
const RateAuto LinkRate = 1<<64 - 1

// Bounds of an auto rate when the link leaves them out.
const (
	DefaultAutoMin Rate = 1_000_000
	DefaultAutoMax Rate = 1_000_000_000
)

// Auto reports whether the rate is "auto".
func (r LinkRate) Auto() bool { return r == RateAuto }

// String writes the rate as Rate does, or "auto".
func (r LinkRate) String() string {
	if r.Auto() {
		return "auto"
	}
	return Rate(r).String()
}

// ParseLinkRate parses "auto" or a rate as ParseRate does.
func ParseLinkRate(s string) (LinkRate, error) {
	if strings.EqualFold(strings.TrimSpace(s), "auto") {
		return RateAuto, nil
	}
	r, err := ParseRate(s)
	return LinkRate(r), err
}

// MarshalText writes the rate as String does.
func (r LinkRate) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// UnmarshalText parses "auto" or a rate; "" means not set.
func (r *LinkRate) UnmarshalText(b []byte) error { return unmarshalUnitText(b, r, ParseLinkRate) }

// MarshalJSON writes the rate as a string, e.g. "10mbit" or "auto".
func (r LinkRate) MarshalJSON() ([]byte, error) { return json.Marshal(r.String()) }

// UnmarshalJSON accepts "auto", a string with a unit ("10mbit") or a JSON
// number meaning bits per second.
func (r *LinkRate) UnmarshalJSON(b []byte) error {
	return unmarshalUnitJSON(b, r, ParseLinkRate, func(v uint64) (LinkRate, error) {
		if v > uint64(MaxRate) {
			return 0, errRateTooHigh
		}
		return LinkRate(v), nil
	}, `rate %s: want "auto", a whole number of bits per second or a string like "10mbit"`)
}

// AutoBounds are the bounds of an auto rate: min and max, or their
// defaults where unset.
func AutoBounds(min, max Rate) (Rate, Rate) {
	if min == 0 {
		min = DefaultAutoMin
	}
	if max == 0 {
		max = DefaultAutoMax
	}
	return min, max
}

// EgressFloor is the egress rate the link is sure to have: its egress
// rate, or for "auto" its minimum. Admission counts on this much.
func (l Link) EgressFloor() Rate {
	if l.EgressRate.Auto() {
		lo, _ := AutoBounds(l.EgressMin, l.EgressMax)
		return lo
	}
	return Rate(l.EgressRate)
}

// IngressFloor is IngressRate, or for "auto" its minimum.
func (l Link) IngressFloor() Rate {
	if l.IngressRate.Auto() {
		lo, _ := AutoBounds(l.IngressMin, l.IngressMax)
		return lo
	}
	return Rate(l.IngressRate)
}

// autoBounds checks a direction's min and max (field names prefix_min,
// prefix_max): they need the direction's rate to be "auto", and
// MinRate <= min <= max.
func (v *validator) autoBounds(obj, prefix string, rate LinkRate, min, max Rate) {
	if !rate.Auto() {
		for _, f := range []struct {
			name string
			r    Rate
		}{{prefix + "_min", min}, {prefix + "_max", max}} {
			if f.r != 0 {
				v.add(obj, f.name, f.r.String(), fmt.Sprintf("a bound of an automatic %s_rate, but %s_rate is %s", prefix, prefix, rate),
					fmt.Sprintf(`set %s_rate = "auto" (--%s-rate auto), or leave %s out`, prefix, prefix, f.name))
			}
		}
		return
	}
	lo, hi := AutoBounds(min, max)
	if lo < 8000 || lo > MaxRate {
		v.add(obj, prefix+"_min", lo.String(), fmt.Sprintf("must be 8kbit .. %s", MaxRate), "e.g. 1mbit")
	}
	if hi > MaxRate {
		v.add(obj, prefix+"_max", hi.String(), fmt.Sprintf("must be at most %s", MaxRate), "e.g. 100mbit")
	}
	if lo > hi {
		v.add(obj, prefix+"_min", lo.String(), fmt.Sprintf("above %s_max %s", prefix, hi),
			fmt.Sprintf("lower %s_min or raise %s_max (defaults %s and %s)", prefix, prefix, DefaultAutoMin, DefaultAutoMax))
	}
}
