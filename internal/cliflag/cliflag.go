// Package cliflag holds the flags the command-line programs (hostqos,
// hostqos-lab) share, each checked when the command line is parsed.
package cliflag

import (
	"errors"

	"github.com/spf13/pflag"
)

// Output is the value of -o/--output: Table or JSON.
type Output string

// The output formats.
const (
	Table Output = "table"
	JSON  Output = "json"
)

func (o *Output) String() string { return string(*o) }

// Type names the value in usage messages.
func (o *Output) Type() string { return "format" }

// Set accepts table or json.
func (o *Output) Set(v string) error {
	switch Output(v) {
	case Table, JSON:
		*o = Output(v)
		return nil
	}
	return errors.New("want table or json")
}

// AddOutput adds -o/--output (default table) to a flag set.
func AddOutput(fs *pflag.FlagSet, o *Output) {
	*o = Table
	fs.VarP(o, "output", "o", "output format: table or json")
}
