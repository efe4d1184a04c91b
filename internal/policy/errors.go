package policy

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"
)

// FieldError is one precise problem with a policy: where it came from, which
// object and field, the offending value, why it is wrong and how to fix it.
//
// Error() reads like
//
//	/etc/hostqos/hostqos.toml:12: rule "web": field remote = "10.0.0.300/8": not a valid CIDR prefix (want e.g. 198.18.0.0/15 or 2001:db8::/32)
type FieldError struct {
	Source string // file path or "api"; "" when unknown
	Line   int    // 1-based line in Source; 0 when unknown (API input)
	Object string // e.g. `rule "web"`, `class "voice"`, `link "eth0"`; "" for the whole file
	Field  string // e.g. "remote"; "" when the problem is the object as a whole
	Value  string // the offending value ("" when not applicable); printed quoted
	// Literal prints Value as it is, without quotes: for numbers and booleans.
	Literal bool
	Reason  string // why it is wrong
	Fix     string // how to fix it; optional
}

func (e *FieldError) Error() string {
	var b strings.Builder
	if e.Source != "" {
		b.WriteString(e.Source)
		if e.Line > 0 {
			b.WriteString(":" + strconv.Itoa(e.Line))
		}
		b.WriteString(": ")
	} else if e.Line > 0 {
		b.WriteString("line " + strconv.Itoa(e.Line) + ": ")
	}
	if e.Object != "" {
		b.WriteString(e.Object + ": ")
	}
	if e.Field != "" {
		b.WriteString("field " + e.Field)
		if e.Value != "" {
			if e.Literal {
				b.WriteString(" = " + e.Value)
			} else {
				b.WriteString(" = " + strconv.Quote(e.Value))
			}
		}
		b.WriteString(": ")
	}
	b.WriteString(e.Reason)
	if e.Fix != "" {
		b.WriteString("; " + e.Fix)
	}
	return b.String()
}

// Errors is every problem found in one policy, reported together so a user
// can fix them all in one go. Error() gives one problem per line.
type Errors []*FieldError

func (es Errors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// Unwrap lets errors.As find each *FieldError.
func (es Errors) Unwrap() []error {
	out := make([]error, len(es))
	for i, e := range es {
		out[i] = e
	}
	return out
}

// err returns es as an error, or nil when empty.
func (es Errors) err() error {
	if len(es) == 0 {
		return nil
	}
	return es
}

// sortByLine orders errors by source line (unknown lines last), keeping the
// original order otherwise.
func (es Errors) sortByLine() {
	sort.SliceStable(es, func(i, j int) bool {
		li, lj := es[i].Line, es[j].Line
		if li == 0 || lj == 0 {
			return li != 0 && lj == 0
		}
		return li < lj
	})
}

// AsErrors flattens err into its FieldErrors: an Errors value, a single
// *FieldError, or anything wrapping them. Other errors yield nil.
func AsErrors(err error) Errors {
	var es Errors
	if errors.As(err, &es) {
		return es
	}
	var fe *FieldError
	if errors.As(err, &fe) {
		return Errors{fe}
	}
	return nil
}

// objectLabel names an object in messages: `rule "web"`, or `rule #3` when
// it has no name (idx is 0-based).
func objectLabel(kind, name string, idx int) string {
	if name == "" {
		return fmt.Sprintf("%s #%d", kind, idx+1)
	}
	return kind + " " + strconv.Quote(Clip(name)) // as %q, without fmt: once per object on every validation
}

// MaxEcho is how much of a value an error message repeats; see Clip.
const MaxEcho = 64

// Clip shortens a value echoed in a message: the first MaxEcho bytes (cut
// at a character boundary) and the full length, e.g.
// "/very/long…… (5000 bytes)". Messages never repeat an unbounded value.
func Clip(s string) string {
	if len(s) <= MaxEcho {
		return s
	}
	n := MaxEcho
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return fmt.Sprintf("%s… (%d bytes)", s[:n], len(s))
}

// UnknownNameFix is the hint for an unknown key or field name: "did you
// mean maxbw?" (ClosestName), else the list of valid names. Every decoder
// (config file, JSON) uses it.
func UnknownNameFix(key string, known []string) string {
	if best := ClosestName(key, known); best != "" {
		return "did you mean " + best + "?"
	}
	return "known keys: " + strings.Join(known, ", ")
}

// ClosestName is the name of known a mistyped key most likely meant: the
// closest by edit distance when one is close (at most 2 edits), else one
// that starts with key ("egress" for egress_rate), else "". The CLI's "did
// you mean" for flags uses it too.
func ClosestName(key string, known []string) string {
	best, bestD := "", 3
	lk := strings.ToLower(key)
	for _, k := range known {
		if len(lk) > len(k)+bestD {
			continue // too far apart anyway; keeps a huge key cheap
		}
		if d := editDistance(lk, k); d < bestD {
			best, bestD = k, d
		}
	}
	if best == "" && len(lk) >= 3 {
		for _, k := range known { // a shortened name: "egress" for egress_rate
			if strings.HasPrefix(k, lk) {
				best = k
				break
			}
		}
	}
	return best
}
