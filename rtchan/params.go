package rtchan

import (
	"fmt"
	"time"
)

// Params is the abstraction of the host communication subsystem that
// admission control and the virtual-time engine both use: per-packet and
// per-preemption costs, the packet size, the preemption granularity and the
// packet transmission time model L_x(s) = C_x + s / min(B_l, B_x).
//
// All costs are exact nanosecond durations so that the admission arithmetic
// and the virtual-time runs are reproducible bit for bit.
type Params struct {
	// CswXK and CswEDF are the two parts of a context switch between channel
	// handlers: the base kernel switch and the multi-class EDF layer above it
	// (seed Table 2b: C_sw^xk and C_sw^edf). The C_sw of section 3.2 is their
	// sum, see Csw.
	CswXK  time.Duration
	CswEDF time.Duration
	// Ccm is the cache-miss penalty a handler pays after a context switch.
	Ccm time.Duration
	// Cp1st is the protocol processing cost of a message's first packet
	// (fetch the message, timestamp, slow fragmentation path, encapsulation).
	Cp1st time.Duration
	// Cp is the protocol processing cost of each further packet.
	Cp time.Duration
	// Cl is the per-packet link scheduling cost: select a packet and initiate
	// its transmission. It is paid on the CPU, in a handler's context or in
	// interrupt context after a transmission completes.
	Cl time.Duration
	// P is the number of packets a handler processes between cooperative
	// preemption points.
	P int
	// S is the maximum packet (fragment) payload size in bytes.
	S int
	// Cx is the fixed overhead of initiating a transmission on the adapter.
	Cx time.Duration
	// LinkBps is B_l, the link bandwidth in bytes per second.
	LinkBps int64
	// XferBps is B_x, the host-to-adapter data transfer bandwidth in bytes
	// per second. Zero means "not a bottleneck" (use LinkBps only).
	XferBps int64
	// HeaderBytes is added to every packet's payload when computing its
	// transmission time (0 for the null device; the wire header for UDP).
	HeaderBytes int
	// NetDelay is the part of a channel's end-to-end delay bound consumed
	// outside this host (propagation, receiver). The local delay bound used
	// for deadlines and admission is Delay - NetDelay.
	NetDelay time.Duration
	// Horizon is the link horizon: how far ahead of its logical arrival time
	// an early real-time packet may be transmitted (0 = strictly
	// non-work-conserving link).
	Horizon time.Duration
}

// SeedParams returns the system parameters of the seed's prototype
// (Table 2b, with C_x ≈ 40 µs and 50 ns per byte from section 4.3), which
// give L_x(4096) = 244.8 µs (Table 2b prints it rounded as 245 µs).
func SeedParams() Params {
	return Params{
		CswXK:   20 * time.Microsecond,
		CswEDF:  55 * time.Microsecond,
		Ccm:     90 * time.Microsecond,
		Cp1st:   420 * time.Microsecond,
		Cp:      170 * time.Microsecond,
		Cl:      160 * time.Microsecond,
		P:       4,
		S:       4096,
		Cx:      40 * time.Microsecond,
		LinkBps: 20_000_000, // 50 ns per byte
	}
}

// Csw is the context switch overhead between handlers used in section 3.2:
// the EDF layer runs and then the base kernel switches contexts, so both
// parts are paid.
func (p Params) Csw() time.Duration { return p.CswXK + p.CswEDF }

// Requested is the local delay bound channel s is tested against on this
// link: the bound it was given if established (s.Bound), otherwise what
// the end-to-end bound leaves to this link, s.Delay − NetDelay − s.Upstream.
func (p Params) Requested(s Spec) time.Duration {
	if s.Bound > 0 {
		return s.Bound
	}
	return s.Delay - p.NetDelay - s.Upstream
}

// Ccsp is the total cost of one preemption, C_cm + C_sw.
func (p Params) Ccsp() time.Duration { return p.Ccm + p.Csw() }

// Bandwidth is min(B_l, B_x) in bytes per second.
func (p Params) Bandwidth() int64 {
	b := p.LinkBps
	if p.XferBps > 0 && (b <= 0 || p.XferBps < b) {
		b = p.XferBps
	}
	return b
}

// Lx is the transmission time of a packet with s payload bytes,
// C_x + (s+HeaderBytes)/min(B_l, B_x), rounded up to the nanosecond.
func (p Params) Lx(s int) time.Duration {
	b := p.Bandwidth()
	n := int64(s + p.HeaderBytes)
	return p.Cx + time.Duration(ceilDiv(n*int64(time.Second), b))
}

// Packets is the number of packets N_p = ceil(m/S) a message of m bytes is
// fragmented into (at least 1: an empty message still costs a packet).
func (p Params) Packets(m int) int {
	if m <= 0 {
		return 1
	}
	return int(ceilDiv(int64(m), int64(p.S)))
}

// LastSize is S^last, the payload of the last packet of an m-byte message.
func (p Params) LastSize(m int) int {
	if m <= 0 {
		return 0
	}
	if r := m % p.S; r != 0 {
		return r
	}
	return p.S
}

// PacketSize is the payload of packet idx (0-based) of an m-byte message.
func (p Params) PacketSize(m, idx int) int {
	if idx == p.Packets(m)-1 {
		return p.LastSize(m)
	}
	return p.S
}

// Validate checks that the parameters describe a usable system.
func (p Params) Validate() error {
	switch {
	case p.S <= 0:
		return fmt.Errorf("check params: packet size S=%d must be positive", p.S)
	case p.P <= 0:
		return fmt.Errorf("check params: packets between preemptions P=%d must be positive", p.P)
	case p.Bandwidth() <= 0:
		return fmt.Errorf("check params: link bandwidth %d B/s must be positive", p.Bandwidth())
	case p.CswXK < 0 || p.CswEDF < 0 || p.Ccm < 0 || p.Cp1st < 0 || p.Cp < 0 || p.Cl < 0 || p.Cx < 0:
		return fmt.Errorf("check params: costs must not be negative")
	case p.HeaderBytes < 0 || p.NetDelay < 0 || p.Horizon < 0:
		return fmt.Errorf("check params: header, net delay and horizon must not be negative")
	}
	return nil
}

func ceilDiv(a, b int64) int64 {
	if b <= 0 {
		panic("rtchan: ceilDiv by non-positive")
	}
	if a <= 0 {
		return a / b
	}
	return (a + b - 1) / b
}

// WireRate is the long-run rate, in bits per second on the wire (payload
// and every packet's headers), of a channel sending s.Mmax bytes every
// s.MinInterval(): what admission counts against the link's budget and
// the rate of the link's real-time class. 0 for a spec without an
// interval.
func (p Params) WireRate(s Spec) int64 {
	iv := int64(s.MinInterval())
	if iv <= 0 {
		return 0
	}
	wire := int64(s.Mmax) + int64(p.Packets(s.Mmax))*int64(p.HeaderBytes)
	return ceilDiv(wire*8*int64(time.Second), iv)
}
