package rtchan

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sort"
	"sync"
	"time"
)

// RecvStats is the receiver's report for one channel of one sender.
type RecvStats struct {
	Source     string    `json:"source"`
	Channel    ChannelID `json:"channel"`
	BestEffort bool      `json:"best_effort,omitempty"`
	Msgs       uint64    `json:"msgs"`  // messages reassembled
	Pkts       uint64    `json:"pkts"`  // packets received
	Bytes      uint64    `json:"bytes"` // payload bytes received
	// Lost counts messages never completed: sequence gaps (including
	// messages the sender dropped on overflow) and partial messages.
	Lost uint64 `json:"lost"`
	// Late counts real-time messages whose last packet arrived after the
	// deadline carried in the packets.
	Late      uint64        `json:"late"`
	MinLaxity time.Duration `json:"min_laxity_ns"`
	MaxLaxity time.Duration `json:"max_laxity_ns"`
	SumLaxity int64         `json:"sum_laxity_ns"`
	// Overflow counts messages lost because the endpoint queue was full.
	Overflow uint64    `json:"overflow"`
	First    time.Time `json:"first"`
	Last     time.Time `json:"last"`
}

// MeanLaxity is the mean laxity of the real-time messages received.
func (s RecvStats) MeanLaxity() time.Duration {
	if s.Msgs == 0 || s.BestEffort {
		return 0
	}
	return time.Duration(s.SumLaxity / int64(s.Msgs))
}

type flowKey struct {
	src string
	ch  uint32
}

type assembly struct {
	seq   uint64
	have  bool
	got   int
	seen  []bool
	data  []byte
	hdr   wireHdr
	stats *RecvStats
}

// Receiver is a receiving endpoint over UDP (rtc_init): it reassembles
// messages per sender and channel, detects loss and lateness, and queues
// complete messages for Recv.
type Receiver struct {
	conn *net.UDPConn
	q    chan Message
	mu   sync.Mutex
	asm  map[flowKey]*assembly
	done chan struct{}
	err  error
}

// ListenUDP opens a receiving endpoint on addr ("host:port") holding up to
// capacity complete messages.
func ListenUDP(addr string, capacity int) (*Receiver, error) {
	ua, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return nil, fmt.Errorf("resolve endpoint %q: %w", addr, err)
	}
	conn, err := net.ListenUDP("udp", ua)
	if err != nil {
		return nil, fmt.Errorf("listen on endpoint %q: %w", addr, err)
	}
	return Init(conn, capacity), nil
}

// Init makes a receiving endpoint on an open socket (which it owns).
func Init(conn *net.UDPConn, capacity int) *Receiver {
	if capacity <= 0 {
		capacity = 1
	}
	_ = conn.SetReadBuffer(8 << 20)
	r := &Receiver{conn: conn, q: make(chan Message, capacity), asm: map[flowKey]*assembly{}, done: make(chan struct{})}
	go r.read()
	return r
}

// Addr is the endpoint's address.
func (r *Receiver) Addr() net.Addr { return r.conn.LocalAddr() }

func (r *Receiver) read() {
	defer close(r.done)
	buf := make([]byte, 65536)
	for {
		n, src, err := r.conn.ReadFromUDP(buf)
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				r.err = err
			}
			close(r.q)
			return
		}
		now := time.Now()
		hdr, err := parseHdr(buf[:n])
		if err != nil || hdr.npkts == 0 || int(hdr.idx) >= int(hdr.npkts) {
			continue
		}
		r.packet(flowKey{src.String(), hdr.channel}, hdr, buf[WireHeader:n], now)
	}
}

func (r *Receiver) packet(k flowKey, hdr wireHdr, payload []byte, now time.Time) {
	r.mu.Lock()
	a := r.asm[k]
	if a == nil {
		a = &assembly{stats: &RecvStats{Source: k.src, Channel: ChannelID(k.ch), BestEffort: hdr.be, MinLaxity: 1<<63 - 1, MaxLaxity: -1 << 63, First: now}}
		r.asm[k] = a
	}
	st := a.stats
	st.Pkts++
	st.Bytes += uint64(len(payload))
	st.Last = now
	switch {
	case a.have && hdr.seq < a.seq:
		r.mu.Unlock()
		return // stale: that message was already given up
	case !a.have || hdr.seq > a.seq:
		if a.have {
			if a.got < int(a.hdr.npkts) {
				st.Lost++ // the previous message never completed
			}
			st.Lost += hdr.seq - a.seq - 1
		} else if hdr.seq > 1 {
			st.Lost += hdr.seq - 1
		}
		a.have, a.seq, a.got, a.hdr = true, hdr.seq, 0, hdr
		a.seen = make([]bool, hdr.npkts)
		a.data = make([]byte, hdr.size)
	}
	if int(hdr.idx) >= len(a.seen) || a.seen[hdr.idx] {
		r.mu.Unlock()
		return
	}
	a.seen[hdr.idx] = true
	a.got++
	if off := int(hdr.offset); off < len(a.data) {
		copy(a.data[off:], payload)
	}
	if a.got < len(a.seen) {
		r.mu.Unlock()
		return
	}
	m := Message{Channel: ChannelID(k.ch), Seq: a.seq, Size: int(a.hdr.size), Data: a.data, Arrival: time.Duration(now.UnixNano()), BestEffort: hdr.be}
	st.Msgs++
	if !hdr.be {
		m.Deadline = time.Duration(a.hdr.deadline)
		m.Laxity = m.Deadline - m.Arrival
		if m.Laxity < 0 {
			st.Late++
		}
		st.SumLaxity += int64(m.Laxity)
		st.MinLaxity = min(st.MinLaxity, m.Laxity)
		st.MaxLaxity = max(st.MaxLaxity, m.Laxity)
	}
	a.got = len(a.seen) + 1 // complete; ignore duplicates
	select {
	case r.q <- m:
	default:
		st.Overflow++
	}
	r.mu.Unlock()
}

// Recv returns the next complete message (rtc_rcv).
func (r *Receiver) Recv(ctx context.Context) (Message, error) {
	select {
	case m, ok := <-r.q:
		if !ok {
			return Message{}, ErrClosed
		}
		return m, nil
	case <-ctx.Done():
		return Message{}, ctx.Err()
	}
}

// Report returns per-channel statistics, ordered by source and channel.
func (r *Receiver) Report() []RecvStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []RecvStats
	for _, a := range r.asm {
		s := *a.stats
		if s.MinLaxity == 1<<63-1 {
			s.MinLaxity = 0
		}
		if s.MaxLaxity == -1<<63 {
			s.MaxLaxity = 0
		}
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Source != out[j].Source {
			return out[i].Source < out[j].Source
		}
		return out[i].Channel < out[j].Channel
	})
	return out
}

// Close stops the endpoint.
func (r *Receiver) Close() error {
	err := r.conn.Close()
	<-r.done
	return err
}
