package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/hostqos/hostqos/internal/cliflag"
	"github.com/hostqos/hostqos/internal/policy"
)

func newConfigCmd(f *factory) *cobra.Command {
	cfg := &cobra.Command{Use: "config", Short: "Check or print policy files without a daemon"}
	var loops string
	var checkOut, dumpOut cliflag.Output
	check := &cobra.Command{
		Use:   "check [FILE]",
		Short: "Validate a config file (syntax, fields, classes, admission) and list every problem",
		Long: `check loads FILE (default ` + policy.DefaultConfigPath + `) exactly as hostqosd does and
reports every problem with its line, object, field, value and a fix. It exits
non-zero when the file would be rejected. Interfaces and users are not looked
up here; the daemon checks those when it applies the policy.

--loops bounded checks against the smaller capacity of the bounded datapath,
which hostqosd runs on kernels without bpf_loop (before Linux 5.17); auto (the
default) checks against the datapath hostqosd would choose on this kernel (it
looks for bpf_loop in /proc/kallsyms). ` + "`hostqos status`" + ` shows the daemon's loops.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			path := policy.DefaultConfigPath
			if len(args) == 1 {
				path = args[0]
			}
			switch loops {
			case "auto":
				loops = kernelLoops()
			case policy.LoopsBPFLoop, policy.LoopsBounded:
			default:
				return usagef("flag --loops = %q: want auto, %s or %s", loops, policy.LoopsBPFLoop, policy.LoopsBounded)
			}
			p, err := policy.LoadFile(path)
			if err == nil {
				err = p.CheckCapacity(path, loops)
			}
			if checkOut == cliflag.JSON {
				return printCheck(f.io.Out, path, p, err)
			}
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
			if dumpOut == cliflag.JSON {
				return printJSON(f.io.Out, p)
			}
			data, err := p.MarshalTOML()
			if err != nil {
				return err
			}
			_, err = f.io.Out.Write(data)
			return err
		},
	}
	check.Flags().StringVar(&loops, "loops", "auto", "the datapath to check against: bpf_loop (Linux 5.17+), bounded (smaller capacity), or auto (the one hostqosd would load on this kernel)")
	cliflag.AddOutput(check.Flags(), &checkOut)
	cliflag.AddOutput(dump.Flags(), &dumpOut)
	dump.Long = "dump prints the file as hostqosd reads it, in TOML with every default filled in (-o json: the same policy as the API's JSON)."
	cfg.AddCommand(check, dump)
	return cfg
}

// checkResult is what config check prints with -o json.
type checkResult struct {
	File     string               `json:"file"`
	OK       bool                 `json:"ok"`
	Links    int                  `json:"links"`
	Classes  int                  `json:"classes"`
	Rules    int                  `json:"rules"`
	Warnings []string             `json:"warnings,omitempty"`
	Problems []*policy.FieldError `json:"problems,omitempty"`
}

// printCheck prints config check's verdict as JSON: the file's counts and
// warnings, or every problem (and exits with exitInvalid). An error that
// is no problem of the file (it cannot be read) is returned as it is.
func printCheck(w io.Writer, path string, p *policy.Policy, err error) error {
	r := checkResult{File: path, OK: err == nil}
	if err != nil {
		if r.Problems = policy.AsErrors(err); r.Problems == nil {
			return err
		}
	} else {
		r.Links, r.Classes, r.Rules, r.Warnings = len(p.Links), len(p.Classes), len(p.Rules), p.Warnings()
	}
	if err := printJSON(w, r); err != nil {
		return err
	}
	if !r.OK {
		return &exitError{code: exitInvalid}
	}
	return nil
}

// kernelLoops is the loop variant hostqosd would load on this kernel:
// bounded when the kernel has no bpf_loop helper. The CLI has no BPF
// library (the daemon probes the helper itself); the helper's function is
// in /proc/kallsyms, whose names anyone may read. Without kallsyms it
// assumes bpf_loop.
func kernelLoops() string {
	f, err := os.Open("/proc/kallsyms")
	if err != nil {
		return policy.LoopsBPFLoop
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if l := sc.Bytes(); bytes.HasSuffix(l, []byte(" bpf_loop")) {
			return policy.LoopsBPFLoop
		}
	}
	if sc.Err() != nil {
		return policy.LoopsBPFLoop
	}
	return policy.LoopsBounded
}
