package traffic

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"time"
)

// Echo is a UDP echo server. It sends every datagram back to its sender with
// the DSCP it arrived with; datagrams carrying our header are flagged as
// echoed and stamped with the server's receive time, so the client can split
// the round trip into its two one-way halves.
type Echo struct {
	conn *net.UDPConn
}

// EchoResult is what an echo server did.
type EchoResult struct {
	Listen    string            `json:"listen"`
	DurationS float64           `json:"duration_s"`
	Packets   uint64            `json:"packets"`
	Bytes     uint64            `json:"bytes"`
	Errors    uint64            `json:"send_errors"`
	DSCP      map[string]uint64 `json:"dscp"`
	FirstDSCP string            `json:"first_dscp"`
}

// ListenEcho opens the echo socket now (in the caller's network namespace).
func ListenEcho(ctx context.Context, addr string) (*Echo, error) {
	c, err := listenUDP(ctx, addr)
	if err != nil {
		return nil, err
	}
	return &Echo{conn: c}, nil
}

// Addr is the address the echo server listens on.
func (e *Echo) Addr() netip.AddrPort { return e.conn.LocalAddr().(*net.UDPAddr).AddrPort() }

// Close releases the socket (Run also does at its end).
func (e *Echo) Close() error { return e.conn.Close() }

// Run echoes until duration passes or ctx is cancelled.
func (e *Echo) Run(ctx context.Context, duration time.Duration) (*EchoResult, error) {
	defer e.conn.Close()
	if duration <= 0 || duration > MaxDuration {
		return nil, fmt.Errorf("duration %v: must be positive and at most %v", duration, MaxDuration)
	}
	res := &EchoResult{Listen: e.Addr().String(), DSCP: map[string]uint64{}}
	first := NoDSCP
	buf := make([]byte, 65536)
	oob := make([]byte, oobSize)
	start := time.Now()
	end := start.Add(duration)
	// Wake the read at once when ctx is cancelled.
	defer context.AfterFunc(ctx, func() { _ = e.conn.SetReadDeadline(time.Now()) })()
	for ctx.Err() == nil && time.Now().Before(end) {
		_ = e.conn.SetReadDeadline(minTime(end, time.Now().Add(100*time.Millisecond)))
		n, oobn, _, from, err := e.conn.ReadMsgUDPAddrPort(buf, oob)
		if err != nil {
			if isTimeout(err) {
				continue
			}
			return nil, fmt.Errorf("receive on %s: %w", res.Listen, err)
		}
		rx := time.Now().UnixNano()
		dscp := parseTOS(oob[:oobn])
		if first == NoDSCP {
			first = dscp
		}
		res.DSCP[dscpKey(dscp)]++
		if h, ok := parseHeader(buf[:n]); ok && h.flags&flagFIN == 0 {
			buf[3] |= flagEchoed
			binary.BigEndian.PutUint64(buf[24:], uint64(rx))
		}
		if _, _, err := e.conn.WriteMsgUDPAddrPort(buf[:n], tosCmsg(from.Addr(), dscp), from); err != nil {
			res.Errors++
			continue
		}
		res.Packets++
		res.Bytes += uint64(n)
	}
	res.DurationS = round3(time.Since(start).Seconds())
	res.FirstDSCP = dscpString(first)
	return res, nil
}
