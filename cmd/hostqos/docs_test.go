package main

import (
	"os"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// walk calls fn for every command of the tree.
func walk(c *cobra.Command, fn func(*cobra.Command)) {
	fn(c)
	for _, s := range c.Commands() {
		if !s.Hidden && s.Name() != "help" && s.Name() != "completion" {
			walk(s, fn)
		}
	}
}

// TestCLIReferenceCoversEveryCommand keeps docs/cli.md true: every command
// path and every flag of the CLI must appear in it.
func TestCLIReferenceCoversEveryCommand(t *testing.T) {
	data, err := os.ReadFile("../../docs/cli.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(data)
	walk(newRootCmd(newFactory(ioStreams{})), func(c *cobra.Command) {
		path := c.CommandPath()
		if !strings.Contains(doc, "`"+path) && !strings.Contains(doc, "## "+path) {
			t.Errorf("docs/cli.md does not document %q", path)
		}
		if c.Parent() != nil && c.Parent().Name() == "tool" {
			return // the tools have their own reference, docs/tools.md
		}
		c.LocalFlags().VisitAll(func(f *pflag.Flag) {
			if f.Name == "help" {
				return
			}
			if !strings.Contains(doc, "--"+f.Name) {
				t.Errorf("docs/cli.md does not mention flag --%s of %q", f.Name, path)
			}
		})
	})
}
