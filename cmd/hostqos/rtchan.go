package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/hostqos/hostqos/internal/cliflag"
	"github.com/spf13/cobra"

	"github.com/hostqos/hostqos/internal/lab/rtchanlab"
	"github.com/hostqos/hostqos/internal/policy"
	"github.com/hostqos/hostqos/rtchan"
)

func newRtchanCmd(f *factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "rtchan",
		Short: "Real-time channels: admission control and the seed's evaluation",
		Long: `Real-time channels are simplex message streams with a traffic contract
(Mmax bytes, Rmax messages/s, Bmax messages) and a delay bound, served by
per-channel handlers under multi-class EDF with cooperative preemption.

  hostqos rtchan admit   try admission control (D_order with CPU and link costs)
  hostqos rtchan bench   reproduce the seed's Figs. 7-9 in virtual time

hostqosd admits the channels of every process on the host (docs/rtchan.md):
  hostqos rtchan open    ask for a channel and hold it
  hostqos rtchan list    the admitted channels: owner, contract, bound figures
  hostqos rtchan show    one of them
  hostqos rtchan close   release one`,
	}
	cmd.AddCommand(newRtchanBenchCmd(f), newRtchanAdmitCmd(f))
	cmd.AddCommand(newRtchanDaemonCmds(f)...)
	return cmd
}

func newRtchanBenchCmd(f *factory) *cobra.Command {
	var out string
	var format cliflag.Output
	var quick bool
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Run the seed's evaluation (Table 3 workload on the null device) and plot Figs. 7, 8 and 9",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			start := time.Now()
			sweeps, err := rtchanlab.RunBench(rtchanlab.BenchOptions{Quick: quick})
			if err != nil {
				return fmt.Errorf("run real-time channel bench: %w", err)
			}
			w := f.io.Out
			if format == cliflag.JSON {
				enc := json.NewEncoder(w)
				enc.SetIndent("", "  ")
				if err := enc.Encode(sweeps); err != nil {
					return fmt.Errorf("encode bench results: %w", err)
				}
			} else {
				res, _ := rtchan.SeedParams().Analyze(rtchan.SeedSpecs())
				fmt.Fprintf(w, "Admission of the Table 3 channels (Table 2b parameters):\n%s\n", rtchan.FormatBounds(res))
				for _, s := range sweeps {
					fmt.Fprintln(w, s.Table())
				}
				fmt.Fprintf(w, "(virtual time; %s run in %v)\n", map[bool]string{true: "quick 8K-packet", false: "32K-packet"}[quick], time.Since(start).Round(time.Millisecond))
			}
			if out != "" {
				files, err := rtchanlab.WriteCharts(out, sweeps)
				if err != nil {
					return err
				}
				data, err := json.MarshalIndent(sweeps, "", "  ")
				if err != nil {
					return fmt.Errorf("encode bench results: %w", err)
				}
				jp := out + "/rtchan_bench.json"
				if err := os.WriteFile(jp, data, 0o644); err != nil {
					return fmt.Errorf("write bench results %s: %w", jp, err)
				}
				fmt.Fprintf(f.io.Err, "wrote %d plots (PNG and SVG, %d files) and %s\n", len(files)/2, len(files), jp)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&out, "out", "", "directory for the plots (PNG and SVG) and JSON results")
	cliflag.AddOutput(cmd.Flags(), &format)
	cmd.Flags().BoolVar(&quick, "quick", false, "8K packets per run and fewer points")
	return cmd
}

func newRtchanAdmitCmd(f *factory) *cobra.Command {
	var file, paramsName string
	var format cliflag.Output
	var channels []string
	var table3 bool
	var linkRate string
	cmd := &cobra.Command{
		Use:   "admit",
		Short: "Test whether a set of real-time channels is admissible",
		Long: `Runs the extended D_order admission test over a channel set and prints each
channel's message service time Ts, wait time Tw, worst-case response time and
slack. Exit status 2 if the set is refused.

Channels come from --table3 (the seed's Table 3), --file (a JSON list of
specs: {"name","mmax","bmax","imin" (ns) or "rmax","delay" (ns),"best_effort"})
and --channel NAME:MMAX:BMAX:IMIN:DELAY (e.g. --channel video:61440:4:33ms:40ms),
in that order; the last channel is the candidate.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var p rtchan.Params
			switch paramsName {
			case "seed":
				p = rtchan.SeedParams()
			case "udp":
				bits, err := parseRateFlag("link-rate", linkRate)
				if err != nil {
					return err
				}
				p = rtchan.UDPParams(int64(bits))
			default:
				return fmt.Errorf("check flag --params: %q is not seed or udp", paramsName)
			}
			var specs []rtchan.Spec
			if table3 {
				specs = append(specs, rtchan.SeedSpecs()...)
			}
			if file != "" {
				data, err := os.ReadFile(file)
				if err != nil {
					return fmt.Errorf("read channel file: %w", err)
				}
				var fs []rtchan.Spec
				if err := json.Unmarshal(data, &fs); err != nil {
					return fmt.Errorf("parse channel file %s: %w", file, err)
				}
				specs = append(specs, fs...)
			}
			for _, c := range channels {
				s, err := parseChannelFlag(c)
				if err != nil {
					return err
				}
				specs = append(specs, s)
			}
			if len(specs) == 0 {
				return usagef("check channels: none given (use --table3, --file or --channel)")
			}
			res, err := p.Admit(specs[:len(specs)-1], specs[len(specs)-1])
			var ae *rtchan.AdmissionError
			if err != nil && !errors.As(err, &ae) {
				return err
			}
			w := f.io.Out
			if format == cliflag.JSON {
				enc := json.NewEncoder(w)
				enc.SetIndent("", "  ")
				out := struct {
					Admitted bool                  `json:"admitted"`
					Error    string                `json:"error,omitempty"`
					Channels []rtchan.ChannelBound `json:"channels"`
				}{Admitted: err == nil, Channels: res}
				if err != nil {
					out.Error = err.Error()
				}
				if err := enc.Encode(out); err != nil {
					return fmt.Errorf("encode admission result: %w", err)
				}
			} else {
				fmt.Fprint(w, rtchan.FormatBounds(res))
			}
			if ae != nil {
				fmt.Fprintln(f.io.Err, "refused:", ae)
				return &exitError{code: exitAdmission}
			}
			if format != cliflag.JSON {
				fmt.Fprintf(w, "admitted: %s\n", specs[len(specs)-1].Name)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&file, "file", "", "JSON file with a list of channel specs")
	cmd.Flags().StringArrayVar(&channels, "channel", nil, "channel NAME:MMAX:BMAX:IMIN:DELAY (repeatable; BE for best effort: NAME:MMAX:BMAX:BE)")
	cmd.Flags().BoolVar(&table3, "table3", false, "start from the seed's Table 3 channels")
	cmd.Flags().StringVar(&paramsName, "params", "seed", "cost parameters: seed (Table 2b) or udp")
	cmd.Flags().StringVar(&linkRate, "link-rate", "20mbit", "link rate for --params udp")
	cliflag.AddOutput(cmd.Flags(), &format)
	return cmd
}

func parseChannelFlag(s string) (rtchan.Spec, error) {
	f := strings.Split(s, ":")
	bad := func(why string) (rtchan.Spec, error) {
		return rtchan.Spec{}, usagef("flag --channel = %q: %s (want NAME:MMAX:BMAX:IMIN:DELAY or NAME:MMAX:BMAX:BE)", s, why)
	}
	if len(f) != 5 && !(len(f) == 4 && strings.EqualFold(f[3], "be")) {
		return bad("wrong number of fields")
	}
	mmax, err := strconv.Atoi(f[1])
	if err != nil {
		return bad("mmax is not an integer")
	}
	bmax, err := strconv.Atoi(f[2])
	if err != nil {
		return bad("bmax is not an integer")
	}
	spec := rtchan.Spec{Name: f[0], Mmax: mmax, Bmax: bmax}
	if len(f) == 4 {
		spec.BestEffort = true
		return spec, nil
	}
	if spec.Imin, err = policy.ParseDuration(f[3]); err != nil {
		return bad("imin: " + err.Error())
	}
	if spec.Delay, err = policy.ParseDuration(f[4]); err != nil {
		return bad("delay: " + err.Error())
	}
	return spec, nil
}
