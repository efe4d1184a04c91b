package traffic

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"golang.org/x/sys/unix"
)

// SYNFloodConfig describes a TCP SYN flood: pure SYNs (no ACK) from one
// IPv4 source address and changing source ports, as a raw socket sends
// them (needs CAP_NET_RAW). For tests and benchmarks of SYN throttling.
type SYNFloodConfig struct {
	To       netip.AddrPort // IPv4 destination (required)
	From     netip.Addr     // IPv4 source (required; need not be local)
	Rate     float64        // SYNs per second; 0 = as fast as possible
	Duration time.Duration  // how long (required)
}

// SYNFloodResult is what the flood sent.
type SYNFloodResult struct {
	Sent      uint64  `json:"sent"`
	DurationS float64 `json:"duration_s"`
	Rate      float64 `json:"rate"` // SYNs per second
}

// Validate checks the config.
func (c SYNFloodConfig) Validate() error {
	switch {
	case !c.To.Addr().Is4() || c.To.Port() == 0:
		return fmt.Errorf("syn flood: to %v: want an IPv4 address and a port", c.To)
	case !c.From.Is4():
		return fmt.Errorf("syn flood: from %v: want an IPv4 address", c.From)
	case c.Rate < 0:
		return fmt.Errorf("syn flood: rate %v: must be ≥ 0", c.Rate)
	case c.Duration <= 0:
		return fmt.Errorf("syn flood: duration %v: must be positive", c.Duration)
	}
	return nil
}

// SendSYNFlood sends the flood from the calling thread's network
// namespace (open it inside testbed.Node.Do: the socket stays there).
func SendSYNFlood(ctx context.Context, cfg SYNFloodConfig) (*SYNFloodResult, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_RAW)
	if err != nil {
		return nil, fmt.Errorf("syn flood: open raw socket: %w", err)
	}
	defer unix.Close(fd)
	dst := &unix.SockaddrInet4{Addr: cfg.To.Addr().As4()}
	pkt := make([]byte, 40)
	src, to := cfg.From.As4(), cfg.To.Addr().As4()
	pkt[0] = 0x45
	binary.BigEndian.PutUint16(pkt[2:], 40)
	pkt[8] = 64
	pkt[9] = unix.IPPROTO_TCP
	copy(pkt[12:], src[:])
	copy(pkt[16:], to[:])
	tcp := pkt[20:]
	binary.BigEndian.PutUint16(tcp[2:], cfg.To.Port())
	tcp[12] = 5 << 4
	tcp[13] = 0x02 // SYN
	binary.BigEndian.PutUint16(tcp[14:], 64240)
	start := time.Now()
	end := start.Add(cfg.Duration)
	var sent uint64
	var interval time.Duration
	if cfg.Rate > 0 {
		interval = time.Duration(float64(time.Second) / cfg.Rate)
	}
	next := start
	for i := uint32(0); ; i++ {
		if i%256 == 0 {
			now := time.Now()
			if now.After(end) || ctx.Err() != nil {
				break
			}
		}
		if interval > 0 {
			if d := time.Until(next); d > 0 {
				time.Sleep(d)
			}
			next = next.Add(interval)
			if time.Now().After(end) {
				break
			}
		}
		binary.BigEndian.PutUint16(tcp[0:], uint16(1024+i%60000))
		binary.BigEndian.PutUint32(tcp[4:], i*2654435761)
		binary.BigEndian.PutUint16(tcp[16:], 0)
		binary.BigEndian.PutUint16(tcp[16:], tcpChecksum4(src, to, tcp))
		if err := unix.Sendto(fd, pkt, 0, dst); err != nil {
			if errors.Is(err, unix.ENOBUFS) || errors.Is(err, unix.EAGAIN) {
				continue
			}
			return nil, fmt.Errorf("syn flood: send: %w", err)
		}
		sent++
	}
	d := time.Since(start).Seconds()
	return &SYNFloodResult{Sent: sent, DurationS: d, Rate: float64(sent) / d}, nil
}

// tcpChecksum4 is the TCP checksum over the IPv4 pseudo-header and seg.
func tcpChecksum4(src, dst [4]byte, seg []byte) uint16 {
	var sum uint32
	for i := 0; i < 4; i += 2 {
		sum += uint32(src[i])<<8 | uint32(src[i+1])
		sum += uint32(dst[i])<<8 | uint32(dst[i+1])
	}
	sum += unix.IPPROTO_TCP + uint32(len(seg))
	for i := 0; i+1 < len(seg); i += 2 {
		sum += uint32(seg[i])<<8 | uint32(seg[i+1])
	}
	if len(seg)%2 == 1 {
		sum += uint32(seg[len(seg)-1]) << 8
	}
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}
