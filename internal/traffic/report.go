package traffic

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
)

// Reporter is a result that can print itself as a human-readable table; the
// JSON form is encoding/json of the same value.
type Reporter interface {
	WriteTable(w io.Writer) error
}

func table(w io.Writer, rows [][]string) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	return tw.Flush()
}

func latRow(name string, s Summary) []string {
	return []string{name, fmt.Sprint(s.N), ms(s.Min), ms(s.Mean), ms(s.P50), ms(s.P90), ms(s.P99), ms(s.Max)}
}

var latHeader = []string{"LATENCY", "N", "MIN", "MEAN", "P50", "P90", "P99", "MAX"}

func ms(v float64) string { return fmt.Sprintf("%.3fms", v) }

func pct(v float64) string { return fmt.Sprintf("%.3f%%", v*100) }

func dscpCounts(m map[string]uint64) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s:%d", k, m[k]))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, " ")
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// WriteTable prints the sender's counters.
func (r *SendResult) WriteTable(w io.Writer) error {
	return table(w, [][]string{
		{"TO", "FLOW", "DSCP", "SIZE", "PACKETS", "ERRORS", "DURATION", "PKT/S", "IP RATE"},
		{r.To, fmt.Sprint(r.Flow), orDash(r.DSCP), fmt.Sprint(r.Size), fmt.Sprint(r.Packets), fmt.Sprint(r.SendErrors),
			fmt.Sprintf("%.3fs", r.DurationS), fmt.Sprintf("%.1f", r.PacketRate), FormatRate(r.IPBitRate)},
	})
}

// WriteTable prints the sink's totals and one row per flow.
func (r *SinkResult) WriteTable(w io.Writer) error {
	fmt.Fprintf(w, "listen %s  duration %.3fs  packets %d  lost %d (%s)  first DSCP %s  DSCP %s\n",
		r.Listen, r.DurationS, r.Packets, r.Lost, pct(r.Loss), orDash(r.FirstDSCP), dscpCounts(r.DSCP))
	rows := [][]string{{"SOURCE", "FLOW", "PACKETS", "EXPECTED", "LOST", "LOSS", "P50", "P99", "MAX", "JITTER", "IP RATE", "DSCP", "FRAMES"}}
	for _, f := range r.Flows {
		frames := "-"
		if f.Frames != nil {
			frames = fmt.Sprintf("%d/%d lost %s p99 %s", f.Frames.Complete, f.Frames.Sent, pct(f.Frames.Loss), ms(f.Frames.Latency.P99))
		}
		rows = append(rows, []string{f.Source, fmt.Sprint(f.Flow), fmt.Sprint(f.Packets), fmt.Sprint(f.Expected), fmt.Sprint(f.Lost),
			pct(f.Loss), ms(f.Latency.P50), ms(f.Latency.P99), ms(f.Latency.Max), ms(f.JitterMS), FormatRate(f.IPBitRate), dscpCounts(f.DSCP), frames})
	}
	rows = append(rows, []string{}, latHeader, latRow("one-way", r.Latency))
	return table(w, rows)
}

// WriteTable prints the echo server's counters.
func (r *EchoResult) WriteTable(w io.Writer) error {
	return table(w, [][]string{
		{"LISTEN", "DURATION", "ECHOED", "BYTES", "ERRORS", "FIRST DSCP", "DSCP"},
		{r.Listen, fmt.Sprintf("%.3fs", r.DurationS), fmt.Sprint(r.Packets), fmt.Sprint(r.Bytes), fmt.Sprint(r.Errors), orDash(r.FirstDSCP), dscpCounts(r.DSCP)},
	})
}

// WriteTable prints the calls' totals and per-call rows.
func (r *VoiceResult) WriteTable(w io.Writer) error {
	fmt.Fprintf(w, "voice to %s  mode %s  DSCP %s  calls %d  duration %.3fs  sent %d  received %d  loss %s (worst call %s)  max jitter %s\n",
		r.To, r.Mode, orDash(r.DSCP), r.Calls, r.DurationS, r.Sent, r.Received, pct(r.Loss), pct(r.WorstLoss), ms(r.MaxJitterMS))
	if r.Mode == VoiceOneWay {
		fmt.Fprintln(w, "one-way mode: the sink at the far end reports loss, latency and jitter per call")
		return nil
	}
	rows := [][]string{latHeader, latRow("round-trip", r.RTT), latRow("forward", r.Forward), {},
		{"CALL", "LOCAL", "SENT", "RECEIVED", "LOSS", "RTT P50", "RTT P99", "RTT MAX", "JITTER"}}
	for _, c := range r.PerCall {
		rows = append(rows, []string{fmt.Sprint(c.Call), c.Local, fmt.Sprint(c.Sent), fmt.Sprint(c.Received), pct(c.Loss),
			ms(c.RTT.P50), ms(c.RTT.P99), ms(c.RTT.Max), ms(c.JitterMS)})
	}
	return table(w, rows)
}

// WriteTable prints goodput per stream.
func (r *TCPSinkResult) WriteTable(w io.Writer) error {
	fmt.Fprintf(w, "listen %s  duration %.3fs  bytes %d  goodput %s  short transfers served %d\n",
		r.Listen, r.DurationS, r.Bytes, FormatRate(r.GoodputBps), r.Transfers)
	rows := [][]string{{"REMOTE", "BYTES", "DURATION", "GOODPUT"}}
	for _, s := range r.Streams {
		rows = append(rows, []string{s.Remote, fmt.Sprint(s.Bytes), fmt.Sprintf("%.3fs", s.DurationS), FormatRate(s.GoodputBps)})
	}
	return table(w, rows)
}

// WriteTable prints what the bulk sender wrote.
func (r *BulkResult) WriteTable(w io.Writer) error {
	return table(w, [][]string{
		{"TO", "STREAMS", "DSCP", "BYTES", "DURATION", "SEND RATE"},
		{r.To, fmt.Sprint(r.Streams), orDash(r.DSCP), fmt.Sprint(r.Bytes), fmt.Sprintf("%.3fs", r.DurationS), FormatRate(r.SendRateBps)},
	})
}

// WriteTable prints completion times.
func (r *FCTResult) WriteTable(w io.Writer) error {
	fmt.Fprintf(w, "fct to %s  %s %d bytes  DSCP %s  count %d  completed %d  failed %d\n",
		r.To, r.Direction, r.Size, orDash(r.DSCP), r.Count, r.Completed, r.Failed)
	for _, e := range r.Errors {
		fmt.Fprintln(w, "error:", e)
	}
	return table(w, [][]string{{"FCT", "N", "MIN", "MEAN", "P50", "P90", "P99", "MAX"}, latRow("transfer", r.FCT)[0:8]})
}

// WriteTable prints the sender's counters and the rate trace.
func (r *ParetoResult) WriteTable(w io.Writer) error {
	if err := r.SendResult.WriteTable(w); err != nil {
		return err
	}
	fmt.Fprintf(w, "\npareto k %s alpha %g cap %s interval %gs seed %d: expected mean %s\n",
		FormatRate(r.K), r.Alpha, FormatRate(r.Cap), r.IntervalS, r.Seed, FormatRate(r.ExpectedMeanBps))
	rows := [][]string{{"START", "TARGET", "SENT"}}
	for _, t := range r.Trace {
		rows = append(rows, []string{fmt.Sprintf("%.2fs", t.StartS), FormatRate(t.TargetBps), FormatRate(t.SentBps)})
	}
	return table(w, rows)
}

// WriteTable prints the video sender's counters.
func (r *VideoResult) WriteTable(w io.Writer) error {
	if err := r.SendResult.WriteTable(w); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "frames %d at %g fps, GOP %s\n", r.Frames, r.FPS, r.GOP)
	return err
}
