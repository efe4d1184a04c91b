package policy

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"net/netip"
	"strconv"
	"strings"

	"github.com/hostqos/hostqos/internal/units"
)

// Units of rates and sizes: one convention everywhere.
//
// The SI prefixes k, M, G and T are powers of 1000, in rates and in sizes;
// the IEC prefixes Ki, Mi, Gi and Ti (sizes only) are powers of 1024. A rate
// counts bits ("20mbit", "20Mbit/s") or bytes ("2.5MB/s", the B upper
// case) per second; a size counts bytes ("64KiB", "64kB", "1500"). The
// spellings that have two readings are refused with both of them named:
// "mbps" is megabits per second in most tools but megabytes per second in
// tc(8); "Mb/s" mixes bits and bytes; a size "64kb" or "64k" was 65,536
// bytes in tc and in earlier hostqos but 64,000 under SI.

// bitUnits are the bit-rate units (case-insensitive, "/s" optional).
var bitUnits = []struct {
	suffix string
	mult   uint64 // bits per second per unit
}{
	{"bit", 1}, {"kbit", 1_000}, {"mbit", 1_000_000}, {"gbit", 1_000_000_000}, {"tbit", 1_000_000_000_000},
}

// siMult is the multiplier of an SI prefix letter (either case; "" is 1).
func siMult(prefix string) (uint64, bool) {
	switch strings.ToLower(prefix) {
	case "":
		return 1, true
	case "k":
		return 1_000, true
	case "m":
		return 1_000_000, true
	case "g":
		return 1_000_000_000, true
	case "t":
		return 1_000_000_000_000, true
	}
	return 0, false
}

const rateUnitHelp = "units: bit, kbit, mbit, gbit, tbit (bits/s; \"/s\" optional, e.g. 20Mbit/s) or B/s, kB/s, MB/s, GB/s, TB/s (bytes/s); k, M, G, T are powers of 1000"

// MaxRate is the highest rate any rate field takes (10tbit, units.MaxRate):
// ParseRate and the JSON decoding refuse more, so sums of rates stay far
// from wrapping.
const MaxRate Rate = units.MaxRate

// The refusal of a rate above MaxRate (the caller names the field and the
// value): why, and the fix.
var (
	rateTooHighReason = "above " + MaxRate.String() + ", the most a rate may be"
	rateTooHighFix    = "give the real rate, at most " + MaxRate.String()
	errRateTooHigh    = errors.New(rateTooHighReason + "; " + rateTooHighFix)
)

// ParseRate parses a rate: bits per second ("10mbit", "1.5Mbit/s",
// "128kbit", "500bit") or bytes per second ("2.5MB/s", "250kB/s", "B/s"
// with an upper-case B). Bit units are case-insensitive; k, M, G, T are
// powers of 1000. The spellings with two readings ("mbps", "Mbps", "kbps",
// "Mb/s", "10M", "10mb") are refused with an error naming both readings
// and what to write, and so is a number without a unit, except "0", which
// means "not set". Fractions are exact; a result that is not a whole
// number of bits per second is rounded to the nearest bit. A rate above
// MaxRate is refused.
func ParseRate(s string) (Rate, error) {
	in, err := asWritten(s)
	if err != nil {
		return 0, err
	}
	if in == "" {
		return 0, errors.New("empty rate; write e.g. 10mbit")
	}
	if in == "0" {
		return 0, nil
	}
	num, unit, err := splitQuantity(in, "rate", "a number and a unit, e.g. 10mbit ("+rateUnitHelp+")")
	if err != nil {
		return 0, err
	}
	if unit == "" {
		return 0, fmt.Errorf("%s has no unit; add one, e.g. %sbit, %skbit or %smbit (%s)", in, num, num, num, rateUnitHelp)
	}
	mult, err := rateMult(num, unit)
	if err != nil {
		return 0, err
	}
	v, err := mulDecimal(num, mult)
	if errors.Is(err, errTooLarge) || v > uint64(MaxRate) {
		return 0, errRateTooHigh
	}
	if err != nil {
		return 0, err
	}
	return Rate(v), nil
}

// rateMult is the bits per second of one unit (as written), or why the
// unit is refused.
func rateMult(num, unit string) (uint64, error) {
	lower := strings.ToLower(unit)
	bare := strings.TrimSuffix(lower, "/s")
	for _, u := range bitUnits {
		if bare == u.suffix {
			return u.mult, nil
		}
	}
	// Bytes per second: an SI prefix, then B (upper case), then /s.
	if p, ok := strings.CutSuffix(unit, "B/s"); ok {
		if m, ok := siMult(p); ok {
			return 8 * m, nil
		}
	}
	prefix := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(bare, "ps"), "b"), "it")
	mult, known := siMult(prefix)
	name := map[string]string{"": "", "k": "kilo", "m": "mega", "g": "giga", "t": "tera"}[strings.ToLower(prefix)]
	up := strings.ToUpper(prefix)
	if up == "K" {
		up = "k"
	}
	both := func(why string) error {
		bits, bytes := num+strings.ToLower(prefix)+"bit", num+up+"B/s"
		equal := ""
		if v, err := mulDecimal(num, units.Mul(mult, 8)); err == nil && v <= uint64(MaxRate) {
			equal = fmt.Sprintf(" (%s = %s)", bytes, Rate(v))
		}
		return fmt.Errorf("%s%s is ambiguous: %s; write %s for %sbits per second or %s for %sbytes per second%s",
			num, unit, why, bits, name, bytes, name, equal)
	}
	switch {
	case !known:
	case strings.HasSuffix(lower, "bps"):
		return 0, both("most tools read it as " + name + "bits per second, tc(8) as " + name + "bytes per second")
	case strings.HasSuffix(unit, "B"):
		return 0, fmt.Errorf("%s%s is a size, not a rate; write %s%sB/s for %sbytes per second or %s%sbit for %sbits per second", num, unit, num, up, name, num, strings.ToLower(prefix), name)
	case bare == strings.ToLower(prefix) || bare == strings.ToLower(prefix)+"b":
		return 0, both("it may mean " + name + "bits or " + name + "bytes per second")
	}
	if strings.Contains(lower, "ib") {
		return 0, fmt.Errorf("unknown rate unit %q: rates count in powers of 1000; write e.g. %sMB/s (bytes/s) or %smbit (%s)", unit, num, num, rateUnitHelp)
	}
	if strings.HasSuffix(bare, "bits") {
		return 0, fmt.Errorf("unknown rate unit %q; write %s%s (%s)", unit, num, strings.TrimSuffix(bare, "s"), rateUnitHelp)
	}
	return 0, fmt.Errorf("unknown rate unit %q (%s)", unit, rateUnitHelp)
}

// errTooLarge: a quantity does not fit in 64 bits.
var errTooLarge = errors.New("too large")

// splitQuantity splits "1.5 Mbit" into its number ("1.5") and its unit as
// written ("Mbit"). Without a leading number it says why, naming what
// (a rate, a size) and what to write instead.
func splitQuantity(in, what, write string) (num, unit string, err error) {
	i := 0
	for i < len(in) && (in[i] >= '0' && in[i] <= '9' || in[i] == '.') {
		i++
	}
	num, unit = in[:i], strings.TrimSpace(in[i:])
	if num == "" {
		if strings.HasPrefix(in, "-") {
			return "", "", fmt.Errorf("a %s cannot be negative", what)
		}
		return "", "", fmt.Errorf("not a %s; write %s", what, write)
	}
	return num, unit, nil
}

// mulDecimal computes round(dec × mult) exactly for a decimal string with
// at most one '.', without floating point.
func mulDecimal(dec string, mult uint64) (uint64, error) {
	whole, frac, hasDot := strings.Cut(dec, ".")
	if strings.Contains(frac, ".") || (hasDot && whole == "" && frac == "") {
		return 0, fmt.Errorf("%q is not a number", dec)
	}
	if whole == "" {
		whole = "0"
	}
	w, err := strconv.ParseUint(whole, 10, 64)
	if err != nil {
		return 0, errTooLarge
	}
	if w != 0 && w > math.MaxUint64/mult {
		return 0, errTooLarge
	}
	total := w * mult
	// Fraction: digits d1 d2 ... ; value = mult × 0.d1d2... ; compute with
	// at most 19 significant digits (mult ≤ 8e12 so 1e19-scale is plenty).
	if frac != "" {
		if len(frac) > 18 {
			frac = frac[:18]
		}
		f, err := strconv.ParseUint(frac, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%q is not a number", dec)
		}
		scale := uint64(math.Pow10(len(frac)))
		// mult × f / scale with rounding, avoiding overflow by splitting.
		q, r := mult/scale, mult%scale
		part := q * f
		// r, f < scale ≤ 1e18, so r×f fits 128 bits and its high word is
		// below scale, as bits.Div64 requires.
		hi, lo := bits.Mul64(r, f)
		quo, rem := bits.Div64(hi, lo, scale)
		part += quo
		if rem*2 >= scale {
			part++
		}
		if total > math.MaxUint64-part {
			return 0, errTooLarge
		}
		total += part
	}
	return total, nil
}

// String formats the rate with the largest bit unit that keeps it exact to
// the bit: "10mbit", "1.5mbit", "128kbit", "500bit". Zero is "0".
func (r Rate) String() string { return units.ExactRate(uint64(r)) }

// MarshalText writes the rate as String does.
func (r Rate) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// UnmarshalText parses a rate as ParseRate does; "" means not set.
func (r *Rate) UnmarshalText(b []byte) error { return unmarshalUnitText(b, r, ParseRate) }

// MarshalJSON writes the rate as a string, e.g. "10mbit".
func (r Rate) MarshalJSON() ([]byte, error) { return json.Marshal(r.String()) }

// UnmarshalJSON accepts a string with a unit ("10mbit") or a JSON number
// meaning bits per second (10000000).
func (r *Rate) UnmarshalJSON(b []byte) error {
	return unmarshalUnitJSON(b, r, ParseRate, func(v uint64) (Rate, error) {
		if v > uint64(MaxRate) {
			return 0, errRateTooHigh
		}
		return Rate(v), nil
	}, "rate %s: want a whole number of bits per second or a string like \"10mbit\"")
}

// unmarshalUnitText parses text with parse into *dst; empty text is 0.
func unmarshalUnitText[T ~uint64](b []byte, dst *T, parse func(string) (T, error)) error {
	if len(b) == 0 {
		*dst = 0
		return nil
	}
	v, err := parse(string(b))
	if err != nil {
		return err
	}
	*dst = v
	return nil
}

// unmarshalUnitJSON decodes a quantity given as a JSON string (parsed with
// parse) or a JSON number in the base unit (checked by number); null
// leaves *dst alone. badNumber formats the error for a number that is not
// a whole one, with the raw JSON as its argument.
func unmarshalUnitJSON[T ~uint64](b []byte, dst *T, parse func(string) (T, error), number func(uint64) (T, error), badNumber string) error {
	if string(b) == "null" {
		return nil
	}
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		return unmarshalUnitText([]byte(s), dst, parse)
	}
	n, err := strconv.ParseUint(string(b), 10, 64)
	if err != nil {
		return fmt.Errorf(badNumber, b)
	}
	v, err := number(n)
	if err != nil {
		return err
	}
	*dst = v
	return nil
}

// dscpNames maps code point names to values. CS0 is the canonical name of
// 0; DF, BE and default are accepted aliases.
var dscpNames = map[string]DSCP{
	"CS0": 0, "CS1": 8, "CS2": 16, "CS3": 24, "CS4": 32, "CS5": 40, "CS6": 48, "CS7": 56,
	"AF11": 10, "AF12": 12, "AF13": 14,
	"AF21": 18, "AF22": 20, "AF23": 22,
	"AF31": 26, "AF32": 28, "AF33": 30,
	"AF41": 34, "AF42": 36, "AF43": 38,
	"EF": 46, "VA": 44, "LE": 1,
	"DF": 0, "BE": 0, "DEFAULT": 0,
}

// dscpCanonical is the name String prints for each named value.
var dscpCanonical = func() map[DSCP]string {
	m := map[DSCP]string{}
	for n, v := range dscpNames {
		switch n {
		case "DF", "BE", "DEFAULT":
			continue
		}
		m[v] = n
	}
	return m
}()

// ParseDSCP parses a DSCP name (EF, VA, LE, AF11..AF43, CS0..CS7, and
// DF/BE/default for 0; case-insensitive) or a number 0..63. "" is NoDSCP.
func ParseDSCP(s string) (DSCP, error) {
	in, err := asWritten(s)
	if err != nil {
		return NoDSCP, err
	}
	if in == "" {
		return NoDSCP, nil
	}
	if v, ok := dscpNames[strings.ToUpper(in)]; ok {
		return v, nil
	}
	n, err := strconv.ParseUint(in, 10, 8)
	if err == nil {
		if n > 63 {
			return NoDSCP, fmt.Errorf("DSCP %s out of range; want 0..63 or a name such as EF, AF41, CS1", in)
		}
		return DSCP(n), nil
	}
	return NoDSCP, fmt.Errorf("unknown DSCP %q; want 0..63 or a name: EF, VA, LE, AF11..AF43, CS0..CS7, DF", in)
}

// String gives the code point's name when it has one ("EF", "AF41",
// "CS0"), else its number; NoDSCP is "unset".
func (d DSCP) String() string {
	if d == NoDSCP {
		return "unset"
	}
	if n, ok := dscpCanonical[d]; ok {
		return n
	}
	return strconv.Itoa(int(d))
}

// IsZero reports whether d is unset (NoDSCP). encoding/json's omitzero
// uses it, so unset DSCP fields are omitted.
func (d DSCP) IsZero() bool { return d == NoDSCP }

// Valid reports whether d is a code point 0..63.
func (d DSCP) Valid() bool { return d >= 0 && d <= 63 }

// MarshalText writes the name (or number); NoDSCP is "".
func (d DSCP) MarshalText() ([]byte, error) {
	if d == NoDSCP {
		return nil, nil
	}
	return []byte(d.String()), nil
}

// UnmarshalText parses as ParseDSCP does.
func (d *DSCP) UnmarshalText(b []byte) error {
	v, err := ParseDSCP(string(b))
	if err != nil {
		return err
	}
	*d = v
	return nil
}

// MarshalJSON writes the name as a JSON string; NoDSCP is "".
func (d DSCP) MarshalJSON() ([]byte, error) {
	b, _ := d.MarshalText()
	return json.Marshal(string(b))
}

// UnmarshalJSON accepts a name, a numeric string, a number, "" or null
// (both unset).
func (d *DSCP) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*d = NoDSCP
		return nil
	}
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		return d.UnmarshalText([]byte(s))
	}
	return d.UnmarshalText(b)
}

// ParsePortRange parses "80" or "1000-2000" (inclusive). "" is the zero
// value, meaning any port.
func ParsePortRange(s string) (PortRange, error) {
	in, err := asWritten(s)
	if err != nil {
		return PortRange{}, err
	}
	if in == "" {
		return PortRange{}, nil
	}
	a, b, isRange := strings.Cut(in, "-")
	if !isRange && strings.Contains(in, ":") {
		return PortRange{}, fmt.Errorf("port range %q: write ranges as FROM-TO, e.g. 1000-2000", in)
	}
	from, err := parsePort(a)
	if err != nil {
		return PortRange{}, err
	}
	to := from
	if isRange {
		if to, err = parsePort(b); err != nil {
			return PortRange{}, err
		}
		if to < from {
			return PortRange{}, fmt.Errorf("port range %q is backwards; write %d-%d", in, to, from)
		}
	}
	return PortRange{From: from, To: to}, nil
}

func parsePort(s string) (uint16, error) {
	s = strings.TrimSpace(s)
	n, err := strconv.ParseUint(s, 10, 16)
	if err != nil {
		return 0, fmt.Errorf("%q is not a port number 1..65535 (write a port like 80 or a range like 1000-2000)", s)
	}
	if n == 0 {
		return 0, errors.New("port 0 is not a port; leave the field unset to match any port")
	}
	return uint16(n), nil
}

// IsZero reports whether the range is unset (any port).
func (p PortRange) IsZero() bool { return p.From == 0 && p.To == 0 }

// Contains reports whether port is in the range; the zero range contains
// every port.
func (p PortRange) Contains(port uint16) bool {
	return p.IsZero() || (port >= p.From && port <= p.To)
}

// String gives "80", "1000-2000", or "" for any port.
func (p PortRange) String() string {
	switch {
	case p.IsZero():
		return ""
	case p.From == p.To:
		return strconv.Itoa(int(p.From))
	default:
		return strconv.Itoa(int(p.From)) + "-" + strconv.Itoa(int(p.To))
	}
}

// MarshalText writes String's form.
func (p PortRange) MarshalText() ([]byte, error) { return []byte(p.String()), nil }

// UnmarshalText parses as ParsePortRange does.
func (p *PortRange) UnmarshalText(b []byte) error {
	v, err := ParsePortRange(string(b))
	if err != nil {
		return err
	}
	*p = v
	return nil
}

// MarshalJSON writes the range as a string ("80", "1000-2000").
func (p PortRange) MarshalJSON() ([]byte, error) { return json.Marshal(p.String()) }

// UnmarshalJSON accepts a string ("80", "1000-2000") or a number (80).
func (p *PortRange) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*p = PortRange{}
		return nil
	}
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		return p.UnmarshalText([]byte(s))
	}
	return p.UnmarshalText(b)
}

const prefixHelp = "want e.g. 198.18.0.0/15 or 2001:db8::/32"

// asWritten returns s when no white space surrounds it, else an error
// saying how to write it. Every value (rate, size, DSCP, ports, prefix) is
// taken exactly as written — a space between a number and its unit is
// fine — so that what is stored, shown and named later (in a removal, a
// path) is what was typed, and a stray space from a script is noticed.
func asWritten(s string) (string, error) {
	t := strings.TrimSpace(s)
	switch {
	case t == s:
		return s, nil
	case t == "":
		return "", errors.New("is only spaces; write a value, or leave it out")
	}
	return "", fmt.Errorf("has spaces around it; write %q", t)
}

// ParsePrefix parses a CIDR prefix ("198.18.0.0/15", "2001:db8::/32"); a
// bare address means a single host (/32 or /128). A prefix with host bits
// set is rejected with the canonical form suggested, because it usually
// means a typo in the address or the length. "" is the zero (unset) prefix.
func ParsePrefix(s string) (netip.Prefix, error) {
	in, err := asWritten(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	if in == "" {
		return netip.Prefix{}, nil
	}
	var p netip.Prefix
	if strings.Contains(in, "/") {
		var err error
		if p, err = netip.ParsePrefix(in); err != nil {
			return netip.Prefix{}, fmt.Errorf("not a valid CIDR prefix (%s)", prefixHelp)
		}
	} else {
		a, err := netip.ParseAddr(in)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("not a valid address or CIDR prefix (%s)", prefixHelp)
		}
		if a.Zone() != "" {
			return netip.Prefix{}, errors.New("addresses with a zone (%iface) are not supported; drop the zone")
		}
		p = netip.PrefixFrom(a, a.BitLen())
	}
	return p, checkPrefix(p)
}

// ParseAddr parses one IP address ("198.51.100.7", "2001:db8::7"),
// without a zone. "" is the zero (unset) address.
func ParseAddr(s string) (netip.Addr, error) {
	in, err := asWritten(s)
	if err != nil || in == "" {
		return netip.Addr{}, err
	}
	a, err := netip.ParseAddr(in)
	if err != nil {
		return netip.Addr{}, errors.New("not a valid IP address (want e.g. 198.51.100.7 or 2001:db8::7)")
	}
	if a.Zone() != "" {
		return netip.Addr{}, errors.New("addresses with a zone (%iface) are not supported; drop the zone")
	}
	return a, nil
}

// checkPrefix reports problems with a parsed prefix: host bits set or an
// IPv4-mapped IPv6 address.
func checkPrefix(p netip.Prefix) error {
	if !p.IsValid() {
		return nil
	}
	if p.Addr().Is4In6() {
		un := netip.PrefixFrom(p.Addr().Unmap(), max(p.Bits()-96, 0)).Masked()
		return fmt.Errorf("IPv4-mapped IPv6 prefixes never match; did you mean %s?", un)
	}
	if m := p.Masked(); m != p {
		return fmt.Errorf("%s has host bits set; did you mean %s?", p, m)
	}
	return nil
}
