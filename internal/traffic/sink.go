package traffic

import (
	"context"
	"fmt"
	"github.com/hostqos/hostqos/internal/policy"
	"net"
	"net/netip"
	"sort"
	"time"
)

// SinkConfig describes a UDP sink.
type SinkConfig struct {
	Listen   string        // host:port to listen on; port 0 picks one
	Duration time.Duration // longest run (required, ≤ MaxDuration)
	// Flows, if positive, ends the run as soon as that many flows have sent
	// their FIN (end-of-flow) packets.
	Flows int
	// Idle, if positive, ends the run after that long without any packet once
	// at least one arrived.
	Idle time.Duration
}

// SinkResult is what a UDP sink received.
type SinkResult struct {
	Listen    string  `json:"listen"`
	DurationS float64 `json:"duration_s"`
	Packets   uint64  `json:"packets"`
	Bytes     uint64  `json:"bytes"`
	Expected  uint64  `json:"expected"`
	Lost      uint64  `json:"lost"`
	Loss      float64 `json:"loss"`
	Latency   Summary `json:"latency"`
	// DSCP counts data packets per received DSCP (name → packets).
	DSCP map[string]uint64 `json:"dscp"`
	// FirstDSCP is the DSCP of the very first data packet received ("" if none).
	FirstDSCP      string       `json:"first_dscp"`
	FirstDSCPValue int          `json:"first_dscp_value"`
	Flows          []FlowResult `json:"flows"`
	Other          uint64       `json:"other_packets"` // datagrams without our header
}

// FlowResult is what a sink received of one flow (source address + flow id).
type FlowResult struct {
	Source         string            `json:"source"`
	Flow           uint32            `json:"flow"`
	Packets        uint64            `json:"packets"`
	Bytes          uint64            `json:"bytes"`
	IPBytes        uint64            `json:"ip_bytes"`
	Sent           uint64            `json:"sent"` // from the FIN; 0 if none arrived
	Ended          bool              `json:"ended"`
	Expected       uint64            `json:"expected"`
	Lost           uint64            `json:"lost"`
	Loss           float64           `json:"loss"`
	Duplicates     uint64            `json:"duplicates"`
	Reordered      uint64            `json:"reordered"`
	Latency        Summary           `json:"latency"`
	JitterMS       float64           `json:"jitter_ms"`
	IPBitRate      float64           `json:"ip_bit_rate"`
	DSCP           map[string]uint64 `json:"dscp"`
	FirstDSCP      string            `json:"first_dscp"`
	FirstDSCPValue int               `json:"first_dscp_value"`
	Frames         *FrameResult      `json:"frames,omitempty"`
}

// FrameResult is the frame-level view of a video flow.
type FrameResult struct {
	Sent     uint64  `json:"sent"` // from the FIN, else highest frame + 1
	Complete uint64  `json:"complete"`
	Lost     uint64  `json:"lost"`
	Loss     float64 `json:"loss"`
	// Latency runs from the frame's send time to its last fragment's arrival.
	Latency Summary `json:"latency"`
}

// Sink receives UDP datagrams and measures them.
type Sink struct {
	cfg  SinkConfig
	conn *net.UDPConn
}

// ListenSink opens the sink's socket now (in the caller's network
// namespace); Run measures.
func ListenSink(ctx context.Context, cfg SinkConfig) (*Sink, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	c, err := listenUDP(ctx, cfg.Listen)
	if err != nil {
		return nil, err
	}
	return &Sink{cfg: cfg, conn: c}, nil
}

// Addr is the address the sink listens on.
func (s *Sink) Addr() netip.AddrPort { return s.conn.LocalAddr().(*net.UDPAddr).AddrPort() }

// Close releases the socket (Run also does at its end).
func (s *Sink) Close() error { return s.conn.Close() }

type flowKey struct {
	src  netip.AddrPort
	flow uint32
}

type flowState struct {
	key       flowKey
	packets   uint64
	bytes     uint64
	ipBytes   uint64
	firstIP   uint64
	first     time.Time
	last      time.Time
	maxSeq    uint64
	seen      bitset
	dups      uint64
	reordered uint64
	sent      uint64
	ended     bool
	lat       Recorder
	jit       Jitter
	dscp      map[int]uint64
	firstDSCP int
	video     *frameState
	finAux    uint64
	v6        bool
}

type frameState struct {
	maxFrame  uint64
	any       bool
	pending   map[uint32]*frameAsm
	completed map[uint32]struct{}
	lat       Recorder
}

type frameAsm struct {
	sent int64
	got  []bool
	n    int
}

type bitset []uint64

func (b *bitset) testAndSet(i uint64) bool {
	w := i / 64
	if w >= 1<<20 { // beyond 64 M sequence numbers: stop tracking duplicates
		return false
	}
	for uint64(len(*b)) <= w {
		*b = append(*b, 0)
	}
	m := uint64(1) << (i % 64)
	was := (*b)[w]&m != 0
	(*b)[w] |= m
	return was
}

// Run receives until the duration ends, the expected flows ended, the idle
// timeout fired or ctx was cancelled, then closes the socket and reports.
func (s *Sink) Run(ctx context.Context) (*SinkResult, error) {
	defer s.conn.Close()
	res := &SinkResult{Listen: s.Addr().String(), DSCP: map[string]uint64{}, FirstDSCPValue: NoDSCP}
	flows := map[flowKey]*flowState{}
	var order []*flowState
	buf := make([]byte, 65536)
	oob := make([]byte, oobSize)
	start := time.Now()
	end := start.Add(s.cfg.Duration)
	// Wake the read at once when ctx is cancelled.
	defer context.AfterFunc(ctx, func() { _ = s.conn.SetReadDeadline(time.Now()) })()
	var lastRx time.Time
	ended := 0
	for ctx.Err() == nil {
		now := time.Now()
		if !now.Before(end) {
			break
		}
		if s.cfg.Flows > 0 && ended >= s.cfg.Flows {
			break
		}
		if s.cfg.Idle > 0 && !lastRx.IsZero() && now.Sub(lastRx) > s.cfg.Idle {
			break
		}
		_ = s.conn.SetReadDeadline(minTime(end, now.Add(100*time.Millisecond)))
		n, oobn, _, from, err := s.conn.ReadMsgUDPAddrPort(buf, oob)
		if err != nil {
			if isTimeout(err) {
				continue
			}
			return nil, fmt.Errorf("receive on %s: %w", res.Listen, err)
		}
		rx := time.Now()
		lastRx = rx
		h, ok := parseHeader(buf[:n])
		if !ok {
			res.Other++
			continue
		}
		key := flowKey{from, h.flow}
		f := flows[key]
		if f == nil {
			f = &flowState{key: key, dscp: map[int]uint64{}, firstDSCP: NoDSCP, v6: !from.Addr().Unmap().Is4()}
			flows[key] = f
			order = append(order, f)
		}
		if h.flags&flagFIN != 0 {
			if !f.ended {
				f.ended, f.sent, f.finAux = true, h.seq, h.aux
				ended++
			}
			continue
		}
		dscp := parseTOS(oob[:oobn])
		if res.FirstDSCPValue == NoDSCP && dscp != NoDSCP {
			res.FirstDSCPValue = dscp
		}
		if f.firstDSCP == NoDSCP {
			f.firstDSCP = dscp
		}
		f.dscp[dscp]++
		if f.packets > 0 && f.seen.testAndSet(h.seq) {
			f.dups++
			continue
		}
		if f.packets == 0 {
			f.seen.testAndSet(h.seq)
			f.first = rx
			f.firstIP = uint64(n + ipOverhead(f.v6))
		} else if h.seq < f.maxSeq {
			f.reordered++
		}
		if h.seq > f.maxSeq {
			f.maxSeq = h.seq
		}
		f.packets++
		f.bytes += uint64(n)
		f.ipBytes += uint64(n + ipOverhead(f.v6))
		f.last = rx
		transit := rx.Sub(time.Unix(0, h.sent))
		f.lat.Add(transit)
		f.jit.Add(transit)
		if _, _, frags := splitVideoAux(h.aux); frags > 0 {
			f.addFragment(h, rx)
		}
	}
	res.DurationS = round3(time.Since(start).Seconds())
	all := Recorder{}
	for _, f := range order {
		fr := f.result()
		if fr.Packets == 0 && !fr.Ended {
			continue
		}
		res.Flows = append(res.Flows, fr)
		res.Packets += fr.Packets
		res.Bytes += fr.Bytes
		res.Expected += fr.Expected
		res.Lost += fr.Lost
		for d, c := range f.dscp {
			res.DSCP[dscpKey(d)] += c
		}
		all.Merge(&f.lat)
	}
	sort.SliceStable(res.Flows, func(i, j int) bool {
		if res.Flows[i].Source != res.Flows[j].Source {
			return res.Flows[i].Source < res.Flows[j].Source
		}
		return res.Flows[i].Flow < res.Flows[j].Flow
	})
	if res.Expected > 0 {
		res.Loss = round6(float64(res.Lost) / float64(res.Expected))
	}
	res.Latency = all.Summary()
	res.FirstDSCP = dscpString(res.FirstDSCPValue)
	return res, nil
}

func dscpKey(d int) string {
	if d < 0 {
		return "unknown"
	}
	return policy.DSCP(d).String()
}

func (f *flowState) addFragment(h header, rx time.Time) {
	frame, frag, frags := splitVideoAux(h.aux)
	v := f.video
	if v == nil {
		v = &frameState{pending: map[uint32]*frameAsm{}, completed: map[uint32]struct{}{}}
		f.video = v
	}
	if !v.any || uint64(frame) > v.maxFrame {
		v.maxFrame, v.any = uint64(frame), true
	}
	if _, done := v.completed[frame]; done || frag >= frags {
		return
	}
	a := v.pending[frame]
	if a == nil {
		a = &frameAsm{sent: h.sent, got: make([]bool, frags)}
		v.pending[frame] = a
	}
	if a.got[frag] {
		return
	}
	a.got[frag] = true
	a.n++
	if a.n == len(a.got) {
		delete(v.pending, frame)
		v.completed[frame] = struct{}{}
		v.lat.Add(rx.Sub(time.Unix(0, a.sent)))
	}
}

func (f *flowState) result() FlowResult {
	r := FlowResult{
		Source:         f.key.src.String(),
		Flow:           f.key.flow,
		Packets:        f.packets,
		Bytes:          f.bytes,
		IPBytes:        f.ipBytes,
		Sent:           f.sent,
		Ended:          f.ended,
		Duplicates:     f.dups,
		Reordered:      f.reordered,
		Latency:        f.lat.Summary(),
		JitterMS:       f.jit.Millis(),
		DSCP:           map[string]uint64{},
		FirstDSCPValue: f.firstDSCP,
		FirstDSCP:      dscpString(f.firstDSCP),
	}
	for d, c := range f.dscp {
		r.DSCP[dscpKey(d)] += c
	}
	switch {
	case f.ended:
		r.Expected = f.sent
	case f.packets > 0:
		r.Expected = f.maxSeq + 1
	}
	if r.Expected > f.packets {
		r.Lost = r.Expected - f.packets
	}
	if r.Expected > 0 {
		r.Loss = round6(float64(r.Lost) / float64(r.Expected))
	}
	if span := f.last.Sub(f.first); span > 0 && f.packets > 1 {
		r.IPBitRate = float64(int64(float64((f.ipBytes-f.firstIP)*8) / span.Seconds()))
	}
	if v := f.video; v != nil {
		fr := &FrameResult{Complete: uint64(len(v.completed)), Latency: v.lat.Summary()}
		if f.ended && f.finAux > 0 {
			fr.Sent = f.finAux
		} else if v.any {
			fr.Sent = v.maxFrame + 1
		}
		if fr.Sent > fr.Complete {
			fr.Lost = fr.Sent - fr.Complete
		}
		if fr.Sent > 0 {
			fr.Loss = round6(float64(fr.Lost) / float64(fr.Sent))
		}
		r.Frames = fr
	}
	return r
}

func round6(v float64) float64 { return float64(int64(v*1e6+0.5)) / 1e6 }

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
