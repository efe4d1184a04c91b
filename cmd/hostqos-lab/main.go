// Command hostqos-lab holds the parts of hostqos that build private
// testbeds: the demo and the benchmark suite. It is separate from the
// hostqos CLI so the CLI needs neither netlink nor BPF code; `hostqos demo`
// and `hostqos bench` run it.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

var rootCmd = &cobra.Command{
	Use:           "hostqos-lab",
	Short:         "hostqos demo and benchmarks in private network namespaces (run as root)",
	SilenceUsage:  true,
	SilenceErrors: true,
}

func main() {
	if err := rootCmd.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "hostqos:", err)
		os.Exit(1)
	}
}
