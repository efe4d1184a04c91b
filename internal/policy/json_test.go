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
	if c.Classes[0] != (Class{Name: "bulk", DSCP: 10, Priority: 4}) || c.Classes[1] != (Class{Name: "gold", DSCP: 0, Priority: 2}) {
		t.Errorf("classes = %+v", c.Classes)
	}
}
