package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/policy"
)

func init() {
	var class, dscp, maxbw string
	run := &cobra.Command{
		Use:   "run [--class C] [--dscp D] [--maxbw RATE] -- CMD [ARGS...]",
		Short: "Run a program under a QoS policy; exits with the program's exit code",
		Long: `run starts CMD with every socket it and its children open under the given
class, DSCP and ceiling. It works for any program — static binaries, UDP,
short-lived flows, IPv6 — because hostqos recognises the program's sockets in
the kernel when they are created; nothing is preloaded into it.

hostqosd moves this command into a cgroup of its own before CMD starts, so the
very first packet is covered. When CMD ends, the policy goes away. Ordinary
users may use the classes the admin opened to them (user_allowed) and --maxbw.`,
		Example: "  hostqos run --class voice -- ./softphone\n  hostqos run --maxbw 20mbit -- restic backup /home\n  hostqos run --dscp AF41 -- ffmpeg -re -i in.mp4 -f mpegts udp://198.18.0.2:5000",
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := api.RunRequest{PID: os.Getpid(), Class: class, DSCP: policy.NoDSCP, Cmd: api.DisplayCmd(args)}
			if dscp != "" {
				d, err := policy.ParseDSCP(dscp)
				if err != nil {
					return fmt.Errorf("flag --dscp = %q: %w", dscp, err)
				}
				req.DSCP = d
			}
			if maxbw != "" {
				r, err := policy.ParseRate(maxbw)
				if err != nil {
					return fmt.Errorf("flag --maxbw = %q: %w", maxbw, err)
				}
				req.MaxBW = r
			}
			path, err := exec.LookPath(args[0])
			if err != nil {
				return fmt.Errorf("find program %s: %w", args[0], err)
			}
			c, cancel := ctx()
			var r api.Run
			err = client().Do(c, "POST", "/v1/runs", req, &r)
			cancel()
			if err != nil {
				return fmt.Errorf("put this process under a policy: %w", err)
			}
			code := runChild(path, args)
			c2, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel2()
			if err := client().Do(c2, "DELETE", "/v1/runs/"+url.PathEscape(r.ID), nil, nil); err != nil {
				var ae *api.Error
				if !errors.As(err, &ae) || ae.Status != 404 {
					fmt.Fprintln(os.Stderr, "hostqos: end run:", err, "(the daemon reaps it once the program's cgroup is empty)")
				}
			}
			if code != 0 {
				return &exitError{code: code}
			}
			return nil
		},
	}
	run.Flags().SetInterspersed(false)
	run.Flags().StringVar(&class, "class", "", "service class (default: default)")
	run.Flags().StringVar(&dscp, "dscp", "", "DSCP to mark (name or 0-63), overriding the class's")
	run.Flags().StringVar(&maxbw, "maxbw", "", "ceiling for the program's traffic, e.g. 20mbit")
	rootCmd.AddCommand(run)
}

// runChild runs the program with our stdio, forwards the usual signals to
// it, and returns its exit code (128+signal when it was killed).
func runChild(path string, args []string) int {
	child := exec.Command(path, args[1:]...)
	child.Args = args
	child.Stdin, child.Stdout, child.Stderr = os.Stdin, os.Stdout, os.Stderr
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2)
	defer signal.Stop(sigs)
	if err := child.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "hostqos: start %s: %v\n", path, err)
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
	fmt.Fprintf(os.Stderr, "hostqos: wait for %s: %v\n", path, err)
	return 1
}
