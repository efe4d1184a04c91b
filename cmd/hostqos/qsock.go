package main

import (
	"context"
	"io"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/hostqos/hostqos/api"
)

// `hostqos qsock`: the sockets applications registered through the app
// API (libhostqos, package qsock, the Python module); docs/qsockets.md.

func newQSockCmd(f *factory) *cobra.Command {
	q := &cobra.Command{Use: "qsock", Short: "Show the sockets applications registered through the QSockets API"}
	list := getCmd(f, "list", "List the open qsockets (yours, unless you are root or in group hostqos)", cobra.NoArgs,
		func(ctx context.Context, c apiClient, _ []string) ([]api.QSocket, error) {
			return c.QSockets().List(ctx)
		},
		orHint(noQSockHint, printQSocks))
	q.AddCommand(list)
	return q
}

func printQSocks(w io.Writer, qs []api.QSocket) {
	var rows [][]string
	for _, q := range qs {
		rows = append(rows, []string{strconv.FormatUint(uint64(q.ID), 10), strconv.FormatUint(uint64(q.UID), 10),
			q.Class, strconv.Itoa(q.DSCP), q.Scheduler, strconv.FormatUint(q.Cookie, 10)})
	}
	table(w, []string{"ID", "UID", "CLASS", "DSCP", "SCHEDULER", "COOKIE"}, rows)
}
