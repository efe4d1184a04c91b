package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/hostqos/hostqos/internal/policy"
)

// What every command of the tree shares (docs/cli.md, "Conventions"): a
// mistyped command or flag gets a "did you mean", and every refusal of the
// command line is a usage error (exit code 2).

// execute runs the command line of root (made by newRootCmd with f).
func execute(f *factory, root *cobra.Command) error {
	f.unknownCmd = nil
	if err := root.Execute(); err != nil {
		return err
	}
	return f.unknownCmd
}

// applyConventions sets the conventions on the tree under root: usage
// errors with "did you mean" for mistyped commands, flags and arguments.
func applyConventions(f *factory, root *cobra.Command) {
	root.SetFlagErrorFunc(refuseFlag)
	// A command with subcommands that is given an unknown one is not
	// runnable, so cobra shows its help and succeeds; its help function
	// reports the unknown command instead (execute returns it). Root's
	// Args keep cobra from refusing an unknown command of root with its
	// own message first.
	root.Args = cobra.ArbitraryArgs
	help := root.HelpFunc()
	root.SetHelpFunc(func(c *cobra.Command, args []string) {
		if asked, _ := c.Flags().GetBool("help"); !asked && c.HasAvailableSubCommands() && !c.Runnable() {
			if extra := c.Flags().Args(); len(extra) > 0 {
				f.unknownCmd = unknownCommand(c, extra[0])
				return
			}
		}
		help(c, args)
	})
	eachCommand(root, func(c *cobra.Command) {
		c.SuggestionsMinimumDistance = 2
		if args := c.Args; args != nil && c != root {
			c.Args = func(cmd *cobra.Command, a []string) error {
				err := args(cmd, a)
				switch {
				case err == nil:
					return nil
				case strings.HasPrefix(err.Error(), "unknown command") && !cmd.HasSubCommands(): // cobra.NoArgs
					return usagef("%s takes no arguments; got %q (usage: %s)", cmd.CommandPath(), policy.Clip(a[0]), cmd.UseLine())
				}
				return usagef("%s: %w (usage: %s)", cmd.CommandPath(), err, cmd.UseLine())
			}
		}
	})
}

// eachCommand calls fn for c and every command below it.
func eachCommand(c *cobra.Command, fn func(*cobra.Command)) {
	fn(c)
	for _, s := range c.Commands() {
		eachCommand(s, fn)
	}
}

// unknownCommand refuses name as a subcommand of c, with the commands it
// may have meant.
func unknownCommand(c *cobra.Command, name string) error {
	hint := fmt.Sprintf("see %s --help", c.CommandPath())
	if s := c.SuggestionsFor(name); len(s) > 0 {
		hint = "did you mean " + strings.Join(s, " or ") + "? (" + hint + ")"
	}
	return usagef("unknown command %q for %q; %s", policy.Clip(name), c.CommandPath(), hint)
}

// refuseFlag is the FlagErrorFunc of every command: every refusal of a
// flag is a usage error; a mistyped flag gets "did you mean", and a
// refused value reads `flag --NAME = "VALUE": why`.
func refuseFlag(c *cobra.Command, err error) error {
	// A group command given an unknown subcommand and its flags (rule ad
	// web --exe …): the command is what is wrong.
	if args := c.Flags().Args(); len(args) > 0 && !c.Runnable() && c.HasAvailableSubCommands() {
		return unknownCommand(c, args[0])
	}
	if name, ok := strings.CutPrefix(err.Error(), "unknown flag: --"); ok {
		hint := fmt.Sprintf("see %s --help", c.CommandPath())
		if best := policy.ClosestName(name, flagNames(c)); best != "" {
			hint = "did you mean --" + best + "? (" + hint + ")"
		}
		return usagef("unknown flag --%s for %q; %s", policy.Clip(name), c.CommandPath(), hint)
	}
	var ive *pflag.InvalidValueError
	if errors.As(err, &ive) {
		fl := ive.GetFlag()
		if want := valueWanted(fl.Value.Type()); want != "" {
			return usagef("flag --%s = %q: want %s", fl.Name, ive.GetValue(), want)
		}
		return usagef("flag --%s = %q: %w", fl.Name, ive.GetValue(), errors.Unwrap(ive))
	}
	return &usageError{err}
}

// flagNames are the names of the flags c takes (its own and those it
// inherits), hidden ones left out.
func flagNames(c *cobra.Command) []string {
	var names []string
	c.Flags().VisitAll(func(f *pflag.Flag) {
		if !f.Hidden {
			names = append(names, f.Name)
		}
	})
	return names
}

// valueWanted words what a flag of one of pflag's own types takes ("":
// not one of them; the value's own error says why).
func valueWanted(typ string) string {
	switch typ {
	case "int", "int8", "int16", "int32", "int64":
		return "a whole number"
	case "uint", "uint8", "uint16", "uint32", "uint64":
		return "a whole number ≥ 0"
	case "float32", "float64":
		return "a number"
	case "bool":
		return "true or false"
	}
	return ""
}

// badArgument refuses arg, which is none of want, with the one it may have
// meant.
func badArgument(arg string, want []string) error {
	hint := ""
	if best := policy.ClosestName(arg, want); best != "" {
		hint = "; did you mean " + best + "?"
	}
	return usagef("argument %q: want %s%s", policy.Clip(arg), strings.Join(want, ", "), hint)
}
