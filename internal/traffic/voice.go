package traffic

import (
	"context"
	"fmt"
	"net"
	"sync"
	"time"
)

// Voice modes.
const (
	// VoiceEcho sends each call to an echo server and measures the reflected
	// packets: round trip, both one-way halves, loss and jitter, all here.
	VoiceEcho = "echo"
	// VoiceOneWay only sends; a UDP sink at the far end measures each call
	// (one flow per call) with one-way latency.
	VoiceOneWay = "oneway"
)

// VoiceConfig describes N emulated calls.
type VoiceConfig struct {
	To       string // echo server or sink host:port
	From     string // optional local host (port is chosen per call)
	Calls    int
	Mode     string // VoiceEcho (default) or VoiceOneWay
	Duration time.Duration
	DSCP     int
	// Size and PacketRate default to the G.729 profile (32-byte payload,
	// 50 pkt/s); see ProfileG729.
	Size       int
	PacketRate float64
	// Drain is the longest to wait for echoes after the last packet
	// (default 500ms); the wait ends as soon as every packet is back.
	Drain time.Duration
}

// CallResult is one call's measurements.
type CallResult struct {
	Call     int     `json:"call"`
	Local    string  `json:"local"`
	Sent     uint64  `json:"sent"`
	Received uint64  `json:"received"`
	Lost     uint64  `json:"lost"`
	Loss     float64 `json:"loss"`
	// RTT is the round trip; Forward and Return its one-way halves (exact
	// when both ends share a clock, as network namespaces of one host do).
	RTT      Summary `json:"rtt"`
	Forward  Summary `json:"forward"`
	Return   Summary `json:"return"`
	JitterMS float64 `json:"jitter_ms"`
}

// VoiceResult aggregates all calls.
type VoiceResult struct {
	To          string       `json:"to"`
	Mode        string       `json:"mode"`
	DSCP        string       `json:"dscp,omitempty"`
	Calls       int          `json:"calls"`
	DurationS   float64      `json:"duration_s"`
	Sent        uint64       `json:"sent"`
	Received    uint64       `json:"received"`
	Lost        uint64       `json:"lost"`
	Loss        float64      `json:"loss"`
	WorstLoss   float64      `json:"worst_call_loss"`
	RTT         Summary      `json:"rtt"`
	Forward     Summary      `json:"forward"`
	MaxJitterMS float64      `json:"max_jitter_ms"`
	PerCall     []CallResult `json:"per_call"`
}

type call struct {
	id   int
	f    *udpFlow
	mu   sync.Mutex
	seen bitset
	recv uint64
	rtt  Recorder
	fwd  Recorder
	ret  Recorder
	jit  Jitter
}

// RunVoice runs the calls for the duration and reports per call.
func RunVoice(ctx context.Context, cfg VoiceConfig) (*VoiceResult, error) {
	if err := cfg.normalize(); err != nil {
		return nil, err
	}
	from := ""
	if cfg.From != "" {
		from = net.JoinHostPort(cfg.From, "0")
	}
	calls := make([]*call, cfg.Calls)
	for i := range calls {
		c, err := dialUDP(ctx, cfg.To, from, cfg.DSCP)
		if err != nil {
			for _, p := range calls[:i] {
				p.f.c.Close()
			}
			return nil, fmt.Errorf("open call %d: %w", i, err)
		}
		calls[i] = &call{id: i, f: newUDPFlow(c, cfg.To, uint32(i), cfg.DSCP, cfg.Size)}
	}
	var wg sync.WaitGroup
	if cfg.Mode == VoiceEcho {
		for _, c := range calls {
			wg.Add(1)
			go func() { defer wg.Done(); c.receive(cfg.Size) }()
		}
	}
	// One pacer for all calls, their packets spread evenly over the period.
	start := time.Now()
	end := start.Add(cfg.Duration)
	p := pacer{next: start, interval: time.Duration(float64(time.Second) / (cfg.PacketRate * float64(cfg.Calls)))}
	for i := 0; p.wait(ctx) && time.Now().Before(end); i = (i + 1) % len(calls) {
		c := calls[i]
		c.mu.Lock()
		c.f.send(cfg.Size, 0)
		c.mu.Unlock()
	}
	elapsed := time.Since(start)
	if cfg.Mode == VoiceEcho {
		drain(ctx, calls, time.Now().Add(cfg.Drain))
	} else {
		for _, c := range calls {
			sendFIN(c.f.c, c.f.res.Flow, c.f.res.Packets, 0)
		}
	}
	for _, c := range calls {
		c.f.c.Close()
	}
	wg.Wait()

	res := &VoiceResult{To: cfg.To, Mode: cfg.Mode, DSCP: dscpString(cfg.DSCP), Calls: cfg.Calls, DurationS: round3(elapsed.Seconds())}
	var rtt, fwd Recorder
	for _, c := range calls {
		cr := CallResult{Call: c.id, Local: c.f.c.LocalAddr().String(), Sent: c.f.res.Packets}
		if cfg.Mode == VoiceEcho {
			cr.Received = c.recv
			if cr.Sent > cr.Received {
				cr.Lost = cr.Sent - cr.Received
			}
			if cr.Sent > 0 {
				cr.Loss = round6(float64(cr.Lost) / float64(cr.Sent))
			}
			cr.RTT, cr.Forward, cr.Return = c.rtt.Summary(), c.fwd.Summary(), c.ret.Summary()
			cr.JitterMS = c.jit.Millis()
			rtt.Merge(&c.rtt)
			fwd.Merge(&c.fwd)
		}
		res.Sent += cr.Sent
		res.Received += cr.Received
		res.Lost += cr.Lost
		res.WorstLoss = max(res.WorstLoss, cr.Loss)
		res.MaxJitterMS = max(res.MaxJitterMS, cr.JitterMS)
		res.PerCall = append(res.PerCall, cr)
	}
	if cfg.Mode == VoiceEcho && res.Sent > 0 {
		res.Loss = round6(float64(res.Lost) / float64(res.Sent))
	}
	res.RTT, res.Forward = rtt.Summary(), fwd.Summary()
	return res, nil
}

// drain waits for the echoes still in flight: until every packet sent is
// back, or the deadline.
func drain(ctx context.Context, calls []*call, deadline time.Time) {
	for {
		back := true
		for _, c := range calls {
			c.mu.Lock()
			back = back && c.recv >= c.f.res.Packets
			c.mu.Unlock()
		}
		next := time.Now().Add(5 * time.Millisecond)
		if next.After(deadline) {
			next = deadline
		}
		if back || !sleepUntil(ctx, next) || !time.Now().Before(deadline) {
			return
		}
	}
}

func (c *call) receive(size int) {
	buf := make([]byte, max(size, HeaderSize)+64)
	for {
		n, err := c.f.c.Read(buf)
		if err != nil {
			if isTimeout(err) {
				continue
			}
			return // closed
		}
		rx := time.Now()
		h, ok := parseHeader(buf[:n])
		if !ok || h.flags&flagEchoed == 0 || h.flow != uint32(c.id) {
			continue
		}
		c.mu.Lock()
		if !c.seen.testAndSet(h.seq) {
			c.recv++
			sent := time.Unix(0, h.sent)
			echoed := time.Unix(0, int64(h.aux))
			c.rtt.Add(rx.Sub(sent))
			c.fwd.Add(echoed.Sub(sent))
			c.ret.Add(rx.Sub(echoed))
			c.jit.Add(rx.Sub(sent))
		}
		c.mu.Unlock()
	}
}
