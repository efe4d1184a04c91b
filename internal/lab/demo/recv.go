package demo

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/hostqos/hostqos/internal/policy"
	"math"
	"net"
	"net/netip"
	"sort"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hostqos/hostqos/internal/traffic"
)

// recorder is a UDP receiver for the datagrams of hostqos's generators
// (traffic.HeaderSize-byte header: magic "HQ", version, flags, flow id,
// sequence number, send time). Unlike traffic.Sink it keeps every packet,
// so the demo can draw time series (packet rate and latency per time bin,
// by send time) next to the totals.
type recorder struct {
	conn  *net.UDPConn
	flows map[rkey]*rflow
	order []*rflow
	other uint64
}

type rkey struct {
	src  netip.AddrPort
	flow uint32
}

type rpkt struct {
	seq  uint64
	sent int64 // sender's clock, Unix ns
	rx   int64 // our clock, Unix ns
	size int   // UDP payload bytes
}

type rflow struct {
	key     rkey
	pkts    []rpkt
	seen    map[uint64]struct{}
	dups    uint64
	ended   bool
	sent    uint64 // from the FIN
	dscp    map[int]uint64
	jit     traffic.Jitter
	ipBytes uint64
}

// Header layout of the generators' datagrams (see internal/traffic).
const (
	hdrMagic   = 0x4851
	hdrVersion = 1
	flagFIN    = 1
)

// listenRecorder opens the socket in the calling goroutine (call it inside
// testbed.Node.Do so the socket lives in that node's namespace).
func listenRecorder(addr string) (*recorder, error) {
	lc := net.ListenConfig{Control: func(network, address string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) {
			if e := unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_RECVTOS, 1); e != nil {
				serr = fmt.Errorf("enable IP_RECVTOS: %w", e)
			}
			_ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 8<<20)
		}); err != nil {
			return err
		}
		return serr
	}}
	pc, err := lc.ListenPacket(context.Background(), "udp4", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on UDP %s: %w", addr, err)
	}
	return &recorder{conn: pc.(*net.UDPConn), flows: map[rkey]*rflow{}}, nil
}

func (r *recorder) addr() netip.AddrPort { return r.conn.LocalAddr().(*net.UDPAddr).AddrPort() }

// run receives until ctx ends, until `flows` flows sent their FIN (0: no
// such stop), or until deadline. It closes the socket.
func (r *recorder) run(ctx context.Context, flows int, deadline time.Time) error {
	defer r.conn.Close()
	buf := make([]byte, 65536)
	oob := make([]byte, unix.CmsgSpace(4)*2)
	ended := 0
	for ctx.Err() == nil && time.Now().Before(deadline) && (flows == 0 || ended < flows) {
		_ = r.conn.SetReadDeadline(minTime(deadline, time.Now().Add(100*time.Millisecond)))
		n, oobn, _, from, err := r.conn.ReadMsgUDPAddrPort(buf, oob)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return fmt.Errorf("receive on %s: %w", r.addr(), err)
		}
		rx := time.Now().UnixNano()
		b := buf[:n]
		if n < traffic.HeaderSize || binary.BigEndian.Uint16(b) != hdrMagic || b[2] != hdrVersion {
			r.other++
			continue
		}
		k := rkey{from, binary.BigEndian.Uint32(b[4:])}
		f := r.flows[k]
		if f == nil {
			f = &rflow{key: k, seen: map[uint64]struct{}{}, dscp: map[int]uint64{}}
			r.flows[k] = f
			r.order = append(r.order, f)
		}
		seq := binary.BigEndian.Uint64(b[8:])
		if b[3]&flagFIN != 0 {
			if !f.ended {
				f.ended, f.sent = true, seq
				ended++
			}
			continue
		}
		f.dscp[tosOf(oob[:oobn])]++
		if _, dup := f.seen[seq]; dup {
			f.dups++
			continue
		}
		f.seen[seq] = struct{}{}
		sent := int64(binary.BigEndian.Uint64(b[16:]))
		f.pkts = append(f.pkts, rpkt{seq: seq, sent: sent, rx: rx, size: n})
		f.jit.Add(time.Duration(rx - sent))
		f.ipBytes += uint64(n + 28)
	}
	return nil
}

// tosOf returns the DSCP of a received datagram from its control
// messages, or -1.
func tosOf(oob []byte) int {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return -1
	}
	for _, m := range msgs {
		if m.Header.Level == unix.IPPROTO_IP && m.Header.Type == unix.IP_TOS && len(m.Data) >= 1 {
			return int(m.Data[0]) >> 2
		}
	}
	return -1
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// flowSummary is one flow's totals.
type flowSummary struct {
	Expected, Received, Lost uint64
}

func (f *rflow) summary() flowSummary {
	s := flowSummary{Received: uint64(len(f.pkts))}
	switch {
	case f.ended:
		s.Expected = f.sent
	case len(f.pkts) > 0:
		var mx uint64
		for _, p := range f.pkts {
			mx = max(mx, p.seq)
		}
		s.Expected = mx + 1
	}
	if s.Expected > s.Received {
		s.Lost = s.Expected - s.Received
	}
	return s
}

// classStats are the measurements of all flows of one recorder: what the
// table shows for a class.
type classStats struct {
	Flows      int
	Expected   uint64
	Received   uint64
	Lost       uint64
	Loss       float64
	IPBytes    uint64
	Latency    traffic.Summary
	JitterMS   float64 // mean over flows of the RFC 3550 jitter
	MaxJitter  float64
	DSCP       map[string]uint64
	FirstRx    time.Time
	LastRx     time.Time
	OtherPkts  uint64
	Duplicates uint64
}

func (r *recorder) stats() classStats {
	cs := classStats{DSCP: map[string]uint64{}, OtherPkts: r.other}
	var lat traffic.Recorder
	var jsum float64
	for _, f := range r.order {
		s := f.summary()
		cs.Flows++
		cs.Expected += s.Expected
		cs.Received += s.Received
		cs.Lost += s.Lost
		cs.IPBytes += f.ipBytes
		cs.Duplicates += f.dups
		j := f.jit.Millis()
		jsum += j
		cs.MaxJitter = math.Max(cs.MaxJitter, j)
		for d, c := range f.dscp {
			name := "unknown"
			if d >= 0 {
				name = policy.DSCP(d).String()
			}
			cs.DSCP[name] += c
		}
		for _, p := range f.pkts {
			lat.Add(time.Duration(p.rx - p.sent))
			rx := time.Unix(0, p.rx)
			if cs.FirstRx.IsZero() || rx.Before(cs.FirstRx) {
				cs.FirstRx = rx
			}
			if rx.After(cs.LastRx) {
				cs.LastRx = rx
			}
		}
	}
	if cs.Flows > 0 {
		cs.JitterMS = math.Round(jsum/float64(cs.Flows)*1000) / 1000
	}
	if cs.Expected > 0 {
		cs.Loss = float64(cs.Lost) / float64(cs.Expected)
	}
	cs.Latency = lat.Summary()
	return cs
}

// Bin is one time bin of a series; times are seconds since the run's t0,
// binned by the packets' send time.
type Bin struct {
	T        float64 `json:"t_s"`        // start of the bin
	Sent     float64 `json:"sent_pps"`   // packets sent per second (received + lost)
	Received float64 `json:"recv_pps"`   // packets of this bin that arrived, per second
	RecvBps  float64 `json:"recv_bps"`   // IP bits/s of this bin that arrived
	Loss     float64 `json:"loss"`       // lost / sent in this bin
	P50      float64 `json:"p50_ms"`     // one-way latency of the bin's packets
	P99      float64 `json:"p99_ms"`     //
	Max      float64 `json:"max_ms"`     //
	N        int     `json:"received_n"` // packets received in the bin
}

// series bins every flow's packets by send time from t0 over [0, span)
// with bins of width w. Lost packets are placed at the send time
// interpolated between the received neighbours of their sequence number
// (tail losses at the flow's mean spacing after the last received packet).
func (r *recorder) series(t0 time.Time, span, w time.Duration) []Bin {
	nb := int(math.Ceil(float64(span) / float64(w)))
	if nb <= 0 {
		return nil
	}
	sent := make([]float64, nb)
	recv := make([]float64, nb)
	bytes := make([]float64, nb)
	lats := make([][]float64, nb)
	idx := func(ns int64) int {
		d := ns - t0.UnixNano()
		if d < 0 {
			return -1
		}
		i := int(d / int64(w))
		if i >= nb {
			return -1
		}
		return i
	}
	for _, f := range r.order {
		pk := append([]rpkt(nil), f.pkts...)
		sort.Slice(pk, func(i, j int) bool { return pk[i].seq < pk[j].seq })
		for _, p := range pk {
			if i := idx(p.sent); i >= 0 {
				sent[i]++
				recv[i]++
				bytes[i] += float64(p.size + 28)
				lats[i] = append(lats[i], float64(p.rx-p.sent)/1e6)
			}
		}
		// Losses between received packets, and before the first.
		spacing := int64(0)
		if len(pk) > 1 && pk[len(pk)-1].seq > pk[0].seq {
			spacing = (pk[len(pk)-1].sent - pk[0].sent) / int64(pk[len(pk)-1].seq-pk[0].seq)
		}
		prevSeq, prevSent := uint64(0), int64(0)
		havePrev := false
		for _, p := range pk {
			var from uint64
			if havePrev {
				from = prevSeq + 1
			}
			for s := from; s < p.seq; s++ {
				var at int64
				if havePrev {
					at = prevSent + (p.sent-prevSent)*int64(s-prevSeq)/int64(p.seq-prevSeq)
				} else {
					at = p.sent - spacing*int64(p.seq-s)
				}
				if i := idx(at); i >= 0 {
					sent[i]++
				}
			}
			prevSeq, prevSent, havePrev = p.seq, p.sent, true
		}
		if s := f.summary(); havePrev && s.Expected > prevSeq+1 {
			for q := prevSeq + 1; q < s.Expected; q++ {
				if i := idx(prevSent + spacing*int64(q-prevSeq)); i >= 0 {
					sent[i]++
				}
			}
		}
	}
	out := make([]Bin, nb)
	ws := w.Seconds()
	for i := range out {
		b := Bin{T: round3(float64(i) * ws), Sent: sent[i] / ws, Received: recv[i] / ws, RecvBps: math.Round(bytes[i] * 8 / ws), N: len(lats[i])}
		if sent[i] > 0 {
			b.Loss = round4((sent[i] - recv[i]) / sent[i])
		}
		if l := lats[i]; len(l) > 0 {
			sort.Float64s(l)
			b.P50 = round3(traffic.Percentile(l, 50))
			b.P99 = round3(traffic.Percentile(l, 99))
			b.Max = round3(l[len(l)-1])
		}
		out[i] = b
	}
	return out
}

func round3(v float64) float64 { return math.Round(v*1000) / 1000 }
func round4(v float64) float64 { return math.Round(v*10000) / 10000 }
