package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/hostqos/hostqos/internal/policy"
)

func newConfigCmd(f *factory) *cobra.Command {
	cfg := &cobra.Command{Use: "config", Short: "Check or print policy files without a daemon"}
	check := &cobra.Command{
		Use:   "check [FILE]",
		Short: "Validate a config file (syntax, fields, classes, admission) and list every problem",
		Long: `check loads FILE (default ` + policy.DefaultConfigPath + `) exactly as hostqosd does and
reports every problem with its line, object, field, value and a fix. It exits
non-zero when the file would be rejected. Interfaces and users are not looked
up here; the daemon checks those when it applies the policy.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			path := policy.DefaultConfigPath
			if len(args) == 1 {
				path = args[0]
			}
			p, err := policy.LoadFile(path)
			if err != nil {
				return err
			}
			fmt.Fprintf(f.io.Out, "%s: ok — %d links, %d classes, %d rules\n", path, len(p.Links), len(p.Classes), len(p.Rules))
			for _, w := range p.Warnings() {
				fmt.Fprintln(f.io.Out, "warning:", w)
			}
			return nil
		},
	}
	dump := &cobra.Command{
		Use:   "dump [FILE]",
		Short: "Print a config file in canonical form (defaults filled in)",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			path := policy.DefaultConfigPath
			if len(args) == 1 {
				path = args[0]
			}
			p, err := policy.LoadFile(path)
			if err != nil {
				return err
			}
			data, err := p.MarshalTOML()
			if err != nil {
				return err
			}
			_, err = f.io.Out.Write(data)
			return err
		},
	}
	cfg.AddCommand(check, dump)
	return cfg
}
