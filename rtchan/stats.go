package rtchan

import (
	"math"
	"time"
)

// ChannelStats are the sender-side counters of one channel.
type ChannelStats struct {
	ID         ChannelID `json:"id"`
	Name       string    `json:"name,omitempty"`
	BestEffort bool      `json:"best_effort,omitempty"`
	// MsgsAccepted entered the message queue; MsgsDropped overflowed it;
	// MsgsHeld were held back (DropOverflow off); MsgsStarted were taken by
	// the handler; MsgsSent completed transmission of all their packets.
	MsgsAccepted uint64 `json:"msgs_accepted"`
	MsgsDropped  uint64 `json:"msgs_dropped"`
	MsgsHeld     uint64 `json:"msgs_held,omitempty"`
	MsgsStarted  uint64 `json:"msgs_started"`
	MsgsSent     uint64 `json:"msgs_sent"`
	// PktsSent completed transmission; PktsDropped were dropped (message
	// overflow counts all its packets).
	PktsSent    uint64 `json:"pkts_sent"`
	PktsDropped uint64 `json:"pkts_dropped"`
	BytesSent   uint64 `json:"bytes_sent"`
	// Misses counts packets that completed transmission after their
	// deadline; MsgMisses messages whose last packet did.
	Misses    uint64 `json:"misses"`
	MsgMisses uint64 `json:"msg_misses"`
	// Laxity of completed real-time messages: deadline - completion time.
	MinLaxity time.Duration `json:"min_laxity_ns"`
	MaxLaxity time.Duration `json:"max_laxity_ns"`
	SumLaxity int64         `json:"sum_laxity_ns"`
	// Scheduling events.
	ContextSwitches uint64 `json:"context_switches"`
	Preemptions     uint64 `json:"preemptions"`
	Blocks          uint64 `json:"blocks"`
	MmaxViolations  uint64 `json:"mmax_violations,omitempty"`
}

// MeanLaxity is the mean laxity of completed real-time messages.
func (s ChannelStats) MeanLaxity() time.Duration {
	if s.MsgsSent == 0 || s.BestEffort {
		return 0
	}
	return time.Duration(s.SumLaxity / int64(s.MsgsSent))
}

// clean replaces the sentinels of empty min/max with zero.
func (s ChannelStats) clean() ChannelStats {
	if s.MinLaxity == math.MaxInt64 {
		s.MinLaxity = 0
	}
	if s.MaxLaxity == math.MinInt64 {
		s.MaxLaxity = 0
	}
	return s
}
