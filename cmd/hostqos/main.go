// Command hostqos is the command-line interface of hostqos: it talks to
// hostqosd over its Unix socket, and carries the traffic tools.
package main

import (
	"os"

	"github.com/spf13/cobra"
)

func main() { os.Exit(int(run())) }

// run executes the command line and returns the exit code.
func run() exitCode {
	f := newFactory(ioStreams{In: os.Stdin, Out: os.Stdout, Err: os.Stderr})
	root := newRootCmd(f)
	return exitWith(f.io, execute(f, root))
}

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
		Version:       version,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	// --version prints what `hostqos version` prints; no -v shorthand.
	root.Flags().Bool("version", false, "print the version and exit")
	root.SetVersionTemplate("hostqos {{.Version}}\n")
	root.SetIn(f.io.In)
	root.SetOut(f.io.Out)
	root.SetErr(f.io.Err)
	f.addGlobalFlags(root)
	root.AddCommand(
		newStatusCmd(f), newReloadCmd(f), newDownCmd(f), newVersionCmd(f),
		newLinkCmd(f), newClassCmd(f), newRuleCmd(f), newRunCmd(f), newStatCmd(f),
		newConfigCmd(f), newToolCmd(f), newRtchanCmd(f), newPlotCmd(f),
	)
	root.AddCommand(newEventsCmd(f), newResvCmd(f), newRSVPCmd(f))
	root.AddCommand(newBlockCmd(f), newProtectCmd(f), newQSockCmd(f))
	root.AddCommand(newTopCmd(f))
	root.AddCommand(newExplainCmd(f))
	root.AddCommand(newContainerCmd(f))
	root.AddCommand(newWebCmd(f))
	root.AddCommand(newLabCmds(f)...)
	applyConventions(f, root)
	return root
}
