package traffic

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// VideoConfig describes a frame-based video source: frames at FPS following
// a repeating GOP pattern of I, P and B frames, each fragmented into
// datagrams of at most MaxPayload bytes of UDP payload (our header
// included). A UDP sink reassembles frames and reports frame loss (a frame
// with any fragment missing is lost) and frame latency (send time to last
// fragment).
type VideoConfig struct {
	To                  string
	From                string
	FPS                 float64
	GOP                 string // e.g. "IBBPBBPBBPBB" (default)
	ISize, PSize, BSize int    // frame sizes in bytes of video data
	MaxPayload          int    // default 1400
	Duration            time.Duration
	DSCP                int
	Flow                uint32
}

// VideoResult is what the video source sent.
type VideoResult struct {
	SendResult
	Frames uint64  `json:"frames"`
	FPS    float64 `json:"fps"`
	GOP    string  `json:"gop"`
}

func (cfg *VideoConfig) normalize() error {
	if err := checkHostPort("to", cfg.To); err != nil {
		return err
	}
	if cfg.FPS == 0 {
		cfg.FPS = 25
	}
	if cfg.FPS < 0 || cfg.FPS > MaxFPS {
		return fieldErr("fps", cfg.FPS, "out of range", "use 0 < fps ≤ 1000")
	}
	if cfg.GOP == "" {
		cfg.GOP = "IBBPBBPBBPBB"
	}
	if g := strings.ToUpper(cfg.GOP); strings.Trim(g, "IPB") != "" {
		return fieldErr("gop", cfg.GOP, "not a GOP pattern", "use the letters I, P and B, e.g. IBBPBBPBBPBB")
	}
	cfg.GOP = strings.ToUpper(cfg.GOP)
	if cfg.ISize == 0 {
		cfg.ISize = 40000
	}
	if cfg.PSize == 0 {
		cfg.PSize = 12000
	}
	if cfg.BSize == 0 {
		cfg.BSize = 5000
	}
	for _, s := range []struct {
		n string
		v int
	}{{"i_size", cfg.ISize}, {"p_size", cfg.PSize}, {"b_size", cfg.BSize}} {
		if s.v < 1 || s.v > MaxFrameSize {
			return fieldErr(s.n, s.v, "out of range", fmt.Sprintf("use 1..%d bytes", MaxFrameSize))
		}
	}
	if cfg.MaxPayload == 0 {
		cfg.MaxPayload = 1400
	}
	if cfg.MaxPayload <= HeaderSize || cfg.MaxPayload > MaxPayload {
		return fieldErr("max_payload", cfg.MaxPayload, "out of range", fmt.Sprintf("use %d..%d bytes (1400 fits a 1500-byte MTU)", HeaderSize+1, MaxPayload))
	}
	if err := checkDuration("duration", cfg.Duration); err != nil {
		return err
	}
	return checkDSCP(cfg.DSCP)
}

// SendVideo sends frames for the duration.
func SendVideo(ctx context.Context, cfg VideoConfig) (*VideoResult, error) {
	if err := cfg.normalize(); err != nil {
		return nil, err
	}
	chunk := cfg.MaxPayload - HeaderSize
	for _, s := range []int{cfg.ISize, cfg.PSize, cfg.BSize} {
		if (s+chunk-1)/chunk > 65535 {
			return nil, fmt.Errorf("frame size %d: needs more than 65535 fragments of %d bytes", s, chunk)
		}
	}
	c, err := dialUDP(ctx, cfg.To, cfg.From, cfg.DSCP)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	f := newUDPFlow(c, cfg.To, cfg.Flow, cfg.DSCP, cfg.MaxPayload)
	f.res.Size = cfg.MaxPayload
	start := time.Now()
	end := start.Add(cfg.Duration)
	p := pacer{next: start, interval: time.Duration(float64(time.Second) / cfg.FPS)}
	var frames uint64
	for p.wait(ctx) && time.Now().Before(end) {
		size := cfg.BSize
		switch cfg.GOP[frames%uint64(len(cfg.GOP))] {
		case 'I':
			size = cfg.ISize
		case 'P':
			size = cfg.PSize
		}
		n := (size + chunk - 1) / chunk
		sent := time.Now().UnixNano()
		for i := 0; i < n; i++ {
			part := min(chunk, size-i*chunk)
			f.sendAt(HeaderSize+part, videoAux(uint32(frames), uint16(i), uint16(n)), sent)
		}
		frames++
	}
	r := &VideoResult{SendResult: *f.finish(start, frames), Frames: frames, FPS: cfg.FPS, GOP: cfg.GOP}
	return r, nil
}
