package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"reflect"
	"sort"
)

// JSON: links, classes and rules use the same field names as the config
// file. Rates, DSCPs and port ranges are strings ("10mbit", "EF",
// "1000-2000"); on input, rates also accept numbers (bits/s) and DSCPs and
// ports numbers. Unset DSCP fields, prefixes and port ranges are omitted.
//
// Decoding is strict, as in the config file: a key that is not a field
// (compared exactly, case included) is an error naming the closest field,
// and a value of the wrong kind is an error naming the field and what it
// wants. Errors are Errors of *FieldError.

// UnmarshalJSON decodes a rule. It replaces the whole rule: absent fields
// are unset (DSCP and DSCPIn become NoDSCP, not CS0). Prefixes are parsed
// as in the config file (a bare address is a host; host bits set is an
// error).
func (r *Rule) UnmarshalJSON(b []byte) error {
	type plain Rule
	*r = NewRule("")
	return DecodeJSONObject(b, (*plain)(r), "rule", nil)
}

// jsonValueDecoders decode the JSON of value types whose own
// UnmarshalJSON (or lack of one) is not what the API takes: a prefix is
// parsed as in the config file (a bare address is a host; host bits set
// is an error), not as netip.Prefix's UnmarshalText would.
var jsonValueDecoders = map[reflect.Type]func(raw json.RawMessage, dst reflect.Value) error{
	prefixType: func(raw json.RawMessage, dst reflect.Value) error {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return errWant("a prefix string such as \"198.18.0.0/15\"")
		}
		p, err := ParsePrefix(s)
		if err != nil {
			return err
		}
		dst.Set(reflect.ValueOf(p))
		return nil
	},
	addrType: func(raw json.RawMessage, dst reflect.Value) error {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return errWant("an address string such as \"198.51.100.7\"")
		}
		a, err := ParseAddr(s)
		if err != nil {
			return err
		}
		dst.Set(reflect.ValueOf(a))
		return nil
	},
}

// Link has no UnmarshalJSON (api.LinkStatus embeds it, and would inherit
// it): decode a link strictly with DecodeJSONObject(b, &l, "link", nil).

// UnmarshalJSON decodes a class. It replaces the whole class: an absent
// dscp or priority is left as NoDSCP/NoPriority for FillDefaults (or
// Normalize, AddClass) to fill from the defaults.
func (c *Class) UnmarshalJSON(b []byte) error {
	type plain Class
	*c = NewClass("")
	return DecodeJSONObject(b, (*plain)(c), "class", nil)
}

// UnmarshalJSON decodes a whole policy as given (no built-in classes are
// merged in) and normalizes it.
func (p *Policy) UnmarshalJSON(b []byte) error {
	type plain Policy
	*p = Policy{}
	links := func(raw json.RawMessage) error {
		var items []json.RawMessage
		if err := json.Unmarshal(raw, &items); err != nil {
			return errWant("a list [...] of links")
		}
		var errs Errors
		for _, it := range items {
			var l Link
			errs = append(errs, AsErrors(DecodeJSONObject(it, &l, "link", nil))...)
			p.Links = append(p.Links, l)
		}
		return errs.err()
	}
	if err := DecodeJSONObject(b, (*plain)(p), "policy", map[string]func(json.RawMessage) error{"links": links}); err != nil {
		return err
	}
	p.Normalize()
	return nil
}

// errWant is a value of the wrong kind; the decoder adds field and value.
type errWant string

func (e errWant) Error() string { return "want " + string(e) }

// DecodeJSONObject decodes the JSON object b into the struct dst points to,
// strictly: every key must be the exact json name of one of dst's fields
// (an unknown key is reported with the closest valid name, see
// UnknownNameFix), each value must suit its field, and b must be one
// object (null, an array or a string is refused). custom decodes the
// fields whose JSON form differs from their Go type's. kind names the
// object in messages ("rule", "class", "run request"); when the object has
// a string "name", messages say `rule "web"`. All problems are returned
// together as Errors; the fields that decoded are set.
func DecodeJSONObject(b []byte, dst any, kind string, custom map[string]func(json.RawMessage) error) error {
	if isJSONNull(b) {
		return nil // the convention for json.Unmarshaler: null changes nothing
	}
	rv := reflect.ValueOf(dst).Elem()
	fields := fieldsOf(rv.Type(), "json")
	m, err := jsonObject(b, kind)
	if err != nil {
		return err
	}
	obj := kind
	if raw, ok := m["name"]; ok {
		var name string
		if json.Unmarshal(raw, &name) == nil && name != "" {
			obj = objectLabel(kind, name, 0)
		}
	}
	var errs Errors
	for _, k := range sortedNames(m) {
		raw := m[k]
		idx, known := fields.index[k]
		if !known {
			errs = append(errs, &FieldError{Object: obj, Reason: fmt.Sprintf("unknown field %q", Clip(k)), Fix: UnknownNameFix(k, fields.names)})
			continue
		}
		var err error
		fv := rv.FieldByIndex(idx)
		if f, ok := custom[k]; ok {
			err = f(raw)
		} else if dec, ok := jsonValueDecoders[fv.Type()]; ok {
			err = dec(raw, fv)
		} else {
			err = json.Unmarshal(raw, fv.Addr().Interface())
			err = describeJSONError(err, fv.Type())
		}
		if err == nil {
			continue
		}
		if es := AsErrors(err); es != nil {
			errs = append(errs, es...) // a nested object reported its own fields
			continue
		}
		fe := &FieldError{Object: obj, Field: k, Reason: err.Error()}
		var s string
		if json.Unmarshal(raw, &s) == nil {
			fe.Value = Clip(s)
		} else {
			fe.Value, fe.Literal = Clip(string(raw)), true
		}
		errs = append(errs, fe)
	}
	return errs.err()
}

// jsonObject splits b, which must be one JSON object, into its members.
func jsonObject(b []byte, kind string) (map[string]json.RawMessage, error) {
	if err := CheckJSONObject(b, kind); err != nil {
		return nil, err
	}
	m := map[string]json.RawMessage{}
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("decode %s: %w", kind, err) // a syntax error: names no Go type
	}
	return m, nil
}

// CheckJSONObject returns a FieldError when b is not a JSON object (null,
// an array, a string, a number, nothing): an API body must be one. kind
// names the object in the message.
func CheckJSONObject(b []byte, kind string) error {
	t := bytes.TrimSpace(b)
	if len(t) > 0 && t[0] == '{' {
		return nil
	}
	what := "nothing"
	if len(t) > 0 {
		what = jsonKindOf(t)
	}
	return Errors{{Object: kind, Reason: "want a JSON object {...}, got " + what, Fix: "send the " + kind + "'s fields as a JSON object"}}
}

func isJSONNull(b []byte) bool { return string(bytes.TrimSpace(b)) == "null" }

// jsonKindOf names the kind of a JSON value by its first byte.
func jsonKindOf(t []byte) string {
	switch t[0] {
	case 'n':
		return "null"
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case '{':
		return "an object"
	}
	return "a number"
}

// describeJSONError turns encoding/json's errors, which name Go types
// ("cannot unmarshal string into Go value of type int"), into what the
// field wants. Errors of the field's own UnmarshalJSON pass as they are.
func describeJSONError(err error, t reflect.Type) error {
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	if err == nil {
		return nil
	}
	if errors.As(err, &te) || errors.As(err, &se) {
		w := wantOf(t)
		if te != nil && te.Value != "" {
			return errWant(w + ", got " + te.Value)
		}
		return errWant(w)
	}
	return err
}

var (
	rateType   = reflect.TypeOf(Rate(0))
	sizeType   = reflect.TypeOf(Size(0))
	dscpType   = reflect.TypeOf(DSCP(0))
	portsType  = reflect.TypeOf(PortRange{})
	prefixType = reflect.TypeOf(netip.Prefix{})
	addrType   = reflect.TypeOf(netip.Addr{})
)

// wantOf describes, for users, the JSON a field of type t takes.
func wantOf(t reflect.Type) string {
	switch t {
	case rateType:
		return "a rate such as \"10mbit\" or a whole number of bits/s"
	case reflect.TypeOf(LinkRate(0)):
		return "\"auto\", a rate such as \"10mbit\" or a whole number of bits/s"
	case sizeType:
		return "a size such as \"64KiB\" or a whole number of bytes"
	case dscpType:
		return "a DSCP name such as \"EF\" or a number 0..63"
	case portsType:
		return "a port or range such as \"80\" or \"1000-2000\""
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "a whole number"
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a whole number >= 0"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "a list [...]"
	case reflect.Map, reflect.Struct:
		return "an object {...}"
	}
	return "another kind of value"
}

// sortedNames returns the keys of m in order.
func sortedNames[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
