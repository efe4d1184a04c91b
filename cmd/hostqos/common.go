package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/traffic"
)

var socketFlag, idempotencyKeyFlag string

func init() {
	rootCmd.PersistentFlags().StringVar(&socketFlag, "socket", "", "hostqosd API socket (default $HOSTQOS_SOCKET or "+api.DefaultSocket+")")
	// Advanced: a change's key, to learn the outcome of a change whose
	// answer was lost (the CLI names the key when it cannot tell).
	rootCmd.PersistentFlags().StringVar(&idempotencyKeyFlag, "idempotency-key", "", "send the change with this idempotency key (16-64 of A-Z a-z 0-9 _ -); a change is applied at most once per key")
	_ = rootCmd.PersistentFlags().MarkHidden("idempotency-key")
}

func client() *api.Client {
	c := api.NewClient(socketFlag)
	c.IdempotencyKey = idempotencyKeyFlag
	return c
}

func ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 60*time.Second)
}

// outputFlag adds -o/--output to a command and returns where it lands.
func outputFlag(cmd *cobra.Command) *string {
	var o string
	cmd.Flags().StringVarP(&o, "output", "o", "table", "output format: table or json")
	return &o
}

func checkOutput(o string) error {
	if o != "table" && o != "json" {
		return fmt.Errorf("flag --output = %q: want table or json", o)
	}
	return nil
}

func printJSON(v any) error {
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// table prints rows under a header, aligned.
func table(header []string, rows [][]string) {
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	tw.Flush()
}

// humanRate formats a measured rate in bits per second.
func humanRate(bps float64) string { return traffic.FormatRate(bps) + "/s" }

// humanBytes formats a byte count.
func humanBytes(b uint64) string {
	f := float64(b)
	switch {
	case f >= 1<<30:
		return fmt.Sprintf("%.2fGiB", f/(1<<30))
	case f >= 1<<20:
		return fmt.Sprintf("%.2fMiB", f/(1<<20))
	case f >= 1<<10:
		return fmt.Sprintf("%.1fKiB", f/(1<<10))
	}
	return fmt.Sprintf("%dB", b)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// getCmd makes a read-only command that fetches one API path and prints the
// answer as a table (with print) or, with -o json, as it came.
func getCmd[T any](use, short string, args cobra.PositionalArgs, path func([]string) string, print func(T)) *cobra.Command {
	c := &cobra.Command{Use: use, Short: short, Args: args}
	out := outputFlag(c)
	c.RunE = func(cmd *cobra.Command, a []string) error {
		if err := checkOutput(*out); err != nil {
			return err
		}
		cx, cancel := ctx()
		defer cancel()
		var v T
		if err := client().Get(cx, path(a), &v); err != nil {
			return err
		}
		if *out == "json" {
			return printJSON(v)
		}
		print(v)
		return nil
	}
	return c
}

// removeCmd makes `KIND remove NAME`, which deletes /v1/COLLECTION/NAME.
func removeCmd(kind, collection, short string) *cobra.Command {
	return &cobra.Command{
		Use:   "remove NAME",
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cx, cancel := ctx()
			defer cancel()
			if err := client().Do(cx, "DELETE", "/v1/"+collection+"/"+url.PathEscape(args[0]), nil, nil); err != nil {
				return err
			}
			fmt.Printf("removed %s %s\n", kind, args[0])
			return nil
		},
	}
}

// fixed returns a path function that ignores the arguments.
func fixed(p string) func([]string) string { return func([]string) string { return p } }

// named returns a path function for /v1/COLLECTION/<first argument>.
func named(collection string) func([]string) string {
	return func(a []string) string { return "/v1/" + collection + "/" + url.PathEscape(a[0]) }
}

// sendChange sends the fields given as flags: to add NAME (POST
// /v1/COLLECTION, fields not given left out) or to change it (PATCH
// /v1/COLLECTION/NAME, a field given as nil is cleared).
func sendChange(kind, collection, name string, add, temp bool, fields map[string]any) error {
	method, path, verb := "PATCH", "/v1/"+collection+"/"+url.PathEscape(name), "changed"
	if add {
		for k, v := range fields {
			if v == nil {
				delete(fields, k)
			}
		}
		fields["name"] = name
		method, path, verb = "POST", "/v1/"+collection, "added"
	}
	cx, cancel := ctx()
	defer cancel()
	if err := client().Do(cx, method, path+tempQuery(temp), fields, nil); err != nil {
		return err
	}
	fmt.Printf("%s %s %s\n", verb, kind, name)
	return nil
}
