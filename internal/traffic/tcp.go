package traffic

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sort"
	"sync"
	"time"
)

// Every TCP connection to a TCP sink starts with a 16-byte preamble:
// "HQT", a kind byte, 4 reserved bytes and a big-endian uint64 size.
const (
	preambleSize = 16
	kindBulk     = 'B' // client streams data until it closes
	kindDown     = 'D' // server sends size bytes, then closes (a download)
	kindUp       = 'U' // client sends size bytes, server answers one byte
)

// MaxTransfer bounds one short transfer.
const MaxTransfer = 1 << 34

func putPreamble(kind byte, size uint64) []byte {
	b := make([]byte, preambleSize)
	copy(b, "HQT")
	b[3] = kind
	binary.BigEndian.PutUint64(b[8:], size)
	return b
}

// TCPSinkConfig describes a TCP sink. One sink serves bulk streams and short
// transfers (RunFCT) alike.
type TCPSinkConfig struct {
	Listen   string
	Duration time.Duration // longest run (required)
	// Streams, if positive, ends the run once that many bulk streams closed.
	Streams int
}

// StreamResult is one bulk stream at the sink.
type StreamResult struct {
	Remote     string  `json:"remote"`
	Bytes      uint64  `json:"bytes"`
	DurationS  float64 `json:"duration_s"`
	GoodputBps float64 `json:"goodput_bps"`
}

// TCPSinkResult is what a TCP sink received.
type TCPSinkResult struct {
	Listen    string  `json:"listen"`
	DurationS float64 `json:"duration_s"`
	Bytes     uint64  `json:"bytes"`
	// GoodputBps is bulk bytes received over the time from the first to the
	// last byte, in bits per second, all streams together.
	GoodputBps float64        `json:"goodput_bps"`
	Streams    []StreamResult `json:"streams"`
	Transfers  uint64         `json:"transfers"` // short transfers served
}

// TCPSink receives bulk TCP streams and serves short transfers.
type TCPSink struct {
	cfg TCPSinkConfig
	ln  *net.TCPListener
}

// ListenTCPSink opens the listening socket now (in the caller's namespace).
func ListenTCPSink(ctx context.Context, cfg TCPSinkConfig) (*TCPSink, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("listen on TCP %s: %w", cfg.Listen, err)
	}
	return &TCPSink{cfg: cfg, ln: ln.(*net.TCPListener)}, nil
}

// Addr is the address the sink listens on.
func (s *TCPSink) Addr() netip.AddrPort { return s.ln.Addr().(*net.TCPAddr).AddrPort() }

// Close releases the listener (Run also does at its end).
func (s *TCPSink) Close() error { return s.ln.Close() }

type bulkStream struct {
	remote      string
	bytes       uint64
	first, last time.Time
}

// Run serves until the duration ends, the expected bulk streams closed or
// ctx was cancelled.
func (s *TCPSink) Run(ctx context.Context) (*TCPSinkResult, error) {
	start := time.Now()
	ctx, cancel := context.WithDeadline(ctx, start.Add(s.cfg.Duration))
	defer cancel()
	var (
		mu        sync.Mutex
		streams   []*bulkStream
		conns     = map[net.Conn]struct{}{}
		done      int
		transfers uint64
		wg        sync.WaitGroup
	)
	stop := context.AfterFunc(ctx, func() {
		s.ln.Close()
		mu.Lock()
		for c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	defer stop()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				break
			}
			return nil, fmt.Errorf("accept on %s: %w", s.cfg.Listen, err)
		}
		mu.Lock()
		if ctx.Err() != nil {
			mu.Unlock()
			c.Close()
			break
		}
		conns[c] = struct{}{}
		mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() {
				mu.Lock()
				delete(conns, c)
				mu.Unlock()
				c.Close()
			}()
			var pre [preambleSize]byte
			if _, err := io.ReadFull(c, pre[:]); err != nil || string(pre[:3]) != "HQT" {
				return
			}
			size := binary.BigEndian.Uint64(pre[8:])
			switch pre[3] {
			case kindBulk:
				bs := &bulkStream{remote: c.RemoteAddr().String()}
				mu.Lock()
				streams = append(streams, bs)
				mu.Unlock()
				buf := make([]byte, 128<<10)
				for {
					n, err := c.Read(buf)
					if n > 0 {
						now := time.Now()
						mu.Lock()
						if bs.bytes == 0 {
							bs.first = now
						}
						bs.bytes += uint64(n)
						bs.last = now
						mu.Unlock()
					}
					if err != nil {
						break
					}
				}
				mu.Lock()
				done++
				if s.cfg.Streams > 0 && done >= s.cfg.Streams {
					cancel()
				}
				mu.Unlock()
			case kindDown:
				if size > MaxTransfer {
					return
				}
				if _, err := io.CopyN(c, zeroReader{}, int64(size)); err == nil {
					mu.Lock()
					transfers++
					mu.Unlock()
				}
			case kindUp:
				if size > MaxTransfer {
					return
				}
				if _, err := io.CopyN(io.Discard, c, int64(size)); err == nil {
					if _, err := c.Write([]byte{1}); err == nil {
						mu.Lock()
						transfers++
						mu.Unlock()
					}
				}
			}
		}()
	}
	cancel()
	wg.Wait()
	res := &TCPSinkResult{Listen: s.Addr().String(), DurationS: round3(time.Since(start).Seconds()), Transfers: transfers}
	var first, last time.Time
	for _, bs := range streams {
		sr := StreamResult{Remote: bs.remote, Bytes: bs.bytes}
		if bs.bytes > 0 {
			d := bs.last.Sub(bs.first)
			sr.DurationS = round3(d.Seconds())
			if d > 0 {
				sr.GoodputBps = float64(int64(float64(bs.bytes*8) / d.Seconds()))
			}
			if first.IsZero() || bs.first.Before(first) {
				first = bs.first
			}
			if bs.last.After(last) {
				last = bs.last
			}
		}
		res.Bytes += bs.bytes
		res.Streams = append(res.Streams, sr)
	}
	sort.Slice(res.Streams, func(i, j int) bool { return res.Streams[i].Remote < res.Streams[j].Remote })
	if d := last.Sub(first); d > 0 {
		res.GoodputBps = float64(int64(float64(res.Bytes*8) / d.Seconds()))
	}
	return res, nil
}

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// BulkConfig describes bulk TCP senders.
type BulkConfig struct {
	To       string
	From     string // optional local host
	Streams  int    // parallel connections (default 1)
	Duration time.Duration
	DSCP     int
}

// BulkResult is what the bulk sender wrote.
type BulkResult struct {
	To        string  `json:"to"`
	Streams   int     `json:"streams"`
	DSCP      string  `json:"dscp,omitempty"`
	Bytes     uint64  `json:"bytes"`
	DurationS float64 `json:"duration_s"`
	// SendRateBps is bytes accepted by the kernel per second, in bits; the
	// sink's goodput is the real measure.
	SendRateBps float64 `json:"send_rate_bps"`
}

func tcpDialer(from string, dscp int) (*net.Dialer, error) {
	d := &net.Dialer{Control: controlTOS(dscp), Timeout: 10 * time.Second}
	if from != "" {
		ip, err := netip.ParseAddr(from)
		if err != nil {
			return nil, fmt.Errorf("local address %q: not an IP address", from)
		}
		d.LocalAddr = &net.TCPAddr{IP: ip.AsSlice()}
	}
	return d, nil
}

// SendBulk opens the streams and writes as fast as TCP allows for the
// duration.
func SendBulk(ctx context.Context, cfg BulkConfig) (*BulkResult, error) {
	if err := cfg.normalize(); err != nil {
		return nil, err
	}
	d, err := tcpDialer(cfg.From, cfg.DSCP)
	if err != nil {
		return nil, err
	}
	conns := make([]net.Conn, 0, cfg.Streams)
	closeAll := func() {
		for _, c := range conns {
			c.Close()
		}
	}
	for i := 0; i < cfg.Streams; i++ {
		c, err := d.DialContext(ctx, "tcp", cfg.To)
		if err != nil {
			closeAll()
			return nil, fmt.Errorf("connect stream %d to %s: %w", i, cfg.To, err)
		}
		conns = append(conns, c)
	}
	start := time.Now()
	end := start.Add(cfg.Duration)
	var (
		mu    sync.Mutex
		total uint64
		wg    sync.WaitGroup
	)
	stop := context.AfterFunc(ctx, func() {
		for _, c := range conns {
			_ = c.SetWriteDeadline(time.Now())
		}
	})
	defer stop()
	for _, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = c.SetWriteDeadline(end)
			buf := make([]byte, 64<<10)
			var n uint64
			if _, err := c.Write(putPreamble(kindBulk, 0)); err == nil {
				for ctx.Err() == nil {
					w, err := c.Write(buf)
					n += uint64(w)
					if err != nil {
						break
					}
				}
			}
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.CloseWrite()
			}
			mu.Lock()
			total += n
			mu.Unlock()
		}()
	}
	wg.Wait()
	el := time.Since(start)
	closeAll()
	res := &BulkResult{To: cfg.To, Streams: cfg.Streams, DSCP: dscpString(cfg.DSCP), Bytes: total, DurationS: round3(el.Seconds())}
	if el > 0 {
		res.SendRateBps = float64(int64(float64(total*8) / el.Seconds()))
	}
	return res, nil
}

// FCT directions.
const (
	FCTDown = "down" // the server sends Size bytes (a download)
	FCTUp   = "up"   // the client sends Size bytes (an upload)
)

// FCTConfig describes a series of short TCP transfers to a TCP sink.
type FCTConfig struct {
	To          string
	From        string // optional local host
	Count       int    // number of transfers
	Size        uint64 // bytes per transfer
	Concurrency int    // transfers in flight at once (default 1)
	Direction   string // FCTDown (default) or FCTUp
	DSCP        int
	Timeout     time.Duration // per transfer (default 10s)
	// Duration bounds the whole run (default Count × Timeout).
	Duration time.Duration
}

// FCTResult reports flow completion times: from the start of the TCP
// handshake to the last byte (down) or the server's acknowledgement (up).
type FCTResult struct {
	To        string   `json:"to"`
	Direction string   `json:"direction"`
	Size      uint64   `json:"size"`
	DSCP      string   `json:"dscp,omitempty"`
	Count     int      `json:"count"`
	Completed int      `json:"completed"`
	Failed    int      `json:"failed"`
	FCT       Summary  `json:"fct"`
	Errors    []string `json:"errors,omitempty"` // the first few
}

// RunFCT runs the transfers. Connections are all opened by the calling
// goroutine (so in the caller's network namespace); the transfers themselves
// run concurrently.
func RunFCT(ctx context.Context, cfg FCTConfig) (*FCTResult, error) {
	if err := cfg.normalize(); err != nil {
		return nil, err
	}
	kind := byte(kindDown)
	if cfg.Direction == FCTUp {
		kind = kindUp
	}
	d, err := tcpDialer(cfg.From, cfg.DSCP)
	if err != nil {
		return nil, err
	}
	d.Timeout = cfg.Timeout
	ctx, cancel := context.WithTimeout(ctx, cfg.Duration)
	defer cancel()

	type job struct {
		c     net.Conn
		start time.Time
		err   error
	}
	jobs := make(chan job)
	var (
		mu  sync.Mutex
		rec Recorder
		res = &FCTResult{To: cfg.To, Direction: cfg.Direction, Size: cfg.Size, DSCP: dscpString(cfg.DSCP), Count: cfg.Count}
		wg  sync.WaitGroup
	)
	fail := func(err error) {
		mu.Lock()
		res.Failed++
		if len(res.Errors) < 5 {
			res.Errors = append(res.Errors, err.Error())
		}
		mu.Unlock()
	}
	slots := make(chan struct{}, cfg.Concurrency)
	for w := 0; w < cfg.Concurrency; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				if j.err != nil {
					fail(j.err)
					<-slots
					continue
				}
				err := transfer(j.c, kind, cfg.Size, j.start.Add(cfg.Timeout))
				j.c.Close()
				if err != nil {
					fail(err)
				} else {
					mu.Lock()
					rec.Add(time.Since(j.start))
					res.Completed++
					mu.Unlock()
				}
				<-slots
			}
		}()
	}
	// The dialer loop runs here, in the caller's goroutine.
	for i := 0; i < cfg.Count; i++ {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		st := time.Now()
		c, err := d.DialContext(ctx, "tcp", cfg.To)
		if err != nil {
			err = fmt.Errorf("connect to %s: %w", cfg.To, err)
		}
		jobs <- job{c: c, start: st, err: err}
	}
	close(jobs)
	wg.Wait()
	res.FCT = rec.Summary()
	return res, nil
}

func transfer(c net.Conn, kind byte, size uint64, deadline time.Time) error {
	_ = c.SetDeadline(deadline)
	if _, err := c.Write(putPreamble(kind, size)); err != nil {
		return fmt.Errorf("send request: %w", err)
	}
	if kind == kindDown {
		n, err := io.CopyN(io.Discard, c, int64(size))
		if err != nil {
			return fmt.Errorf("receive %d bytes (got %d): %w", size, n, err)
		}
		return nil
	}
	if _, err := io.CopyN(c, zeroReader{}, int64(size)); err != nil {
		return fmt.Errorf("send %d bytes: %w", size, err)
	}
	var ack [1]byte
	if _, err := io.ReadFull(c, ack[:]); err != nil {
		return fmt.Errorf("receive acknowledgement: %w", err)
	}
	return nil
}
