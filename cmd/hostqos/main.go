// Command hostqos is the command-line interface of hostqos: it talks to
// hostqosd over its Unix socket, and carries the traffic tools.
package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"

	"github.com/spf13/cobra"
)

// rootCmd is the top of the command tree; subcommands register themselves in
// their files' init functions.
var rootCmd = &cobra.Command{
	Use:   "hostqos",
	Short: "QoS for the end host: classify, mark, prioritise, limit and guarantee traffic per app and per flow",
	Long: `hostqos gives every application and every flow on this host the network service it
needs — priority, a DSCP mark the network honours, a rate limit, a guaranteed
share — without changing the application, and shows what each one got.

It talks to the hostqosd daemon over a Unix socket (--socket, $HOSTQOS_SOCKET,
default /run/hostqos/hostqosd.sock).`,
	SilenceUsage:  true,
	SilenceErrors: true,
}

func main() {
	if err := rootCmd.Execute(); err != nil {
		var ee *exitError
		if errors.As(err, &ee) {
			os.Exit(ee.code)
		}
		var xe *exec.ExitError
		if errors.As(err, &xe) {
			os.Exit(xe.ExitCode())
		}
		fmt.Fprintln(os.Stderr, "hostqos:", err)
		os.Exit(1)
	}
}

// exitError ends the CLI with a given code and no extra message.
type exitError struct{ code int }

func (e *exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }
