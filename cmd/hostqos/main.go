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

// exitCode is the CLI's exit status.
type exitCode int

// The CLI's own exit codes; `hostqos run` and the lab commands exit with
// their program's code instead.
const (
	exitOK      exitCode = 0
	exitFailure exitCode = 1 // an error, printed to stderr
	exitRefused exitCode = 2 // rtchan admit: the channel set is refused
)

func main() { os.Exit(int(run())) }

// run executes the command line and returns the exit code.
func run() exitCode {
	f := newFactory(ioStreams{In: os.Stdin, Out: os.Stdout, Err: os.Stderr})
	root := newRootCmd(f)
	return exitWith(f.io, root.Execute())
}

// exitWith reports err on the error stream (unless it only carries an
// exit code) and returns the exit code for it.
func exitWith(io ioStreams, err error) exitCode {
	if err == nil {
		return exitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	var xe *exec.ExitError
	if errors.As(err, &xe) {
		return exitCode(xe.ExitCode())
	}
	fmt.Fprintln(io.Err, "hostqos:", err)
	return exitFailure
}

// exitError ends the CLI with a given code and no extra message.
type exitError struct{ code exitCode }

func (e *exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// newRootCmd builds the whole command tree; f gives every command its
// streams and its client.
func newRootCmd(f *factory) *cobra.Command {
	root := &cobra.Command{
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
	root.SetIn(f.io.In)
	root.SetOut(f.io.Out)
	root.SetErr(f.io.Err)
	root.SetFlagErrorFunc(fieldFlagError)
	f.addGlobalFlags(root)
	root.AddCommand(
		newStatusCmd(f), newReloadCmd(f), newDownCmd(f), newVersionCmd(f),
		newLinkCmd(f), newClassCmd(f), newRuleCmd(f), newRunCmd(f), newStatCmd(f),
		newConfigCmd(f), newToolCmd(f), newRtchanCmd(f), newPlotCmd(f),
	)
	root.AddCommand(newEventsCmd(f), newResvCmd(f), newRSVPCmd(f))
	root.AddCommand(newBlockCmd(f), newProtectCmd(f), newQSockCmd(f))
	root.AddCommand(newTopCmd(f))
	root.AddCommand(newLabCmds(f)...)
	return root
}
