package policy

import (
	"encoding/json"
	"strings"
	"testing"
)

// "auto" is a link rate, in TOML and JSON, with bounds that are checked
// and named in errors; it is no other field's rate.
func TestLinkRateAuto(t *testing.T) {
	p, err := Load([]byte(`
[[link]]
name = "eth0"
egress_rate = "auto"
egress_min = "2mbit"
egress_max = "50mbit"
`), "test.toml")
	if err != nil {
		t.Fatal(err)
	}
	l := p.Links[0]
	if !l.EgressRate.Auto() || l.EgressFloor() != 2_000_000 || l.Capacity() != 1_600_000 {
		t.Errorf("link %+v: floor %s capacity %s", l, l.EgressFloor(), l.Capacity())
	}
	b, _ := json.Marshal(l)
	var back Link
	if err := json.Unmarshal(b, &back); err != nil || back != l {
		t.Errorf("JSON round trip %s: %+v, %v", b, back, err)
	}
	for _, c := range []struct{ toml, want string }{
		{`egress_rate = "auto"` + "\n" + `egress_min = "60mbit"` + "\n" + `egress_max = "50mbit"`, `egress_min = "60mbit": above egress_max 50mbit`},
		{`egress_rate = "20mbit"` + "\n" + `egress_max = "50mbit"`, `egress_max = "50mbit": a bound of an automatic egress_rate`},
	} {
		_, err := Load([]byte("[[link]]\nname = \"eth0\"\n"+c.toml+"\n"), "test.toml")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want it to contain %q", c.toml, err, c.want)
		}
	}
	if _, err := Load([]byte("[[class]]\nname = \"x\"\nmaxbw = \"auto\"\n"), "test.toml"); err == nil {
		t.Error(`maxbw = "auto" accepted`)
	}
}
