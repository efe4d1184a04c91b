package traffic

import (
	"context"
	"fmt"
	"github.com/hostqos/hostqos/internal/policy"
	"net"
	"time"
)

// Profiles of well-known CBR sources.
//
// "g729": a G.729 voice call as in the Q-Pod seed (Figure 24): one packet of
// 20 bytes of voice every 20 ms (50 pkt/s) carried in RTP/UDP/IP/Ethernet,
// 14+20+8+12+20+4 = 78 bytes on the wire, 31.2 kbit/s. We reproduce the
// packet exactly from the UDP payload up: the UDP payload is 32 bytes (the
// 12-byte RTP header plus 20 bytes of voice; our 32-byte measurement header
// takes the place of both), so over IPv4 the IP packet is 60 bytes and the
// Ethernet frame with FCS 78 bytes. Over IPv6 the same payload gives an
// 80-byte IP packet (98 on the wire).
const (
	ProfileG729 = "g729"

	G729PayloadSize = 32
	G729PacketRate  = 50
	G729WireBytes   = 78
)

// CBRConfig describes a constant-bit-rate UDP flow.
type CBRConfig struct {
	To   string // destination host:port (required)
	From string // optional local address host:port
	// Profile presets Size and PacketRate ("g729"); explicit values win.
	Profile string
	// Size is the UDP payload size in bytes, at least HeaderSize.
	Size int
	// Exactly one of PacketRate (packets/s) and BitRate (bits/s counted over
	// whole IP packets: payload + UDP + IP header) sets the rate.
	PacketRate float64
	BitRate    uint64
	Duration   time.Duration // how long to send (required unless Count)
	Count      uint64        // stop after this many packets (0 = no limit)
	DSCP       int           // DSCP to mark, NoDSCP to leave the default
	Flow       uint32        // flow id carried in every packet
}

// SendResult is what a UDP sender did.
type SendResult struct {
	To         string  `json:"to"`
	Flow       uint32  `json:"flow"`
	DSCP       string  `json:"dscp,omitempty"`
	Size       int     `json:"size"`
	Packets    uint64  `json:"packets"`
	Bytes      uint64  `json:"bytes"`    // UDP payload bytes
	IPBytes    uint64  `json:"ip_bytes"` // whole IP packets
	SendErrors uint64  `json:"send_errors"`
	DurationS  float64 `json:"duration_s"`
	PacketRate float64 `json:"packet_rate"`
	IPBitRate  float64 `json:"ip_bit_rate"`
}

func (c *CBRConfig) normalize() error {
	switch c.Profile {
	case "":
	case ProfileG729:
		if c.Size == 0 {
			c.Size = G729PayloadSize
		}
		if c.PacketRate == 0 && c.BitRate == 0 {
			c.PacketRate = G729PacketRate
		}
	default:
		return fieldErr("profile", c.Profile, "unknown profile", "use "+ProfileG729+" or leave it out")
	}
	if err := checkHostPort("to", c.To); err != nil {
		return err
	}
	if c.Size == 0 {
		c.Size = 1200
	}
	if err := checkSize("size", c.Size); err != nil {
		return err
	}
	if c.PacketRate != 0 && c.BitRate > 0 {
		return fieldErr("packet_rate", c.PacketRate, "given together with a bit rate", "give one of a packet rate and a bit rate")
	}
	if c.PacketRate < 0 || c.PacketRate > MaxPacketRate {
		return fieldErr("packet_rate", c.PacketRate, "out of range", "use 0 < packets/s ≤ 10000000")
	}
	if c.PacketRate == 0 && c.BitRate == 0 {
		return fieldErr("bit_rate", "", "no rate", "give a bit rate (e.g. 10mbit), a packet rate (e.g. 1000) or the "+ProfileG729+" profile")
	}
	if c.Duration < 0 || (c.Duration == 0 && c.Count == 0) || c.Duration > MaxDuration {
		return checkDuration("duration", c.Duration)
	}
	if c.Duration == 0 {
		c.Duration = MaxDuration
	}
	return checkDSCP(c.DSCP)
}

// MaxDuration bounds every generator and sink.
const MaxDuration = 24 * time.Hour

// MaxPayload is the largest UDP payload the generators send.
const MaxPayload = 65507

func dscpString(d int) string {
	if d < 0 {
		return ""
	}
	return policy.DSCP(d).String()
}

// udpFlow sends our datagrams on one connected socket and counts them.
type udpFlow struct {
	c      *net.UDPConn
	buf    []byte
	res    *SendResult
	ipOver int
}

func newUDPFlow(c *net.UDPConn, to string, flow uint32, dscp, maxSize int) *udpFlow {
	return &udpFlow{
		c:      c,
		buf:    make([]byte, max(maxSize, HeaderSize)),
		res:    &SendResult{To: to, Flow: flow, DSCP: dscpString(dscp)},
		ipOver: ipOverhead(isV6(c.RemoteAddr())),
	}
}

func (f *udpFlow) send(size int, aux uint64) { f.sendAt(size, aux, time.Now().UnixNano()) }

// sendAt sends one datagram stamped with the given send time (a video frame's
// fragments all carry the frame's time).
func (f *udpFlow) sendAt(size int, aux uint64, sent int64) {
	h := header{flow: f.res.Flow, seq: f.res.Packets, sent: sent, aux: aux}
	h.put(f.buf)
	if _, err := f.c.Write(f.buf[:size]); err != nil {
		f.res.SendErrors++
	}
	// A datagram the kernel refused still took a sequence number, so the
	// sink counts it as lost: the loss the application would have seen.
	f.res.Packets++
	f.res.Bytes += uint64(size)
	f.res.IPBytes += uint64(size + f.ipOver)
}

func (f *udpFlow) finish(start time.Time, aux uint64) *SendResult {
	el := time.Since(start)
	sendFIN(f.c, f.res.Flow, f.res.Packets, aux)
	r := f.res
	r.DurationS = round3(el.Seconds())
	if el > 0 {
		r.PacketRate = round3(float64(r.Packets) / el.Seconds())
		r.IPBitRate = float64(int64(float64(r.IPBytes*8) / el.Seconds()))
	}
	return r
}

// pacer releases events at a fixed interval, catching up after late wakeups
// so the average rate stays exact; it never bursts more than maxLag behind.
type pacer struct {
	next     time.Time
	interval time.Duration
}

const maxLag = 50 * time.Millisecond

func (p *pacer) wait(ctx context.Context) bool {
	if now := time.Now(); now.Sub(p.next) > maxLag {
		p.next = now
	}
	if !sleepUntil(ctx, p.next) {
		return false
	}
	p.next = p.next.Add(p.interval)
	return true
}

// SendCBR sends a CBR UDP flow and returns what it sent. It ends after the
// duration or count, or when ctx is cancelled, then sends FIN packets so a
// sink knows how many packets to expect.
func SendCBR(ctx context.Context, cfg CBRConfig) (*SendResult, error) {
	if err := cfg.normalize(); err != nil {
		return nil, err
	}
	c, err := dialUDP(ctx, cfg.To, cfg.From, cfg.DSCP)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	f := newUDPFlow(c, cfg.To, cfg.Flow, cfg.DSCP, cfg.Size)
	f.res.Size = cfg.Size
	pps := cfg.PacketRate
	if pps == 0 {
		pps = float64(cfg.BitRate) / float64(8*(cfg.Size+f.ipOver))
	}
	if pps <= 0 {
		return nil, fmt.Errorf("rate: below one packet per run")
	}
	start := time.Now()
	end := start.Add(cfg.Duration)
	p := pacer{next: start, interval: time.Duration(float64(time.Second) / pps)}
	for cfg.Count == 0 || f.res.Packets < cfg.Count {
		if !p.wait(ctx) || !time.Now().Before(end) {
			break
		}
		f.send(cfg.Size, 0)
	}
	return f.finish(start, 0), nil
}
