package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/cliflag"
	"github.com/hostqos/hostqos/internal/policy"
)

// statusOptions are those of `hostqos status`.
type statusOptions struct {
	io     ioStreams
	client func() apiClient
	output cliflag.Output
	now    func() time.Time // for the uptime
	iface  func() string    // the interface the hint suggests managing
}

func newStatusCmd(f *factory) *cobra.Command {
	o := &statusOptions{io: f.io, client: f.client, now: f.now, iface: f.iface}
	st := &cobra.Command{
		Use:   "status",
		Short: "Show the daemon, the datapath, managed links and counts of rules, classes and flows",
		Args:  cobra.NoArgs,
		RunE:  func(*cobra.Command, []string) error { return o.run() },
	}
	cliflag.AddOutput(st.Flags(), &o.output)
	return st
}

func (o *statusOptions) run() error {
	c, cancel := apiCtx()
	defer cancel()
	s, err := o.client().Status(c)
	if err != nil {
		return err
	}
	w := o.io.Out
	if o.output == cliflag.JSON {
		return printJSON(w, s)
	}
	fmt.Fprintf(w, "daemon:    hostqosd %s, pid %d, up %s%s\n", s.Daemon.Version, s.Daemon.PID,
		o.now().Sub(s.Daemon.Started).Round(time.Second), map[bool]string{true: " (adopted pinned state)", false: ""}[s.Daemon.Adopted])
	fmt.Fprintf(w, "config:    %s (state %s)\n", s.Daemon.Config, s.Daemon.StateDir)
	dp := "loaded"
	if !s.Datapath.Loaded {
		dp = "NOT loaded"
	}
	fmt.Fprintf(w, "datapath:  %s, pins %s; %d packets seen, %d classified, %d parse errors, %d flow-table insert failures\n",
		dp, s.Daemon.BPFFSDir, s.Datapath.Packets, s.Datapath.Classified, s.Datapath.ParseErrors, s.Datapath.FlowInsertFail)
	if s.Datapath.Loops != "" {
		fmt.Fprintf(w, "kernel:    %s\n", kernelLine(s.Datapath))
	}
	fmt.Fprintf(w, "mounts:    %s\n", mountsLine(s.Daemon))
	fmt.Fprintf(w, "policy:    %d links, %d classes, %d rules, %d runs; %d flows in the flow table (generation %d)\n",
		s.Counts.Links, s.Counts.Classes, s.Counts.Rules, s.Counts.Runs, s.Counts.Flows, s.Daemon.Generation)
	if k := s.Kubernetes; k != nil {
		fmt.Fprintf(w, "kubernetes: %s\n", kubernetesLine(k, o.now()))
	}
	if len(s.Links) > 0 {
		fmt.Fprintln(w)
		printLinks(w, s.Links)
		if len(s.AutoLinks) > 0 {
			fmt.Fprintln(w, autoLinksNote(s.AutoLinks))
		}
	} else {
		fmt.Fprintln(w)
		fmt.Fprintln(w, noLinkHint(o.iface()))
	}
	for _, warn := range s.Warnings {
		fmt.Fprintln(w, "warning:", warn)
	}
	printRestartNeeded(w, s.RestartNeeded)
	return nil
}

// kubernetesLine is the node agent's connection and last sync.
func kubernetesLine(k *api.KubernetesStatus, now time.Time) string {
	ago := func(t time.Time) string {
		if t.IsZero() {
			return "never"
		}
		return now.Sub(t).Round(time.Second).String() + " ago"
	}
	conn := "connected"
	if !k.Connected {
		conn = "NOT connected"
		if k.Error != "" {
			conn += " (" + k.Error + ")"
		}
		conn += "; enforcing the last known pods"
	}
	line := fmt.Sprintf("node %s, %s since %s; last sync %s: %d pods with QoS, %d refused, %d policies",
		k.Node, conn, ago(k.Since), ago(k.LastSync), k.Pods, k.Refused, k.Policies)
	if k.PolicyError != "" {
		line += "; " + k.PolicyError
	}
	return line
}

// printRestartNeeded lists the start-time settings the config file
// changed since hostqosd started.
func printRestartNeeded(w io.Writer, changes []string) {
	if len(changes) == 0 {
		return
	}
	fmt.Fprintln(w, "restart needed: hostqosd reads these settings only when it starts; restart it (systemctl restart hostqosd) to apply them:")
	for _, c := range changes {
		fmt.Fprintln(w, "  "+c)
	}
}

// reloadOptions are those of `hostqos reload`.
type reloadOptions struct {
	io     ioStreams
	client func() apiClient
	output cliflag.Output
	force  bool
}

func newReloadCmd(f *factory) *cobra.Command {
	o := &reloadOptions{io: f.io, client: f.client}
	cmd := &cobra.Command{
		Use:   "reload [--force]",
		Short: "Re-read the config file; an invalid file changes nothing",
		Long: `reload re-reads the config file under the changes made through the API. An
invalid file changes nothing, and nor does one that takes away shaping admitted
guarantees rely on (a link's egress_rate removed while minbw or reservations
count on it, or lowered under the scheduled qsockets' rates): the refusal names
what is admitted and what the link would reserve; --force applies it.`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error { return o.run() },
	}
	cmd.Flags().BoolVar(&o.force, "force", false, "apply a file that takes away shaping admitted guarantees rely on")
	cliflag.AddOutput(cmd.Flags(), &o.output)
	return cmd
}

func (o *reloadOptions) run() error {
	c, cancel := apiCtx()
	defer cancel()
	s, err := o.client().Reload(c, api.Force(o.force))
	if err != nil {
		return err
	}
	return report(o.io.Out, o.output, changeResult{Action: "reloaded", Kind: "config", Name: s.Daemon.Config, Forced: o.force, Result: s}, func(w io.Writer) {
		fmt.Fprintf(w, "reloaded %s: %d rules, %d classes, %d links\n", s.Daemon.Config, s.Counts.Rules, s.Counts.Classes, s.Counts.Links)
		printRestartNeeded(w, s.RestartNeeded)
	})
}

// downOptions are those of `hostqos down`.
type downOptions struct {
	io     ioStreams
	client func() apiClient
	output cliflag.Output
	bpffs  string
	socket *string // the global --socket, for hostqosd down
}

func newDownCmd(f *factory) *cobra.Command {
	o := &downOptions{io: f.io, client: f.client, socket: &f.socket}
	down := &cobra.Command{
		Use:   "down",
		Short: "Remove every qdisc, program, pin and cgroup hostqos made (and nothing else); stops the daemon",
		Long: `down removes everything hostqos created in this network namespace: its egress
classifiers, HTB trees, pinned BPF programs and maps, and the cgroups of
'hostqos run'. Other tools' qdiscs and filters are left alone. The policy the
admin wrote (config file and persistent changes) is kept, so starting hostqosd
again brings it back. Without a running daemon, down runs 'hostqosd down'.`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error { return o.run() },
	}
	down.Flags().StringVar(&o.bpffs, "bpffs-dir", "", "pin directory when no daemon runs (default that of hostqosd)")
	cliflag.AddOutput(down.Flags(), &o.output)
	return down
}

func (o *downOptions) run() error {
	c, cancel := apiCtx()
	defer cancel()
	msg, err := o.client().Down(c, api.NoWaitForDaemon()) // a stale socket: clean up without a daemon at once
	done := func(msg string) error {
		return report(o.io.Out, o.output, changeResult{Action: "down", Kind: "hostqos", Result: msg},
			func(w io.Writer) { fmt.Fprintln(w, msg) })
	}
	if err == nil {
		return done(msg)
	}
	if !errors.Is(err, api.ErrDaemonDown) {
		return err
	}
	bin := findDaemon()
	args := []string{"down"}
	if o.bpffs != "" {
		args = append(args, "--bpffs-dir", o.bpffs)
	}
	if *o.socket != "" {
		args = append(args, "--socket", *o.socket)
	}
	x := exec.Command(bin, args...)
	var out strings.Builder
	x.Stdout, x.Stderr = &out, o.io.Err
	if err := x.Run(); err != nil {
		fmt.Fprint(o.io.Out, out.String())
		return fmt.Errorf("run %s %s: %w", bin, strings.Join(args, " "), err)
	}
	return done(strings.TrimSuffix(out.String(), "\n"))
}

func newVersionCmd(f *factory) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  cobra.NoArgs,
		Run:   func(*cobra.Command, []string) { fmt.Fprintln(f.io.Out, "hostqos", version) },
	}
}

// version is set at link time (-X main.version=...).
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

func printLinks(w io.Writer, ls []api.LinkStatus) {
	var rows [][]string
	for _, l := range ls {
		rate := "mark only"
		if l.EgressRate > 0 {
			rate = autoRateText(l.EgressRate, l.EgressAuto)
		}
		state := "attached"
		if !l.Attached {
			state = "not attached"
		}
		if l.Error != "" {
			state += ": " + l.Error
		}
		in := "-"
		if l.IngressRate > 0 {
			in = autoRateText(l.IngressRate, l.IngressAuto)
		}
		rows = append(rows, []string{l.Name, rate, in, fmt.Sprintf("%s of %s", l.Reserved, l.Reservable), state})
	}
	table(w, []string{"LINK", "EGRESS RATE", "INGRESS RATE", "RESERVED", "STATE"}, rows)
	for _, l := range ls {
		if len(l.Guarantees) > 0 && l.EgressRate > 0 {
			fmt.Fprintf(w, "%s reserved by: %s\n", l.Name, policy.FormatContributions(l.Guarantees))
		}
	}
}

// autoLinksNote says what the zero-configuration start chose and how to
// change it.
func autoLinksNote(names []string) string {
	return fmt.Sprintf("no link configured: hostqos manages %s (the default route's interface) on its own, counting and marking its traffic without shaping; "+
		"shape it with `hostqos link set %s --egress-rate auto` (or a rate), or set auto_links = \"off\" in the config file to manage nothing",
		strings.Join(names, ", "), names[0])
}

// autoRateText is a link rate; an automatic one with its rate in force
// and estimate: "auto: 7.2mbit (est. 8mbit)".
func autoRateText(r policy.LinkRate, a *api.AutoRate) string {
	if !r.Auto() || a == nil {
		return r.String()
	}
	s := "auto: " + policy.Rate(a.InForce).String()
	if a.Estimate > 0 {
		s += " (est. " + policy.Rate(a.Estimate).String() + ")"
	}
	return s
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

// kernelLine tells what the kernel let the daemon load (docs/kernels.md).
func kernelLine(d api.DatapathStatus) string {
	loops := "loops " + d.Loops
	if d.Loops == policy.LoopsBounded {
		loops += fmt.Sprintf(" (no bpf_loop: at most %d rules without and %d with app selectors)", policy.BoundedFlowRules, policy.BoundedAppRules)
	}
	mptcp := "MPTCP subflows identified"
	if !d.MPTCPIdentity {
		mptcp = "MPTCP subflows without app identity (no bpf_skc_to_mptcp_sock)"
	}
	return fmt.Sprintf("%s, attach %s, %s", loops, d.Attach, mptcp)
}
