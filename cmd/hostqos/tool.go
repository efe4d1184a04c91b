package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/hostqos/hostqos/internal/cliflag"
	"github.com/hostqos/hostqos/internal/policy"
	"github.com/hostqos/hostqos/internal/traffic"
)

// toolOptions are what every traffic tool shares: the streams and -o.
type toolOptions struct {
	io     ioStreams
	output cliflag.Output
}

// newToolCmd makes `hostqos tool` with the traffic generators and
// measurement tools. They run in-process and need no daemon.
func newToolCmd(f *factory) *cobra.Command {
	t := &toolOptions{io: f.io}
	tool := &cobra.Command{
		Use:   "tool",
		Short: "Traffic generators and measurement tools (UDP CBR, voice, echo, TCP bulk, Pareto, video, FCT)",
		Long: `Traffic generators and receivers that measure what the network gave each flow:
loss, one-way or round-trip latency percentiles, RFC 3550 jitter, goodput, frame
loss, flow completion times, and the DSCP each packet arrived with.

Pair a sender with a receiver:
  udp-send, voice --mode oneway, pareto, video  →  udp-sink
  voice (default mode echo)                     →  echo
  tcp-send, fct                                 →  tcp-sink

Senders and receivers stop by themselves (--duration; sinks also stop once the
expected flows ended). Results print as a table, or as JSON with -o json.
One-way latency is exact when both ends share a clock (network namespaces of
one host); across hosts it includes the clock offset.`,
	}
	cliflag.AddOutput(tool.PersistentFlags(), &t.output)
	tool.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error { return refuseExplicitZero(cmd) }
	tool.AddCommand(udpSendCmd(t), udpSinkCmd(t), echoCmd(t), voiceCmd(t), tcpSendCmd(t), tcpSinkCmd(t),
		paretoCmd(t), videoCmd(t), fctCmd(t))
	return tool
}

// toolCtx is cancelled by SIGINT/SIGTERM so a tool still prints its result.
func toolCtx() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

// refuseExplicitZero refuses a numeric flag given as 0 whose default is
// not 0 (--fps 0, --i-size 0, --timeout 0s): zero is not a frame rate, a
// frame size or a timeout, and the tools' configs would silently take their
// default for it. A flag whose default is 0 (--size of udp-send: "the
// profile's size") keeps 0 as that default.
func refuseExplicitZero(cmd *cobra.Command) error {
	var err error
	cmd.Flags().Visit(func(f *pflag.Flag) {
		if err != nil || !isZero(f.Value.String()) || isZero(f.DefValue) || f.Name == "seed" {
			return // a seed of 0 is a seed like any other
		}
		switch f.Value.Type() {
		case "int", "int64", "uint", "uint64", "float64", "duration":
			err = flagErr(f.Name, f.Value.String(), "must be more than 0", fmt.Sprintf("leave --%s out for its default (%s), or give a positive value", f.Name, f.DefValue))
		}
	})
	return err
}

func isZero(v string) bool { return v == "0" || v == "0s" || v == "0.0" }

func flagErr(flag, value, why, fix string) error {
	return usagef("--%s %q: %s; %s", flag, value, why, fix)
}

// flagError turns a traffic config's *traffic.FieldError into the error of
// the flag that set the field, with the value as given on the command line.
// A field's flag is the field's name with - for _, unless flags names
// another.
func flagError(cmd *cobra.Command, err error, flags map[string]string) error {
	var fe *traffic.FieldError
	if !errors.As(err, &fe) {
		return err
	}
	name, ok := flags[fe.Field]
	if !ok {
		name = strings.ReplaceAll(fe.Field, "_", "-")
	}
	value := fe.Value
	if f := cmd.Flags().Lookup(name); f != nil {
		value = f.Value.String()
	}
	if value == "" {
		return usagef("--%s: %s; %s", name, fe.Reason, fe.Fix)
	}
	return flagErr(name, value, fe.Reason, fe.Fix)
}

func (t *toolOptions) printResult(r traffic.Reporter) error {
	if t.output == cliflag.JSON {
		return printJSON(t.io.Out, r)
	}
	return r.WriteTable(t.io.Out)
}

func parseDSCPFlag(v string) (int, error) {
	if v == "" {
		return traffic.NoDSCP, nil
	}
	d, err := policy.ParseDSCP(v)
	if err != nil {
		return 0, flagErr("dscp", v, err.Error(), "use a name (EF, AF41, AF11, CS1, CS0) or a number 0..63")
	}
	return int(d), nil
}

func parseRateFlag(name, v string) (uint64, error) {
	r, err := policy.ParseRate(v)
	if err != nil || r == 0 {
		return 0, flagErr(name, v, "not a positive rate", "use a rate like 10mbit, 128kbit, 1gbit or 500bit (the same units as everywhere in hostqos)")
	}
	return uint64(r), nil
}

func (t *toolOptions) runWith(run func(ctx context.Context) (traffic.Reporter, error)) error {
	ctx, stop := toolCtx()
	defer stop()
	r, err := run(ctx)
	if err != nil {
		return err
	}
	return t.printResult(r)
}

func udpSendCmd(t *toolOptions) *cobra.Command {
	var to, from, profile, rate, dscp string
	var size int
	var pps float64
	var dur time.Duration
	var count uint64
	var flow uint32
	c := &cobra.Command{
		Use:   "udp-send --to HOST:PORT (--rate RATE | --pps N | --profile g729) [flags]",
		Short: "Send constant-bit-rate UDP to a udp-sink",
		Long: `Send a constant-bit-rate UDP flow. Every datagram carries a 32-byte header with
the flow id, a sequence number and the send time; at the end FIN packets tell the
sink how many were sent so it can count tail loss.

--size is the UDP payload in bytes (at least 32). --rate counts whole IP packets
(payload + 8 UDP + 20 IPv4 or 40 IPv6 header bytes). --profile g729 is a G.729
call as in the Q-Pod seed: 50 packets/s of 32-byte payload (RTP header + 20 bytes
of voice), a 60-byte IPv4 packet, 78 bytes on Ethernet with FCS, 31.2 kbit/s.`,
		Example: `  hostqos tool udp-send --to 198.18.2.2:5001 --rate 10mbit --size 1200 --duration 5s --dscp AF11
  hostqos tool udp-send --to [2001:db8:2::2]:5001 --profile g729 --dscp EF -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg := traffic.CBRConfig{To: to, From: from, Profile: profile, Size: size, PacketRate: pps, Duration: dur, Count: count, Flow: flow}
			if rate != "" {
				r, err := parseRateFlag("rate", rate)
				if err != nil {
					return err
				}
				cfg.BitRate = r
			}
			d, err := parseDSCPFlag(dscp)
			if err != nil {
				return err
			}
			cfg.DSCP = d
			if err := cfg.Validate(); err != nil {
				return flagError(cmd, err, map[string]string{"packet_rate": "pps", "bit_rate": "rate"})
			}
			return t.runWith(func(ctx context.Context) (traffic.Reporter, error) { return traffic.SendCBR(ctx, cfg) })
		},
	}
	f := c.Flags()
	f.StringVar(&to, "to", "", "destination host:port (required)")
	f.StringVar(&from, "from", "", "local host:port to send from (optional)")
	f.StringVar(&profile, "profile", "", "preset: g729 (50 pkt/s, 32-byte payload, 78 bytes on the wire)")
	f.IntVar(&size, "size", 0, "UDP payload bytes, 32..65507 (default 1200, or 32 with g729)")
	f.StringVar(&rate, "rate", "", "bit rate over whole IP packets, e.g. 10mbit, 128kbit")
	f.Float64Var(&pps, "pps", 0, "packet rate in packets/s (instead of --rate)")
	durationFlag(f, &dur, "duration", "", 10*time.Second, "how long to send")
	f.Uint64Var(&count, "count", 0, "stop after this many packets (0 = no limit)")
	f.StringVar(&dscp, "dscp", "", "DSCP to mark: EF, AF41, AF11, CS1, CS0 or 0..63 (default: leave unmarked)")
	f.Uint32Var(&flow, "flow", 0, "flow id carried in every packet")
	return c
}

func udpSinkCmd(t *toolOptions) *cobra.Command {
	var listen string
	var dur, idle time.Duration
	var flows int
	c := &cobra.Command{
		Use:   "udp-sink --listen HOST:PORT [flags]",
		Short: "Receive UDP and report loss, latency, jitter, frames and DSCP per flow",
		Long: `Receive datagrams from udp-send, voice --mode oneway, pareto or video and report,
per flow (source address + flow id): packets, loss (from sequence numbers and the
sender's FIN), duplicates, reordering, one-way latency percentiles, RFC 3550
jitter, received IP rate, per-DSCP packet counts and the DSCP of the very first
packet; for video also frames complete/lost and frame latency.

It stops after --duration, once --flows flows have ended, or after --idle without
traffic, whichever comes first.`,
		Example: `  hostqos tool udp-sink --listen 198.18.2.2:5001 --duration 30s --flows 1 -o json`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg := traffic.SinkConfig{Listen: listen, Duration: dur, Flows: flows, Idle: idle}
			if err := cfg.Validate(); err != nil {
				return flagError(cmd, err, nil)
			}
			return t.runWith(func(ctx context.Context) (traffic.Reporter, error) {
				s, err := traffic.ListenSink(ctx, cfg)
				if err != nil {
					return nil, err
				}
				fmt.Fprintf(t.io.Err, "udp-sink listening on %s\n", s.Addr())
				return s.Run(ctx)
			})
		},
	}
	f := c.Flags()
	f.StringVar(&listen, "listen", "", "host:port to listen on (required; port 0 picks one)")
	durationFlag(f, &dur, "duration", "", 60*time.Second, "longest run")
	f.IntVar(&flows, "flows", 0, "stop once this many flows sent their end marker (0 = run for --duration)")
	durationFlag(f, &idle, "idle", "", 0, "stop after this long without packets once traffic started (0 = off)")
	return c
}

func echoCmd(t *toolOptions) *cobra.Command {
	var listen string
	var dur time.Duration
	c := &cobra.Command{
		Use:   "echo --listen HOST:PORT [flags]",
		Short: "UDP echo server for round-trip measurements (voice)",
		Long: `Send every datagram back to its sender with the DSCP it arrived with. Packets
from our tools are stamped with the echo's receive time, so the sender can split
the round trip into its forward and return halves.`,
		Example: `  hostqos tool echo --listen [2001:db8:2::2]:7 --duration 5m`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := (traffic.EchoConfig{Listen: listen, Duration: dur}).Validate(); err != nil {
				return flagError(cmd, err, nil)
			}
			return t.runWith(func(ctx context.Context) (traffic.Reporter, error) {
				e, err := traffic.ListenEcho(ctx, listen)
				if err != nil {
					return nil, err
				}
				fmt.Fprintf(t.io.Err, "echo listening on %s\n", e.Addr())
				return e.Run(ctx, dur)
			})
		},
	}
	c.Flags().StringVar(&listen, "listen", "", "host:port to listen on (required)")
	durationFlag(c.Flags(), &dur, "duration", "", 60*time.Second, "how long to serve")
	return c
}

func voiceCmd(t *toolOptions) *cobra.Command {
	var to, from, mode, dscp string
	var calls, size int
	var pps float64
	var dur, drain time.Duration
	c := &cobra.Command{
		Use:   "voice --to HOST:PORT --calls N [flags]",
		Short: "Emulate N G.729 voice calls and report per-call loss, latency and jitter",
		Long: `Emulate N voice calls, each its own UDP socket (its own 5-tuple) sending G.729-
sized packets (32-byte payload, 50 packets/s; see udp-send --help), with the
calls' packets spread evenly in time.

--mode echo (default): send to a "hostqos tool echo" and measure the reflected
packets: per-call loss, round-trip and one-way (forward/return) latency
percentiles and RFC 3550 jitter.
--mode oneway: send to a "hostqos tool udp-sink", which reports each call as a
flow with one-way latency.`,
		Example: `  hostqos tool voice --to 198.18.2.2:7 --calls 20 --duration 10s --dscp EF
  hostqos tool voice --to 198.18.2.2:5001 --calls 640 --mode oneway --dscp AF11`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			d, err := parseDSCPFlag(dscp)
			if err != nil {
				return err
			}
			cfg := traffic.VoiceConfig{To: to, From: from, Calls: calls, Mode: mode, Duration: dur, DSCP: d, Size: size, PacketRate: pps, Drain: drain}
			if err := cfg.Validate(); err != nil {
				return flagError(cmd, err, map[string]string{"packet_rate": "pps"})
			}
			return t.runWith(func(ctx context.Context) (traffic.Reporter, error) { return traffic.RunVoice(ctx, cfg) })
		},
	}
	f := c.Flags()
	f.StringVar(&to, "to", "", "echo server (mode echo) or udp-sink (mode oneway) host:port (required)")
	f.StringVar(&from, "from", "", "local IP address to send from (optional)")
	f.IntVar(&calls, "calls", 1, "number of calls")
	f.StringVar(&mode, "mode", traffic.VoiceEcho, "echo (round trip via an echo server) or oneway (to a udp-sink)")
	durationFlag(f, &dur, "duration", "", 10*time.Second, "call length")
	f.StringVar(&dscp, "dscp", "", "DSCP to mark, e.g. EF (default: leave unmarked)")
	f.IntVar(&size, "size", 0, "UDP payload bytes per packet (default 32, G.729)")
	f.Float64Var(&pps, "pps", 0, "packets per second per call (default 50, G.729)")
	durationFlag(f, &drain, "drain", "", 0, "longest wait for the last echoes; ends once all are back (default 500ms)")
	return c
}

func tcpSendCmd(t *toolOptions) *cobra.Command {
	var to, from, dscp string
	var streams int
	var dur time.Duration
	c := &cobra.Command{
		Use:   "tcp-send --to HOST:PORT [flags]",
		Short: "Bulk TCP over N parallel streams to a tcp-sink",
		Long: `Open --streams TCP connections to a tcp-sink and write as fast as TCP allows for
--duration. The sink reports the goodput (bytes received over time); this side
reports what the kernel accepted.`,
		Example: `  hostqos tool tcp-send --to 198.18.2.2:5002 --streams 4 --duration 10s --dscp AF11`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			d, err := parseDSCPFlag(dscp)
			if err != nil {
				return err
			}
			cfg := traffic.BulkConfig{To: to, From: from, Streams: streams, Duration: dur, DSCP: d}
			if err := cfg.Validate(); err != nil {
				return flagError(cmd, err, nil)
			}
			return t.runWith(func(ctx context.Context) (traffic.Reporter, error) { return traffic.SendBulk(ctx, cfg) })
		},
	}
	f := c.Flags()
	f.StringVar(&to, "to", "", "tcp-sink host:port (required)")
	f.StringVar(&from, "from", "", "local IP address to connect from (optional)")
	f.IntVar(&streams, "streams", 1, "parallel TCP connections")
	durationFlag(f, &dur, "duration", "", 10*time.Second, "how long to send")
	f.StringVar(&dscp, "dscp", "", "DSCP to mark (default: leave unmarked)")
	return c
}

func tcpSinkCmd(t *toolOptions) *cobra.Command {
	var listen string
	var streams int
	var dur time.Duration
	c := &cobra.Command{
		Use:   "tcp-sink --listen HOST:PORT [flags]",
		Short: "Receive bulk TCP (goodput) and serve short transfers for fct",
		Long: `Accept tcp-send streams and report goodput per stream and in total (bytes
received from the first to the last byte), and serve the short transfers of
"hostqos tool fct". Stops after --duration or once --streams bulk streams closed.`,
		Example: `  hostqos tool tcp-sink --listen 198.18.2.2:5002 --streams 4 --duration 30s`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg := traffic.TCPSinkConfig{Listen: listen, Duration: dur, Streams: streams}
			if err := cfg.Validate(); err != nil {
				return flagError(cmd, err, nil)
			}
			return t.runWith(func(ctx context.Context) (traffic.Reporter, error) {
				s, err := traffic.ListenTCPSink(ctx, cfg)
				if err != nil {
					return nil, err
				}
				fmt.Fprintf(t.io.Err, "tcp-sink listening on %s\n", s.Addr())
				return s.Run(ctx)
			})
		},
	}
	f := c.Flags()
	f.StringVar(&listen, "listen", "", "host:port to listen on (required)")
	f.IntVar(&streams, "streams", 0, "stop once this many bulk streams closed (0 = run for --duration)")
	durationFlag(f, &dur, "duration", "", 60*time.Second, "longest run")
	return c
}

func paretoCmd(t *toolOptions) *cobra.Command {
	var to, from, k, capRate, dscp string
	var size int
	var alpha, offProb float64
	var interval, dur time.Duration
	var seed uint64
	var flow uint32
	c := &cobra.Command{
		Use:   "pareto --to HOST:PORT --k RATE --cap RATE [flags]",
		Short: "Bursty Pareto cross traffic (UDP) as in the Q-Pod seed",
		Long: `Send bursty UDP cross traffic to a udp-sink: every --interval (the seed: 2s) the
rate is drawn from a Pareto distribution P[X ≤ x] = 1 - (k/x)^alpha, x ≥ k
(the seed: k = 40mbit, alpha = 1.05), capped at --cap (use the bottleneck link
rate; the seed: 155mbit), and held for the interval. --k is the Pareto scale
(the smallest rate), not the mean; the expected mean is printed. With --off-prob p
an interval is silent with probability p (on/off). --seed makes runs repeatable.`,
		Example: `  hostqos tool pareto --to 198.18.2.2:5001 --k 4mbit --alpha 1.05 --cap 20mbit --duration 30s --dscp AF13`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			kr, err := parseRateFlag("k", k)
			if err != nil {
				return err
			}
			cr, err := parseRateFlag("cap", capRate)
			if err != nil {
				return err
			}
			d, err := parseDSCPFlag(dscp)
			if err != nil {
				return err
			}
			cfg := traffic.ParetoConfig{To: to, From: from, Size: size, K: kr, Alpha: alpha, Cap: cr, Interval: interval,
				OffProb: offProb, Duration: dur, Seed: seed, DSCP: d, Flow: flow}
			if err := cfg.Validate(); err != nil {
				return flagError(cmd, err, nil)
			}
			return t.runWith(func(ctx context.Context) (traffic.Reporter, error) { return traffic.SendPareto(ctx, cfg) })
		},
	}
	f := c.Flags()
	f.StringVar(&to, "to", "", "udp-sink host:port (required)")
	f.StringVar(&from, "from", "", "local host:port (optional)")
	f.StringVar(&k, "k", "", "Pareto scale = smallest on-rate, e.g. 40mbit (required)")
	f.Float64Var(&alpha, "alpha", 1.05, "Pareto shape")
	f.StringVar(&capRate, "cap", "", "largest rate, normally the bottleneck link rate (required)")
	durationFlag(f, &interval, "interval", "", 2*time.Second, "aggregation interval: each drawn rate is held this long")
	f.Float64Var(&offProb, "off-prob", 0, "probability that an interval is silent")
	f.IntVar(&size, "size", 1200, "UDP payload bytes")
	durationFlag(f, &dur, "duration", "", 20*time.Second, "how long to send")
	f.Uint64Var(&seed, "seed", 1, "random seed (same seed, same trace)")
	f.StringVar(&dscp, "dscp", "", "DSCP to mark (default: leave unmarked)")
	f.Uint32Var(&flow, "flow", 0, "flow id")
	return c
}

func videoCmd(t *toolOptions) *cobra.Command {
	var to, from, gop, dscp string
	var fps float64
	var iSize, pSize, bSize, maxPayload int
	var dur time.Duration
	var flow uint32
	c := &cobra.Command{
		Use:   "video --to HOST:PORT [flags]",
		Short: "Frame-based video source (I/P/B frames, GOP pattern) to a udp-sink",
		Long: `Send video frames at --fps following the repeating --gop pattern; each frame of
--i-size/--p-size/--b-size bytes is cut into datagrams of at most --max-payload
bytes of UDP payload and sent back to back. A udp-sink reports frame loss (a
frame with any fragment missing is lost) and frame latency (from the frame's
send time to its last fragment).`,
		Example: `  hostqos tool video --to 198.18.2.2:5001 --fps 30 --gop IBBPBBPBBPBB --i-size 60000 --dscp AF41`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			d, err := parseDSCPFlag(dscp)
			if err != nil {
				return err
			}
			cfg := traffic.VideoConfig{To: to, From: from, FPS: fps, GOP: gop, ISize: iSize, PSize: pSize, BSize: bSize,
				MaxPayload: maxPayload, Duration: dur, DSCP: d, Flow: flow}
			if err := cfg.Validate(); err != nil {
				return flagError(cmd, err, nil)
			}
			return t.runWith(func(ctx context.Context) (traffic.Reporter, error) { return traffic.SendVideo(ctx, cfg) })
		},
	}
	f := c.Flags()
	f.StringVar(&to, "to", "", "udp-sink host:port (required)")
	f.StringVar(&from, "from", "", "local host:port (optional)")
	f.Float64Var(&fps, "fps", 25, "frames per second")
	f.StringVar(&gop, "gop", "IBBPBBPBBPBB", "group-of-pictures pattern, repeated")
	f.IntVar(&iSize, "i-size", 40000, "I-frame bytes")
	f.IntVar(&pSize, "p-size", 12000, "P-frame bytes")
	f.IntVar(&bSize, "b-size", 5000, "B-frame bytes")
	f.IntVar(&maxPayload, "max-payload", 1400, "largest UDP payload per datagram, header included")
	durationFlag(f, &dur, "duration", "", 10*time.Second, "how long to send")
	f.StringVar(&dscp, "dscp", "", "DSCP to mark (default: leave unmarked)")
	f.Uint32Var(&flow, "flow", 0, "flow id")
	return c
}

func fctCmd(t *toolOptions) *cobra.Command {
	var to, from, size, direction, dscp string
	var count, conc int
	var timeout, dur time.Duration
	c := &cobra.Command{
		Use:   "fct --to HOST:PORT --count N --size BYTES [flags]",
		Short: "Short TCP transfers against a tcp-sink; report flow completion times",
		Long: `Run --count TCP transfers of --size bytes each against a tcp-sink, at most
--concurrency at a time, each on a new connection. --direction down (default):
the sink sends the bytes (a download); up: this side sends them and the sink
acknowledges. The completion time runs from the start of the TCP handshake to the
last byte (down) or the acknowledgement (up); p50/p90/p99 are reported.`,
		Example: `  hostqos tool fct --to 198.18.2.2:5002 --count 200 --size 50KiB --concurrency 4 --dscp AF41`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			psz, err := policy.ParseSize(size)
			if err != nil {
				return flagErr("size", size, err.Error(), "use bytes like 1500, 10KiB, 2MiB or 50kB (KiB, MiB, GiB count 1024s; kB, MB, GB 1000s, as everywhere in hostqos)")
			}
			d, err := parseDSCPFlag(dscp)
			if err != nil {
				return err
			}
			cfg := traffic.FCTConfig{To: to, From: from, Count: count, Size: uint64(psz), Concurrency: conc, Direction: direction, DSCP: d, Timeout: timeout, Duration: dur}
			if err := cfg.Validate(); err != nil {
				return flagError(cmd, err, nil)
			}
			return t.runWith(func(ctx context.Context) (traffic.Reporter, error) { return traffic.RunFCT(ctx, cfg) })
		},
	}
	f := c.Flags()
	f.StringVar(&to, "to", "", "tcp-sink host:port (required)")
	f.StringVar(&from, "from", "", "local IP address to connect from (optional)")
	f.IntVar(&count, "count", 100, "number of transfers")
	f.StringVar(&size, "size", "10KiB", "bytes per transfer (1500, 10KiB, 2MiB, 50kB)")
	f.IntVar(&conc, "concurrency", 1, "transfers in flight at once")
	f.StringVar(&direction, "direction", traffic.FCTDown, "down (sink sends) or up (we send)")
	f.StringVar(&dscp, "dscp", "", "DSCP to mark (default: leave unmarked)")
	durationFlag(f, &timeout, "timeout", "", 10*time.Second, "per-transfer timeout")
	durationFlag(f, &dur, "duration", "", 0, "bound on the whole run (default count × timeout, at most 24h)")
	return c
}
