package policy

import (
	"encoding/json"
	"net/netip"
)

// JSON: links, classes and rules use the same field names as the config
// file. Rates, DSCPs and port ranges are strings ("10mbit", "EF",
// "1000-2000"); on input, rates also accept numbers (bits/s) and DSCPs and
// ports numbers. Unset DSCP fields, prefixes and port ranges are omitted.

// UnmarshalJSON decodes a rule. It replaces the whole rule: absent fields
// are unset (DSCP and DSCPIn become NoDSCP, not CS0). Prefixes are parsed
// as in the config file (a bare address is a host; host bits set is an
// error), and errors are *FieldError naming the rule and field.
func (r *Rule) UnmarshalJSON(b []byte) error {
	type plain Rule
	aux := struct {
		*plain
		Local  string `json:"local"`
		Remote string `json:"remote"`
	}{plain: (*plain)(r)}
	*r = NewRule("")
	if err := json.Unmarshal(b, &aux); err != nil {
		return err
	}
	for _, f := range []struct {
		name string
		s    string
		dst  *netip.Prefix
	}{{"local", aux.Local, &r.Local}, {"remote", aux.Remote, &r.Remote}} {
		p, err := ParsePrefix(f.s)
		if err != nil {
			return &FieldError{Source: "api", Object: objectLabel("rule", r.Name, 0), Field: f.name, Value: f.s, Reason: err.Error()}
		}
		*f.dst = p
	}
	return nil
}

// UnmarshalJSON decodes a class. It replaces the whole class: an absent
// dscp or priority is left as NoDSCP/NoPriority for Normalize (or
// AddClass) to fill from the defaults.
func (c *Class) UnmarshalJSON(b []byte) error {
	type plain Class
	*c = Class{DSCP: NoDSCP, Priority: NoPriority}
	return json.Unmarshal(b, (*plain)(c))
}

// UnmarshalJSON decodes a whole policy as given (no built-in classes are
// merged in) and normalizes it.
func (p *Policy) UnmarshalJSON(b []byte) error {
	type plain Policy
	*p = Policy{}
	if err := json.Unmarshal(b, (*plain)(p)); err != nil {
		return err
	}
	p.Normalize()
	return nil
}
