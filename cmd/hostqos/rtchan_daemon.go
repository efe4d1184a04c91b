package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/cliflag"
)

// The channels the daemon admitted host-wide (docs/rtchan.md "Host-wide
// admission"): list, show, close, and open (ask for one and hold it).

func rtAPI(c apiClient) (api.RTChannelsAPI, error) {
	rc, ok := c.(interface{ RTChannels() api.RTChannelsAPI })
	if !ok {
		return nil, errors.New("this client has no real-time channel routes")
	}
	return rc.RTChannels(), nil
}

func rtID(s string) (uint64, error) {
	id, err := strconv.ParseUint(s, 10, 64)
	if err != nil || id == 0 {
		return 0, usagef("argument ID = %q: want a positive number (hostqos rtchan list shows them)", s)
	}
	return id, nil
}

func newRtchanDaemonCmds(f *factory) []*cobra.Command {
	list := getCmd(f, "list", "List the real-time channels hostqosd admitted: owner, link, contract, bound figures", cobra.NoArgs,
		func(ctx context.Context, c apiClient, _ []string) ([]api.RTChannel, error) {
			rc, err := rtAPI(c)
			if err != nil {
				return nil, err
			}
			return rc.List(ctx)
		}, orHint(noRTChanHint, printRTChannels))
	show := getCmd(f, "show ID", "Show one admitted real-time channel", cobra.ExactArgs(1),
		func(ctx context.Context, c apiClient, a []string) (api.RTChannel, error) {
			id, err := rtID(a[0])
			if err != nil {
				return api.RTChannel{}, err
			}
			rc, err := rtAPI(c)
			if err != nil {
				return api.RTChannel{}, err
			}
			return rc.Get(ctx, id)
		}, printRTChannel)
	var closeOut cliflag.Output
	closeCmd := &cobra.Command{
		Use:   "close ID",
		Short: "Release an admitted real-time channel (its owner's user, root or group hostqos)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, a []string) error {
			id, err := rtID(a[0])
			if err != nil {
				return err
			}
			rc, err := rtAPI(f.client())
			if err != nil {
				return err
			}
			cx, cancel := apiCtx()
			defer cancel()
			if err := rc.Close(cx, id); err != nil {
				return err
			}
			return report(f.io.Out, closeOut, changeResult{Action: "closed", Kind: "real-time channel", Name: a[0]},
				func(w io.Writer) { fmt.Fprintf(w, "closed real-time channel %d\n", id) })
		},
	}
	cliflag.AddOutput(closeCmd.Flags(), &closeOut)
	return []*cobra.Command{list, show, closeCmd, newRtchanOpenCmd(f)}
}

func newRtchanOpenCmd(f *factory) *cobra.Command {
	var req api.RTChannelRequest
	var hold time.Duration
	var output cliflag.Output
	c := &cobra.Command{
		Use:   "open --link L --message-bytes M --period I --delay D [--burst B] [--name N] [--for DURATION]",
		Short: "Ask hostqosd for a real-time channel and hold it until interrupted (or --for ends)",
		Long: `open asks hostqosd to admit a real-time channel against every channel on the
link, of every process (D_order with CPU and link costs, as the rtchan library).
The channel belongs to this hostqos process: it is released when the process
exits (Ctrl-C, --for) or by hostqos rtchan close. A refusal names the failing
bound and exits 1. Programs use the rtchan library (UDPHost.UseDaemon) instead.`,
		Example: "  hostqos rtchan open --link eth0 --message-bytes 12000 --period 20ms --delay 100ms --for 1m",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			rc, err := rtAPI(f.client())
			if err != nil {
				return err
			}
			cx, cancel := apiCtx()
			ch, err := rc.Admit(cx, req)
			cancel()
			if err != nil {
				return err
			}
			if output == cliflag.JSON {
				if err := printJSON(f.io.Out, ch); err != nil {
					return err
				}
			} else {
				printRTChannel(f.io.Out, ch)
			}
			sig := make(chan os.Signal, 1)
			signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
			defer signal.Stop(sig)
			var done <-chan time.Time
			if hold > 0 {
				done = time.After(hold)
			}
			select {
			case <-sig:
			case <-done:
			}
			cx, cancel = apiCtx()
			defer cancel()
			return rc.Close(cx, ch.ID)
		},
	}
	fl := c.Flags()
	fl.StringVar(&req.Name, "name", "", "a name for the channel in listings")
	fl.StringVar(&req.Link, "link", "", "the managed link the channel sends on (required)")
	fl.IntVar(&req.MessageBytes, "message-bytes", 0, "the largest message, in bytes (Mmax)")
	durationFlag(fl, &req.Period, "period", "", 0, "the least time between messages (Imin = 1/Rmax)")
	fl.IntVar(&req.Burst, "burst", 1, "the most messages sent back to back (Bmax)")
	durationFlag(fl, &req.Delay, "delay", "", 0, "the end-to-end delay bound of a message")
	durationFlag(fl, &hold, "for", "", 0, "hold the channel this long, then close it (0: until interrupted)")
	cliflag.AddOutput(fl, &output)
	return c
}

func printRTChannels(w io.Writer, chans []api.RTChannel) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tLINK\tPID\tUID\tEXE\tBYTES\tPERIOD\tBURST\tDELAY\tPRIO\tTs\tTw\tBOUND\tRESPONSE")
	for _, c := range chans {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%d\t%s\t%d\t%v\t%d\t%v\t%d\t%v\t%v\t%v\t%v\n", c.ID, c.Name, c.Link, c.PID, c.UID, c.Exe,
			c.MessageBytes, c.Period, c.Burst, c.Delay, c.Priority, c.Ts, c.Tw, c.Bound, c.Response)
	}
	tw.Flush()
}

func printRTChannel(w io.Writer, c api.RTChannel) {
	fmt.Fprintf(w, "channel %d (%s) on %s\n", c.ID, c.Name, c.Link)
	fmt.Fprintf(w, "  owner     pid %d, uid %d, %s, since %s\n", c.PID, c.UID, c.Exe, c.Since.Format(time.RFC3339))
	fmt.Fprintf(w, "  contract  %d B every %v, burst %d, delay bound %v\n", c.MessageBytes, c.Period, c.Burst, c.Delay)
	fmt.Fprintf(w, "  admission priority %d, Ts %v, Tw %v, local bound %v, worst-case response %v (slack %v)\n",
		c.Priority, c.Ts, c.Tw, c.Bound, c.Response, c.Bound-c.Response)
}
