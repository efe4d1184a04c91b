package rtchan

import (
	"errors"
	"fmt"
	"time"
)

// Spec is a channel's traffic and QoS specification: a linear bounded arrival
// process (Mmax, Rmax, Bmax) and a delay bound.
type Spec struct {
	// Name labels the channel in reports (optional).
	Name string `json:"name,omitempty"`
	// Mmax is the maximum message size in bytes.
	Mmax int `json:"mmax"`
	// Rmax is the maximum message rate in messages per second. Imin, when
	// set, takes precedence (it is exact; 1/Rmax is rounded to the ns).
	Rmax float64 `json:"rmax,omitempty"`
	// Imin is the minimum logical inter-arrival time 1/Rmax.
	Imin time.Duration `json:"imin,omitempty"`
	// Bmax is the maximum burst in messages; it sizes the message queue
	// (Bmax) and the packet queue (Bmax·N_pkts).
	Bmax int `json:"bmax"`
	// Delay is the end-to-end delay bound of a message, measured from its
	// logical arrival time. What a link may take of it is
	// Params.Requested: Delay less Params.NetDelay less Upstream.
	Delay time.Duration `json:"delay,omitempty"`
	// Upstream is the part of Delay the hops before this link on the
	// channel's route take: the sum of their worst-case response times
	// while the channel is being set up (0 at the sender).
	Upstream time.Duration `json:"upstream,omitempty"`
	// Bound is the local delay bound the channel was given when it was
	// established on this link (LocalBounds); 0 for a channel being
	// admitted. An established channel keeps it: a later channel is
	// admitted only if this one's worst-case response time stays within
	// it, and its messages' deadlines are logical arrival + Bound.
	Bound time.Duration `json:"bound,omitempty"`
	// BestEffort makes a best-effort channel: no rate, no delay bound, no
	// admission test; served FIFO after current real-time traffic.
	BestEffort bool `json:"best_effort,omitempty"`
}

// MinInterval returns I_min.
func (s Spec) MinInterval() time.Duration {
	if s.Imin > 0 {
		return s.Imin
	}
	if s.Rmax > 0 {
		return time.Duration(float64(time.Second)/s.Rmax + 0.5)
	}
	return 0
}

// Validate checks a spec for obvious errors.
func (s Spec) Validate() error {
	if s.Mmax <= 0 {
		return fmt.Errorf("check spec %q: mmax=%d must be positive", s.Name, s.Mmax)
	}
	if s.Bmax <= 0 {
		return fmt.Errorf("check spec %q: bmax=%d must be positive", s.Name, s.Bmax)
	}
	if s.BestEffort {
		return nil
	}
	if s.MinInterval() <= 0 {
		return fmt.Errorf("check spec %q: rmax=%g or imin=%v must be positive for a real-time channel", s.Name, s.Rmax, s.Imin)
	}
	if s.Delay <= 0 {
		return fmt.Errorf("check spec %q: delay=%v must be positive for a real-time channel", s.Name, s.Delay)
	}
	if s.Upstream < 0 || s.Bound < 0 {
		return fmt.Errorf("check spec %q: upstream=%v and bound=%v must not be negative", s.Name, s.Upstream, s.Bound)
	}
	return nil
}

// Granularity says where a handler may yield the CPU to a waiting
// higher-priority handler.
type Granularity int

const (
	// PreemptBlock yields every P packets (cooperative preemption).
	PreemptBlock Granularity = iota
	// PreemptMessage yields only at message boundaries.
	PreemptMessage
	// PreemptNever keeps the CPU until the handler blocks or its message
	// queue is empty (non-preemptive processing).
	PreemptNever
)

func (g Granularity) String() string {
	switch g {
	case PreemptBlock:
		return "block"
	case PreemptMessage:
		return "message"
	case PreemptNever:
		return "never"
	}
	return fmt.Sprintf("granularity(%d)", int(g))
}

// Policy selects among the architecture's configurable policies (seed
// Table 2a). The zero value is not the default: use DefaultPolicy.
type Policy struct {
	// WorkConserving lets handlers process early messages (ahead of their
	// logical arrival time) in run queue Q3 through channel proxies, and
	// puts their packets in link queue Q3.
	WorkConserving bool
	// EarlyAboveBE ranks early real-time handlers above best-effort ones
	// (the seed's Fig. 9b experiment); normally early work ranks last.
	EarlyAboveBE bool
	// RTPreempt and BEPreempt set where real-time and best-effort handlers
	// yield the CPU.
	RTPreempt Granularity
	BEPreempt Granularity
	// EnforceImin shapes messages with logical arrival times. Without it a
	// message's logical arrival time is its actual arrival time.
	EnforceImin bool
	// BlockHandler blocks a handler whose packet queue is full until the
	// link frees a buffer; otherwise the packet is dropped and counted.
	BlockHandler bool
	// DecayDeadline degrades the deadline of packets beyond a message's
	// Mmax-derived packet count, in proportion to the extra packets.
	DecayDeadline bool
	// DropOverflow drops messages that overflow the message queue (Bmax);
	// otherwise the sender is held back until space frees up.
	DropOverflow bool
}

// DefaultPolicy is the configuration of the seed's evaluation (section 5):
// non-work-conserving processing, cooperative preemption for every handler,
// I_min enforced, handlers blocked on packet-queue overflow, message-queue
// overflow dropped.
func DefaultPolicy() Policy {
	return Policy{
		RTPreempt:    PreemptBlock,
		BEPreempt:    PreemptBlock,
		EnforceImin:  true,
		BlockHandler: true,
		DropOverflow: true,
	}
}

// ChannelID names an established channel on a host.
type ChannelID int

// Errors returned by the API.
var (
	ErrQueueFull     = errors.New("message queue full")
	ErrNoChannel     = errors.New("no such channel")
	ErrClosed        = errors.New("closed")
	ErrNoEndpoint    = errors.New("no such endpoint")
	ErrMessageTooBig = errors.New("message larger than the receiver accepts")
)

// SeedSpecs is the channel set of the seed's Table 3, what its evaluation
// admits with SeedParams: 60 KB messages; ch0 (Bmax 12, I_min 50 ms, delay
// 40 ms), ch1 (Bmax 8, 30 ms, 25 ms), ch2 (Bmax 1, 30 ms, 30 ms) and ch3,
// best effort (Bmax 10).
func SeedSpecs() []Spec {
	const m = 60 * 1024
	return []Spec{
		{Name: "ch0", Mmax: m, Bmax: 12, Imin: 50 * time.Millisecond, Delay: 40 * time.Millisecond},
		{Name: "ch1", Mmax: m, Bmax: 8, Imin: 30 * time.Millisecond, Delay: 25 * time.Millisecond},
		{Name: "ch2", Mmax: m, Bmax: 1, Imin: 30 * time.Millisecond, Delay: 30 * time.Millisecond},
		{Name: "ch3", Mmax: m, Bmax: 10, BestEffort: true},
	}
}
