package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/hostqos/hostqos/internal/cliflag"
	"github.com/hostqos/hostqos/internal/lab"
	"github.com/hostqos/hostqos/internal/lab/demo"
)

func init() { rootCmd.AddCommand(demoCmd()) }

func demoCmd() *cobra.Command {
	var o demo.Options
	var output cliflag.Output
	c := &cobra.Command{
		Use:   "demo [--duration 20s] [--calls N] [--out DIR] [--scenario default|qpod-voip|qpod-scale|qpod-tct|qpod-cos] [-o table|json] [--keep]",
		Short: "Show what hostqos does: the same traffic without and with hostqos, side by side (root)",
		Long: `Build a private testbed of network namespaces, run the same traffic twice —
without hostqos and with the real hostqosd on the client — and print what each
class of traffic got, measured at the receiver: throughput, loss, p50/p99 one-way
latency and jitter, plus the DSCP it arrived with. Plots (PNG and SVG) go to --out.

Scenarios:
  default     client (hostqosd) → DiffServ router with a 20 Mbit/s bottleneck → server,
              plus a host sending bursty Pareto cross traffic through the same
              bottleneck. Client apps: G.729 voice calls, a video stream, bulk TCP.
              The verdict judges every party: voice protected, the neighbour's
              cross traffic not harmed, bulk filling what is left. About 1 minute.
  qpod-voip   the Q-Pod seed's VoIP experiment (§5.2, Fig. 25) at 1/10 scale: 64
              G.729 calls over a 15.5 Mbit/s bottleneck with Pareto cross traffic
              (k = 4 Mbit/s, α = 1.05, capped at the link rate, 2 s intervals),
              best effort vs marked by hostqos. About 2 minutes.
  qpod-scale  the seed's stress test (§4.7, Figs. 19-20): --sessions 1 Mbit/s UDP
              sessions launched --gap apart, all managed by hostqosd, each session's
              throughput/offered ratio. About 2.7 minutes with the seed's 75 × 2 s.
  qpod-tct    the seed's TCP session completion times (§4.6, Figs. 17-18): uploads
              of 50 KB … 5 MB (connect, send, server's acknowledgement, close),
              --transfers per payload, unmanaged vs managed by hostqosd; idle, and
              congested at 1/10 scale (15.5 Mbit/s DiffServ bottleneck, 16 Mbit/s
              UDP CBR cross traffic). About 2-4 minutes.
  qpod-cos    the seed's two classes of service by destination (§5.3, Fig. 27) at
              1/10 scale: one app sends video to two hosts, hostqos marks one gold
              (AF11) and one silver (AF12) by remote address; bursty Pareto cross
              traffic in AF13 and CBR in AF11 and AF12 through the DiffServ
              bottleneck; without and with hostqos. About 1.5 minutes.

Everything the demo creates is removed when it ends, on Ctrl-C and on a crash
(the next run removes what a killed run left behind). Needs root.`,
		Example: `  hostqos demo
  hostqos demo --duration 10s --calls 4 --out /tmp/demo
  hostqos demo --scenario qpod-voip -o json
  hostqos demo --scenario qpod-scale --sessions 20 --gap 1s
  hostqos demo --scenario qpod-tct --transfers 10
  hostqos demo --scenario qpod-cos --duration 30s`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if os.Geteuid() != 0 {
				return fmt.Errorf("the demo builds network namespaces and loads BPF programs: run it as root (sudo hostqos demo)")
			}
			if o.OutDir == "" {
				o.OutDir = filepath.Join("demo-out", time.Now().Format("20060102-150405"))
			}
			bin, err := lab.FindBinaries("")
			if err != nil {
				return err
			}
			o.BinDir = bin
			o.Progress = cmd.ErrOrStderr()
			if output == "table" {
				o.Progress = cmd.OutOrStdout()
			}
			o.Log = slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelWarn}))
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			res, err := demo.Run(ctx, o)
			if err != nil {
				if ctx.Err() != nil {
					fmt.Fprintln(cmd.ErrOrStderr(), "hostqos demo: interrupted; removed everything it had created")
					os.Exit(130)
				}
				return err
			}
			if output == "json" {
				return res.WriteJSON(cmd.OutOrStdout())
			}
			if err := res.WriteTable(cmd.OutOrStdout()); err != nil {
				return err
			}
			if res.Default != nil && !res.Default.Verdict.Pass {
				return errors.New("demo: the measured numbers did not meet the thresholds (see the verdict)")
			}
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&o.Scenario, "scenario", demo.ScenarioDefault, "default, qpod-voip, qpod-scale, qpod-tct or qpod-cos")
	f.DurationVar(&o.Duration, "duration", 0, "measured time per run (default 20s; qpod-voip and qpod-cos 40s)")
	f.IntVar(&o.Calls, "calls", 0, "voice calls (default 8; qpod-voip 64)")
	f.StringVar(&o.OutDir, "out", "", "directory for plots and result.json (default ./demo-out/<timestamp>)")
	cliflag.AddOutput(f, &output)
	f.BoolVar(&o.Keep, "keep", false, "keep the scratch directory (daemon log and config, raw generator output) under --out")
	f.IntVar(&o.Sessions, "sessions", 0, "qpod-scale: number of 1 Mbit/s sessions (default 75, as in the seed)")
	f.DurationVar(&o.Gap, "gap", 0, "qpod-scale: time between session launches (default 2s, as in the seed)")
	f.DurationVar(&o.Hold, "hold", 0, "qpod-scale: how long all sessions run together (default 10s; the seed: 320s)")
	f.IntVar(&o.Transfers, "transfers", 0, "qpod-tct: TCP transfers per payload size and run (default 20 idle; a quarter of it congested)")
	return c
}
