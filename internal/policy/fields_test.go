package policy

import (
	"bytes"
	"fmt"
	"net/netip"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
)

// tomlSamples is, per field type, a TOML value the config file takes and
// the value it decodes to. A field of a new type needs a sample here (and,
// unless it is a plain string, number or boolean, an entry in
// tomlValueDecoders).
var tomlSamples = map[reflect.Type]struct {
	toml string
	want any
}{
	reflect.TypeOf(""):              {`"x"`, "x"},
	reflect.TypeOf(Action("")):      {`"drop"`, ActionDrop},
	reflect.TypeOf(0):               {`7`, 7},
	reflect.TypeOf(0.0):             {`0.5`, 0.5},
	reflect.TypeOf(false):           {`true`, true},
	reflect.TypeOf(Service("")):     {`"guaranteed"`, ServiceGuaranteed},
	reflect.TypeOf(Enforcement("")): {`"police"`, EnforcePolice},
	rateType:                        {`"1.5mbit"`, Rate(1_500_000)},
	reflect.TypeOf(LinkRate(0)):     {`"auto"`, RateAuto},
	sizeType:                        {`"64KiB"`, Size(64 << 10)},
	dscpType:                        {`"AF41"`, DSCP(34)},
	portsType:                       {`"1000-2000"`, PortRange{1000, 2000}},
	prefixType:                      {`"198.18.0.0/15"`, netip.MustParsePrefix("198.18.0.0/15")},
}

// TestEveryFieldLoads is the claim of fields.go checked field by field: a
// field added to Link, Class or Rule with a toml tag is read from the
// config file and written by MarshalTOML with no change to the loader, and
// docs/config.md documents it in its section's table.
func TestEveryFieldLoads(t *testing.T) {
	doc, err := os.ReadFile("../../docs/config.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, typ := range []reflect.Type{reflect.TypeOf(Link{}), reflect.TypeOf(Class{}), reflect.TypeOf(Rule{}), reflect.TypeOf(Reservation{}), reflect.TypeOf(Block{})} {
		section := strings.ToLower(typ.Name())
		sectionDoc := docSection(string(doc), "## `[["+section+"]]`")
		for _, f := range fieldsOf(typ, "toml").list {
			sf := typ.FieldByIndex(f.index)
			sample, ok := tomlSamples[sf.Type]
			if !ok {
				t.Errorf("%s.%s: no TOML sample for type %v; add one to tomlSamples", typ.Name(), sf.Name, sf.Type)
				continue
			}
			if !strings.Contains(sectionDoc, "| `"+f.name+"` |") {
				t.Errorf("docs/config.md, section [[%s]]: no row for field %s", section, f.name)
			}
			conf := fmt.Sprintf("[[%s]]\n%s = %s\n", section, f.name, sample.toml)
			var raw map[string][]map[string]any
			if _, err := toml.Decode(conf, &raw); err != nil {
				t.Fatal(err)
			}
			ld := &loader{src: "t.toml", loc: locateKeys([]byte(conf)), lines: map[string]int{}, bad: map[string]bool{}}
			e := ld.entry(section, 0, raw[section][0])
			v := reflect.New(typ)
			if f.name == nameKey {
				v.Elem().FieldByIndex(f.index).SetString(e.name())
			}
			e.fields(v.Interface())
			if len(ld.errs) > 0 {
				t.Errorf("%s.%s: %v", typ.Name(), sf.Name, ld.errs)
				continue
			}
			if got := v.Elem().FieldByIndex(f.index).Interface(); !reflect.DeepEqual(got, sample.want) {
				t.Errorf("%s.%s = %s decoded to %#v, want %#v", typ.Name(), sf.Name, sample.toml, got, sample.want)
			}
			var b bytes.Buffer
			writeTOMLTable(&b, section, v.Elem().Interface())
			if !strings.Contains(b.String(), "\n"+f.name+" = "+sample.toml+"\n") {
				t.Errorf("%s.%s: MarshalTOML does not write it back as %s:\n%s", typ.Name(), sf.Name, sample.toml, b.String())
			}
		}
	}
}

// docSection is the text of doc from the heading to the next "## ".
func docSection(doc, heading string) string {
	i := strings.Index(doc, heading)
	if i < 0 {
		return ""
	}
	rest := doc[i+len(heading):]
	if j := strings.Index(rest, "\n## "); j >= 0 {
		rest = rest[:j]
	}
	return rest
}
