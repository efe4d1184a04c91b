package cliflag

import (
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

func TestOutputCheckedWhenParsed(t *testing.T) {
	for _, c := range []struct {
		args []string
		want Output
		err  string
	}{
		{nil, Table, ""},
		{[]string{"-o", "json"}, JSON, ""},
		{[]string{"--output=table"}, Table, ""},
		{[]string{"-o", "yaml"}, "", `invalid argument "yaml" for "-o, --output" flag: want table or json`},
	} {
		fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
		var o Output
		AddOutput(fs, &o)
		err := fs.Parse(c.args)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%v: error %v, want %q", c.args, err, c.err)
			}
			continue
		}
		if err != nil || o != c.want {
			t.Errorf("%v: %q, %v; want %q", c.args, o, err, c.want)
		}
	}
}
