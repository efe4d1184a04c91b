package traffic

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// FieldError is a config field whose value is refused. Field is the
// field's name in lower case with underscores ("packet_rate", "max_payload"),
// so a front door can map it to its own word for it (a flag).
type FieldError struct {
	Field  string
	Value  string // the value as the config held it; "" when missing
	Reason string // what is wrong with it
	Fix    string // what to give instead
}

func (e *FieldError) Error() string {
	if e.Value == "" {
		return fmt.Sprintf("%s: %s; %s", e.Field, e.Reason, e.Fix)
	}
	return fmt.Sprintf("%s %s: %s; %s", e.Field, e.Value, e.Reason, e.Fix)
}

func fieldErr(field string, value any, reason, fix string) *FieldError {
	v := fmt.Sprint(value)
	if s, ok := value.(string); ok {
		v = strconv.Quote(s)
		if s == "" {
			v = ""
		}
	}
	return &FieldError{Field: field, Value: v, Reason: reason, Fix: fix}
}

// Limits of the tools' configs.
const (
	MaxPacketRate  = 10e6 // packets/s of one CBR flow
	MaxVoiceRate   = 1e6  // packets/s of all voice calls together
	MaxCalls       = 10000
	MaxStreams     = 1024 // TCP streams of one bulk sender
	MaxConcurrency = 1024 // FCT transfers in flight
	MaxTransfers   = 1_000_000
	MaxFrameSize   = 16 << 20 // bytes of one video frame
	MaxFPS         = 1000
	MaxAlpha       = 100
	MaxDrain       = time.Minute
	MinInterval    = time.Millisecond
	MaxInterval    = time.Hour
)

// checkHostPort checks a required host:port.
func checkHostPort(field, v string) error {
	const fix = "give host:port, e.g. 198.18.2.2:5001 or [2001:db8:2::2]:5001"
	if v == "" {
		return fieldErr(field, v, "required", fix)
	}
	i := strings.LastIndex(v, ":")
	if i < 0 {
		return fieldErr(field, v, "not host:port", fix)
	}
	if p, err := strconv.Atoi(v[i+1:]); err != nil || p < 0 || p > 65535 {
		return fieldErr(field, v, "not host:port", fix)
	}
	return nil
}

// checkDuration checks a required duration: positive, at most MaxDuration.
func checkDuration(field string, d time.Duration) error {
	if d <= 0 || d > MaxDuration {
		return fieldErr(field, d, "out of range", "use a duration between 1ms and 24h, e.g. 10s")
	}
	return nil
}

func checkSize(field string, n int) error {
	if n < HeaderSize || n > MaxPayload {
		return fieldErr(field, n, "out of range", fmt.Sprintf("use %d (our header) .. %d bytes of UDP payload", HeaderSize, MaxPayload))
	}
	return nil
}

func checkDSCP(d int) error {
	if d != NoDSCP && (d < 0 || d > 63) {
		return fieldErr("dscp", d, "out of range", "use 0..63")
	}
	return nil
}

// Validate checks the config as SendCBR would use it (defaults filled
// in); a refused field comes as a *FieldError.
func (c CBRConfig) Validate() error { return c.normalize() }

// Validate checks the config as ListenSink would use it.
func (c SinkConfig) Validate() error { return c.check() }

func (c *SinkConfig) check() error {
	if err := checkHostPort("listen", c.Listen); err != nil {
		return err
	}
	if err := checkDuration("duration", c.Duration); err != nil {
		return err
	}
	if c.Flows < 0 {
		return fieldErr("flows", c.Flows, "negative", "use 0 (no count) or the number of flows to expect")
	}
	if c.Idle < 0 {
		return fieldErr("idle", c.Idle, "negative", "use 0 (off) or a duration like 2s")
	}
	return nil
}

// EchoConfig is what an echo server is given: ListenEcho's address and
// Run's duration.
type EchoConfig struct {
	Listen   string
	Duration time.Duration
}

// Validate checks the address and the duration.
func (c EchoConfig) Validate() error {
	if err := checkHostPort("listen", c.Listen); err != nil {
		return err
	}
	return checkDuration("duration", c.Duration)
}

// Validate checks the config as RunVoice would use it.
func (c VoiceConfig) Validate() error { return c.normalize() }

func (cfg *VoiceConfig) normalize() error {
	if err := checkHostPort("to", cfg.To); err != nil {
		return err
	}
	if cfg.Mode == "" {
		cfg.Mode = VoiceEcho
	}
	if cfg.Mode != VoiceEcho && cfg.Mode != VoiceOneWay {
		return fieldErr("mode", cfg.Mode, "unknown mode", fmt.Sprintf("use %s or %s", VoiceEcho, VoiceOneWay))
	}
	if cfg.Calls < 1 || cfg.Calls > MaxCalls {
		return fieldErr("calls", cfg.Calls, "out of range", fmt.Sprintf("use 1..%d calls", MaxCalls))
	}
	if cfg.Size == 0 {
		cfg.Size = G729PayloadSize
	}
	if cfg.PacketRate == 0 {
		cfg.PacketRate = G729PacketRate
	}
	if err := checkSize("size", cfg.Size); err != nil {
		return err
	}
	if cfg.PacketRate < 0 || cfg.PacketRate*float64(cfg.Calls) > MaxVoiceRate {
		return fieldErr("packet_rate", cfg.PacketRate, "out of range", "use a positive per-call rate, at most 1000000 packets/s over all calls")
	}
	if err := checkDuration("duration", cfg.Duration); err != nil {
		return err
	}
	if cfg.Drain < 0 || cfg.Drain > MaxDrain {
		return fieldErr("drain", cfg.Drain, "out of range", "use 0 (default 500ms) up to 1m")
	}
	if cfg.Drain == 0 {
		cfg.Drain = 500 * time.Millisecond
	}
	return checkDSCP(cfg.DSCP)
}

// Validate checks the config as SendBulk would use it.
func (c BulkConfig) Validate() error { return c.normalize() }

func (cfg *BulkConfig) normalize() error {
	if err := checkHostPort("to", cfg.To); err != nil {
		return err
	}
	if cfg.Streams == 0 {
		cfg.Streams = 1
	}
	if cfg.Streams < 1 || cfg.Streams > MaxStreams {
		return fieldErr("streams", cfg.Streams, "out of range", fmt.Sprintf("use 1..%d streams", MaxStreams))
	}
	if err := checkDuration("duration", cfg.Duration); err != nil {
		return err
	}
	return checkDSCP(cfg.DSCP)
}

// Validate checks the config as ListenTCPSink would use it.
func (c TCPSinkConfig) Validate() error { return c.check() }

func (c *TCPSinkConfig) check() error {
	if err := checkHostPort("listen", c.Listen); err != nil {
		return err
	}
	if err := checkDuration("duration", c.Duration); err != nil {
		return err
	}
	if c.Streams < 0 {
		return fieldErr("streams", c.Streams, "negative", "use 0 (no count) or the number of bulk streams to expect")
	}
	return nil
}

// Validate checks the config as SendPareto would use it.
func (c ParetoConfig) Validate() error { return c.normalize() }

// Validate checks the config as SendVideo would use it.
func (c VideoConfig) Validate() error { return c.normalize() }

// Validate checks the config as RunFCT would use it.
func (c FCTConfig) Validate() error { return c.normalize() }

func (cfg *FCTConfig) normalize() error {
	if err := checkHostPort("to", cfg.To); err != nil {
		return err
	}
	if cfg.Count < 1 || cfg.Count > MaxTransfers {
		return fieldErr("count", cfg.Count, "out of range", fmt.Sprintf("use 1..%d transfers", MaxTransfers))
	}
	if cfg.Size == 0 || cfg.Size > MaxTransfer {
		return fieldErr("size", cfg.Size, "out of range", "use 1 byte up to 16GiB per transfer")
	}
	if cfg.Concurrency == 0 {
		cfg.Concurrency = 1
	}
	if cfg.Concurrency < 1 || cfg.Concurrency > MaxConcurrency {
		return fieldErr("concurrency", cfg.Concurrency, "out of range", fmt.Sprintf("use 1..%d", MaxConcurrency))
	}
	if cfg.Direction == "" {
		cfg.Direction = FCTDown
	}
	if cfg.Direction != FCTDown && cfg.Direction != FCTUp {
		return fieldErr("direction", cfg.Direction, "unknown direction", fmt.Sprintf("use %s or %s", FCTDown, FCTUp))
	}
	if cfg.Timeout < 0 || cfg.Timeout > MaxDuration {
		return checkDuration("timeout", cfg.Timeout)
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 10 * time.Second
	}
	if cfg.Duration < 0 || cfg.Duration > MaxDuration {
		return checkDuration("duration", cfg.Duration)
	}
	if cfg.Duration == 0 {
		cfg.Duration = min(MaxDuration, time.Duration(cfg.Count)*cfg.Timeout)
	}
	return checkDSCP(cfg.DSCP)
}
