package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/policy"
)

// runOptions are those of `hostqos run`.
type runOptions struct {
	io                ioStreams
	client            func() apiClient
	class, dscp, maxb string
	maxbIn            string
	args              []string
}

func newRunCmd(f *factory) *cobra.Command {
	o := &runOptions{io: f.io, client: f.client}
	run := &cobra.Command{
		Use:   "run [--class C] [--dscp D] [--maxbw RATE] [--maxbw-in RATE] -- CMD [ARGS...]",
		Short: "Run a program under a QoS policy; exits with the program's exit code",
		Long: `run starts CMD with every socket it and its children open under the given
class, DSCP and ceiling. It works for any program — static binaries, UDP,
short-lived flows, IPv6 — because hostqos recognises the program's sockets in
the kernel when they are created; nothing is preloaded into it.

hostqosd moves this command into a cgroup of its own before CMD starts, so the
very first packet is covered. When CMD ends, the policy goes away. Ordinary
users may use the classes the admin opened to them (user_allowed), --maxbw and
--maxbw-in.`,
		Example: "  hostqos run --class voice -- ./softphone\n  hostqos run --maxbw 20mbit -- restic backup /home\n  hostqos run --dscp AF41 -- ffmpeg -re -i in.mp4 -f mpegts udp://198.18.0.2:5000",
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.args = args
			return o.run()
		},
	}
	run.Flags().SetInterspersed(false)
	run.Flags().StringVar(&o.class, "class", "", "service class (default: default)")
	run.Flags().StringVar(&o.dscp, "dscp", "", "DSCP to mark (name or 0-63), overriding the class's")
	run.Flags().StringVar(&o.maxb, "maxbw", "", "ceiling for the program's traffic, e.g. 20mbit")
	run.Flags().StringVar(&o.maxbIn, "maxbw-in", "", "download limit for what the program receives, e.g. 50mbit")
	return run
}

func (o *runOptions) run() error {
	args := o.args
	req := api.RunRequest{PID: os.Getpid(), Class: o.class, DSCP: policy.NoDSCP, Cmd: api.DisplayCmd(args)}
	if o.dscp != "" {
		d, err := policy.ParseDSCP(o.dscp)
		if err != nil {
			return usagef("flag --dscp = %q: %w", o.dscp, err)
		}
		req.DSCP = d
	}
	if o.maxb != "" {
		r, err := policy.ParseRate(o.maxb)
		if err != nil {
			return usagef("flag --maxbw = %q: %w", o.maxb, err)
		}
		req.MaxBW = r
	}
	if o.maxbIn != "" {
		r, err := policy.ParseRate(o.maxbIn)
		if err != nil {
			return usagef("flag --maxbw-in = %q: %w", o.maxbIn, err)
		}
		req.MaxBWIn = r
	}
	path, err := exec.LookPath(args[0])
	if err != nil {
		return fmt.Errorf("find program %s: %w", args[0], err)
	}
	client := o.client()
	c, cancel := apiCtx()
	r, err := client.Runs().Start(c, req)
	cancel()
	if err != nil {
		return fmt.Errorf("put this process under a policy: %w", err)
	}
	code := runChild(o.io, path, args)
	c2, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel2()
	if err := client.Runs().End(c2, r.ID); err != nil {
		var ae *api.Error
		if !errors.As(err, &ae) || ae.Status != 404 {
			fmt.Fprintln(o.io.Err, "hostqos: end run:", err, "(the daemon reaps it once the program's cgroup is empty)")
		}
	}
	if code != 0 {
		return &exitError{code: exitCode(code)}
	}
	return nil
}

// runChild runs the program with our stdio, forwards the usual signals to
// it, and returns its exit code (128+signal when it was killed).
func runChild(io ioStreams, path string, args []string) int {
	child := exec.Command(path, args[1:]...)
	child.Args = args
	child.Stdin, child.Stdout, child.Stderr = io.In, io.Out, io.Err
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2)
	defer signal.Stop(sigs)
	if err := child.Start(); err != nil {
		fmt.Fprintf(io.Err, "hostqos: start %s: %v\n", path, err)
		return 127
	}
	go func() {
		for s := range sigs {
			_ = child.Process.Signal(s)
		}
	}()
	err := child.Wait()
	if err == nil {
		return 0
	}
	var xe *exec.ExitError
	if errors.As(err, &xe) {
		if ws, ok := xe.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return xe.ExitCode()
	}
	fmt.Fprintf(io.Err, "hostqos: wait for %s: %v\n", path, err)
	return 1
}
