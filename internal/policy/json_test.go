package policy

import (
	"encoding/json"
	"errors"
	"net/netip"
	"reflect"
	"strings"
	"testing"
)

func TestRuleJSON(t *testing.T) {
	r := NewRule("web")
	r.Exe, r.Proto, r.Remote, r.RPort, r.MaxBW = "/usr/bin/curl", "tcp", netip.MustParsePrefix("198.18.0.0/15"), PortRange{80, 80}, 10_000_000
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"name":"web","exe":"/usr/bin/curl","proto":"tcp","remote":"198.18.0.0/15","rport":"80","maxbw":"10mbit"}`
	if string(b) != want {
		t.Errorf("marshal:\n got %s\nwant %s", b, want)
	}
	var back Rule
	if err := json.Unmarshal(b, &back); err != nil || !reflect.DeepEqual(back, r) {
		t.Errorf("unmarshal = %+v, %v", back, err)
	}
	r.DSCP, r.DSCPIn = 46, 0
	b, _ = json.Marshal(r)
	if !strings.Contains(string(b), `"dscp_in":"CS0"`) || !strings.Contains(string(b), `"dscp":"EF"`) {
		t.Errorf("marshal with DSCP: %s", b)
	}

	// Input: numbers, bare addresses, and errors naming rule and field.
	in := `{"name":"x","local":"198.18.0.1","lport":8080,"proto":"udp","minbw":64000,"dscp":34}`
	var x Rule
	if err := json.Unmarshal([]byte(in), &x); err != nil {
		t.Fatal(err)
	}
	if x.Local != netip.MustParsePrefix("198.18.0.1/32") || x.LPort != (PortRange{8080, 8080}) || x.MinBW != 64000 || x.DSCP != 34 || x.DSCPIn != NoDSCP {
		t.Errorf("unmarshal = %+v", x)
	}
	err = json.Unmarshal([]byte(`{"name":"y","remote":"198.18.0.1/15"}`), &x)
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Field != "remote" || fe.Object != `rule "y"` || !strings.Contains(err.Error(), "did you mean 198.18.0.0/15?") {
		t.Errorf("bad prefix: %v", err)
	}
}

func TestPolicyJSON(t *testing.T) {
	p, err := Load([]byte(goodConfig), "a.toml")
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{`"egress_rate":"20mbit"`, `"reservable":0.9`, `{"name":"voice","dscp":"EF","priority":0,"minbw":"2mbit","user_allowed":false}`} {
		if !strings.Contains(string(b), w) {
			t.Errorf("JSON lacks %s:\n%s", w, b)
		}
	}
	var q Policy
	if err := json.Unmarshal(b, &q); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(p, &q) {
		t.Errorf("JSON round trip:\n%+v\n%+v", p, &q)
	}
	// A class without dscp/priority is filled from the defaults.
	var c Policy
	if err := json.Unmarshal([]byte(`{"classes":[{"name":"bulk"},{"name":"gold"}]}`), &c); err != nil {
		t.Fatal(err)
	}
	if c.Classes[0] != (Class{Name: "bulk", DSCP: 1, Priority: 4}) || c.Classes[1] != (Class{Name: "gold", DSCP: 0, Priority: 2}) {
		t.Errorf("classes = %+v", c.Classes)
	}
}

// TestJSONStrict: unknown fields are errors naming the field and the
// closest valid one, for every object; wrong kinds of value name the field
// and what it wants, never a Go type.
func TestJSONStrict(t *testing.T) {
	cases := []struct {
		name string
		dst  any
		in   string
		want []string // each in the message
	}{
		{"rule unknown field", &Rule{}, `{"name":"r","comm":"x","max_bw":"1mbit"}`, []string{`rule "r": unknown field "max_bw"; did you mean maxbw?`}},
		{"class unknown field", &Class{}, `{"name":"gold","user_alowed":true}`, []string{`class "gold": unknown field "user_alowed"; did you mean user_allowed?`}},
		{"link unknown field", &Link{}, `{"name":"eth0","egress":"1mbit"}`, []string{`link "eth0": unknown field "egress"`}},
		{"case differs", &Rule{}, `{"name":"r","comm":"x","MaxBW":"1mbit"}`, []string{`unknown field "MaxBW"; did you mean maxbw?`}},
		{"far from anything", &Class{}, `{"name":"c","zzzzzzzz":1}`, []string{`unknown field "zzzzzzzz"; known keys: name, dscp, priority`}},
		{"policy nested", &Policy{}, `{"rules":[{"name":"r","comm":"x","max_bw":"1mbit"}]}`, []string{`rule "r": unknown field "max_bw"`}},
		{"policy link", &Policy{}, `{"links":[{"name":"eth0","egress":"1mbit"}]}`, []string{`link "eth0": unknown field "egress"; did you mean egress_rate?`}},
		{"wrong kind int", &Class{}, `{"name":"c","priority":"high"}`, []string{`class "c": field priority = "high": want a whole number, got string`}},
		{"wrong kind bool", &Class{}, `{"name":"c","user_allowed":"yes"}`, []string{`field user_allowed = "yes": want true or false`}},
		{"wrong kind rate", &Rule{}, `{"name":"r","maxbw":true}`, []string{`field maxbw = true:`, `rate`}},
		{"wrong kind dscp", &Rule{}, `{"name":"r","dscp":{}}`, []string{`field dscp = {}: unknown DSCP`}},
		{"wrong kind name", &Rule{}, `{"name":5}`, []string{`field name = 5: want a string, got number`}},
		{"not an object", &Link{}, `[1]`, []string{`link: want a JSON object {...}, got an array`}},
		{"long value clipped", &Rule{}, `{"name":"r","exe":` + strconvQuote(strings.Repeat("a", 5000)) + `,"comm":1}`, []string{`field comm = 1: want a string`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var err error
			if l, ok := c.dst.(*Link); ok {
				err = DecodeJSONObject([]byte(c.in), l, "link", nil)
			} else {
				err = json.Unmarshal([]byte(c.in), c.dst)
			}
			if err == nil {
				t.Fatalf("no error for %s", c.in)
			}
			msg := err.Error()
			for _, w := range c.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q does not contain %q", msg, w)
				}
			}
			for _, bad := range []string{"Go value", "Go struct", "policy.", "plain"} {
				if strings.Contains(msg, bad) {
					t.Errorf("error %q names a Go type (%s)", msg, bad)
				}
			}
			if len(AsErrors(err)) == 0 {
				t.Errorf("error %T is not FieldErrors", err)
			}
		})
	}
	// A long unknown key and a long value are echoed clipped.
	long := strings.Repeat("k", 10000)
	err := json.Unmarshal([]byte(`{"name":"r","`+long+`":1,"proto":`+strconvQuote(strings.Repeat("u", 10000))+`}`), &Rule{})
	// (The message also lists every known key: about 400 bytes today.)
	if err == nil || len(err.Error()) > 800 || !strings.Contains(err.Error(), "(10000 bytes)") {
		t.Errorf("long key: %v", err)
	}
	// null is no error (as for any json.Unmarshaler): a blank rule.
	r := NewRule("keep")
	if err := json.Unmarshal([]byte(`null`), &r); err != nil || r.Name != "" {
		t.Errorf("null: %+v, %v", r, err)
	}
}

func strconvQuote(s string) string { b, _ := json.Marshal(s); return string(b) }

func TestClip(t *testing.T) {
	if Clip("short") != "short" {
		t.Error("short value changed")
	}
	long := strings.Repeat("é", 100) // 200 bytes: the cut must fall between characters
	c := Clip(long)
	if !strings.HasSuffix(c, "… (200 bytes)") || !strings.HasPrefix(c, strings.Repeat("é", 32)) || strings.Contains(c, "\uFFFD") {
		t.Errorf("Clip = %q", c)
	}
}
