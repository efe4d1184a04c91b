package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/hostqos/hostqos/api"
)

func init() {
	st := &cobra.Command{
		Use:   "status",
		Short: "Show the daemon, the datapath, managed links and counts of rules, classes and flows",
		Args:  cobra.NoArgs,
	}
	out := outputFlag(st)
	st.RunE = func(cmd *cobra.Command, _ []string) error {
		if err := checkOutput(*out); err != nil {
			return err
		}
		c, cancel := ctx()
		defer cancel()
		var s api.Status
		if err := client().Get(c, "/v1/status", &s); err != nil {
			return err
		}
		if *out == "json" {
			return printJSON(s)
		}
		fmt.Printf("daemon:    hostqosd %s, pid %d, up %s%s\n", s.Daemon.Version, s.Daemon.PID,
			time.Since(s.Daemon.Started).Round(time.Second), map[bool]string{true: " (adopted pinned state)", false: ""}[s.Daemon.Adopted])
		fmt.Printf("config:    %s (state %s)\n", s.Daemon.Config, s.Daemon.StateDir)
		dp := "loaded"
		if !s.Datapath.Loaded {
			dp = "NOT loaded"
		}
		fmt.Printf("datapath:  %s, pins %s; %d packets seen, %d classified, %d parse errors, %d flow-table insert failures\n",
			dp, s.Daemon.BPFFSDir, s.Datapath.Packets, s.Datapath.Classified, s.Datapath.ParseErrors, s.Datapath.FlowInsertFail)
		fmt.Printf("mounts:    %s\n", mountsLine(s.Daemon))
		fmt.Printf("policy:    %d links, %d classes, %d rules, %d runs; %d flows in the flow table (generation %d)\n",
			s.Counts.Links, s.Counts.Classes, s.Counts.Rules, s.Counts.Runs, s.Counts.Flows, s.Daemon.Generation)
		if len(s.Links) > 0 {
			fmt.Println()
			printLinks(s.Links)
		}
		for _, w := range s.Warnings {
			fmt.Println("warning:", w)
		}
		return nil
	}
	rootCmd.AddCommand(st)

	reload := &cobra.Command{
		Use:   "reload",
		Short: "Re-read the config file; an invalid file changes nothing",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, cancel := ctx()
			defer cancel()
			var s api.Status
			if err := client().Do(c, "POST", "/v1/reload", nil, &s); err != nil {
				return err
			}
			fmt.Printf("reloaded %s: %d rules, %d classes, %d links\n", s.Daemon.Config, s.Counts.Rules, s.Counts.Classes, s.Counts.Links)
			return nil
		},
	}
	rootCmd.AddCommand(reload)

	var bpffs string
	down := &cobra.Command{
		Use:   "down",
		Short: "Remove every qdisc, program, pin and cgroup hostqos made (and nothing else); stops the daemon",
		Long: `down removes everything hostqos created in this network namespace: its egress
classifiers, HTB trees, pinned BPF programs and maps, and the cgroups of
'hostqos run'. Other tools' qdiscs and filters are left alone. The policy the
admin wrote (config file and persistent changes) is kept, so starting hostqosd
again brings it back. Without a running daemon, down runs 'hostqosd down'.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, cancel := ctx()
			defer cancel()
			var res map[string]string
			err := client().Do(c, "POST", "/v1/down", nil, &res)
			if err == nil {
				fmt.Println(res["down"])
				return nil
			}
			if !errors.Is(err, api.ErrDaemonDown) {
				return err
			}
			bin := findDaemon()
			args := []string{"down"}
			if bpffs != "" {
				args = append(args, "--bpffs-dir", bpffs)
			}
			if socketFlag != "" {
				args = append(args, "--socket", socketFlag)
			}
			x := exec.Command(bin, args...)
			x.Stdout, x.Stderr = os.Stdout, os.Stderr
			if err := x.Run(); err != nil {
				return fmt.Errorf("run %s %s: %w", bin, strings.Join(args, " "), err)
			}
			return nil
		},
	}
	down.Flags().StringVar(&bpffs, "bpffs-dir", "", "pin directory when no daemon runs (default that of hostqosd)")
	rootCmd.AddCommand(down)

	rootCmd.AddCommand(&cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  cobra.NoArgs,
		Run:   func(*cobra.Command, []string) { fmt.Println("hostqos", version) },
	})
}

var version = "dev"

// findDaemon looks for hostqosd next to this binary, then in PATH.
func findDaemon() string {
	if self, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(self), "hostqosd")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if p, err := exec.LookPath("hostqosd"); err == nil {
		return p
	}
	return "hostqosd"
}

func printLinks(ls []api.LinkStatus) {
	var rows [][]string
	for _, l := range ls {
		rate := "mark only"
		if l.EgressRate > 0 {
			rate = l.EgressRate.String()
		}
		state := "attached"
		if !l.Attached {
			state = "not attached"
		}
		if l.Error != "" {
			state += ": " + l.Error
		}
		rows = append(rows, []string{l.Name, rate, fmt.Sprintf("%s of %s", l.Reserved, l.Reservable), state})
	}
	table([]string{"LINK", "EGRESS RATE", "RESERVED", "STATE"}, rows)
}

// mountsLine describes the cgroup2 and BPF file systems the daemon uses and
// which of them it mounted itself.
func mountsLine(d api.DaemonStatus) string {
	own := func(b bool) string {
		if b {
			return " (mounted by hostqosd)"
		}
		return ""
	}
	cg, bpf := d.CgroupMount, d.BPFFSMount
	if cg == "" {
		cg = "?"
	}
	if bpf == "" {
		bpf = "?"
	}
	line := fmt.Sprintf("cgroup2 %s%s, bpffs %s%s", cg, own(d.CgroupMountOwn), bpf, own(d.BPFFSMountOwn))
	if d.PinsDieWithDaemon {
		line += "; the pins go away when the daemon exits"
	}
	return line
}
