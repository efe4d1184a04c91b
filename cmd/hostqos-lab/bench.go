package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/hostqos/hostqos/internal/cliflag"
	"github.com/hostqos/hostqos/internal/lab"
	"github.com/hostqos/hostqos/internal/lab/bench"
)

func init() {
	rootCmd.AddCommand(benchCmd(), benchHelperCmd())
}

func benchCmd() *cobra.Command {
	var quick, noRecord, updateSummary bool
	var results string
	var output cliflag.Output
	c := &cobra.Command{
		Use:   "bench [NAME...] [--quick] [--results FILE] [--no-record] [-o table|json]",
		Short: "Run the benchmark suite in private network namespaces and record the results (root)",
		Long: `Run hostqos's benchmarks (all, or the ones named) and compare the alternatives
side by side in the same run. Each benchmark prints its setup and a table with the
DESIGN.md target beside each figure; the run is appended, dated and with the git
revision, to the results file (default bench/RESULTS.md) unless --no-record, and
the summary at the file's top (each benchmark's latest run) is rewritten from its
sections (--update-summary does only that).

Benchmarks: ` + strings.Join(bench.Names(), ", ") + `.
--quick shortens every benchmark (about two minutes for all); the full suite
takes about ten. See docs/benchmarks.md for what each one measures.`,
		Example: `  hostqos bench
  hostqos bench datapath connect --quick --no-record
  hostqos bench pps -o json`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if updateSummary {
				if len(args) > 0 {
					return fmt.Errorf("--update-summary runs no benchmark; got %q", args)
				}
				if err := bench.UpdateSummary(results); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "summary of %s rewritten from its sections\n", results)
				return nil
			}
			if os.Geteuid() != 0 {
				return fmt.Errorf("hostqos bench needs root (network namespaces, BPF, qdiscs); run it with sudo")
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			var progress io.Writer = cmd.OutOrStdout()
			if output == "json" {
				progress = cmd.ErrOrStderr()
			}
			log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelWarn}))
			slog.SetDefault(log)
			host := lab.HostInfo()
			rev := bench.GitRevision(".")
			fmt.Fprintf(progress, "hostqos bench: %s, commit %s%s\n", host, rev, map[bool]string{true: " (quick)"}[quick])
			start := time.Now()
			plotDir := ""
			if !noRecord {
				plotDir = filepath.Dir(results)
			}
			reports, runErr := bench.Run(ctx, bench.Options{Quick: quick, Progress: progress, Log: log, PlotDir: plotDir}, args)
			if reports == nil && runErr != nil {
				return runErr
			}
			fmt.Fprintf(progress, "\nsuite took %.0f s\n", time.Since(start).Seconds())
			if output == "json" {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				if err := enc.Encode(struct {
					Host     lab.Host        `json:"host"`
					Revision string          `json:"revision"`
					Quick    bool            `json:"quick"`
					Reports  []*bench.Report `json:"reports"`
				}{host, rev, quick, reports}); err != nil {
					return err
				}
			}
			if !noRecord && len(reports) > 0 {
				if err := bench.Record(results, reports, host, rev, quick, start); err != nil {
					return err
				}
				fmt.Fprintf(progress, "results appended to %s\n", results)
			}
			return runErr
		},
	}
	f := c.Flags()
	f.BoolVar(&quick, "quick", false, "shorter runs (about two minutes for the whole suite)")
	f.StringVar(&results, "results", "bench/RESULTS.md", "results file to append the run to")
	f.BoolVar(&noRecord, "no-record", false, "do not append to the results file")
	f.BoolVar(&updateSummary, "update-summary", false, "rewrite the results file's summary from its sections and exit (runs no benchmark)")
	cliflag.AddOutput(f, &output)
	return c
}

// benchHelperCmd is the traffic the benchmarks run in their namespaces
// (copies of this executable); not for people.
func benchHelperCmd() *cobra.Command {
	return &cobra.Command{
		Use:                bench.HelperCommand,
		Hidden:             true,
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			return bench.Helper(args, cmd.OutOrStdout())
		},
	}
}
