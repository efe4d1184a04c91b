package main

import (
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/spf13/cobra"
)

// The demo and the benchmarks build testbeds of network namespaces, which
// needs netlink and BPF code the CLI does not carry; they live in the
// hostqos-lab binary next to this one.
func newLabCmds(f *factory) []*cobra.Command {
	var cmds []*cobra.Command
	for _, c := range []struct{ name, short string }{
		{"demo", "Show what hostqos does: the same scenario without and with hostqos, side by side (root)"},
		{"bench", "Run the benchmark suite and record the results (root)"},
	} {
		name := c.name
		cmds = append(cmds, &cobra.Command{
			Use:                name + " [flags]",
			Short:              c.short,
			DisableFlagParsing: true,
			RunE: func(cmd *cobra.Command, args []string) error {
				bin := findLab()
				x := exec.Command(bin, append([]string{name}, args...)...)
				x.Stdin, x.Stdout, x.Stderr = f.io.In, f.io.Out, f.io.Err
				// Ctrl-C reaches the lab process too (same process group);
				// wait for it to clean up instead of exiting first, and pass
				// on signals sent to us alone.
				sigs := make(chan os.Signal, 4)
				signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
				defer signal.Stop(sigs)
				if err := x.Start(); err != nil {
					return fmt.Errorf("run %s: %w (build it with: make build)", bin, err)
				}
				go func() {
					for s := range sigs {
						if s == syscall.SIGTERM {
							_ = x.Process.Signal(s)
						}
					}
				}()
				if err := x.Wait(); err != nil {
					if xe, ok := err.(*exec.ExitError); ok {
						return &exitError{code: exitCode(xe.ExitCode())}
					}
					return fmt.Errorf("run %s: %w (build it with: make build)", bin, err)
				}
				return nil
			},
		})
	}
	return cmds
}

// findLab looks for hostqos-lab next to this binary, then in PATH.
func findLab() string {
	if self, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(self), "hostqos-lab")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if p, err := exec.LookPath("hostqos-lab"); err == nil {
		return p
	}
	return "hostqos-lab"
}
