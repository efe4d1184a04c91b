package integration

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/hostqos/hostqos/internal/traffic"
)

// Receivers in the server namespace. Their sockets are opened inside the
// namespace (Node.Do); they then run in the background until their
// duration ends or the test cleans up.

// tcpSink ends after dur or once streams bulk streams closed (0: dur only).
func (e *env) tcpSink(addr string, dur time.Duration, streams int) <-chan *traffic.TCPSinkResult {
	e.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	e.t.Cleanup(cancel)
	var s *traffic.TCPSink
	if err := e.server.Do(func() (err error) {
		s, err = traffic.ListenTCPSink(ctx, traffic.TCPSinkConfig{Listen: addr, Duration: dur, Streams: streams})
		return err
	}); err != nil {
		e.t.Fatalf("listen tcp sink %s: %v", addr, err)
	}
	out := make(chan *traffic.TCPSinkResult, 1)
	go func() {
		r, err := s.Run(ctx)
		if err != nil {
			e.t.Logf("tcp sink %s: %v", addr, err)
		}
		out <- r
	}()
	return out
}

func (e *env) udpSink(addr string, dur time.Duration) <-chan *traffic.SinkResult {
	e.t.Helper()
	out, _ := e.udpSinkEnd(addr, dur)
	return out
}

// sinkDrain is how long a sink ended early (end of udpSinkEnd,
// clientUDPSink) still receives after its senders are done: packets in
// flight through a veth and its queues arrive within it.
const sinkDrain = time.Second

// udpSinkEnd is udpSink with a way to end it before dur: end, called once
// the senders are done, ends it sinkDrain later.
func (e *env) udpSinkEnd(addr string, dur time.Duration) (_ <-chan *traffic.SinkResult, end func()) {
	e.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	e.t.Cleanup(cancel)
	var s *traffic.Sink
	if err := e.server.Do(func() (err error) {
		s, err = traffic.ListenSink(ctx, traffic.SinkConfig{Listen: addr, Duration: dur})
		return err
	}); err != nil {
		e.t.Fatalf("listen udp sink %s: %v", addr, err)
	}
	out := make(chan *traffic.SinkResult, 1)
	go func() {
		r, err := s.Run(ctx)
		if err != nil {
			e.t.Logf("udp sink %s: %v", addr, err)
		}
		out <- r
	}()
	return out, func() { time.AfterFunc(sinkDrain, cancel) }
}

func (e *env) echo(addr string, dur time.Duration) {
	e.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	e.t.Cleanup(cancel)
	var s *traffic.Echo
	if err := e.server.Do(func() (err error) {
		s, err = traffic.ListenEcho(ctx, addr)
		return err
	}); err != nil {
		e.t.Fatalf("listen echo %s: %v", addr, err)
	}
	go func() { _, _ = s.Run(ctx, dur) }()
}

// decodeLast decodes the last JSON document a tool printed.
func decodeLast(t *testing.T, out string, v any) {
	t.Helper()
	i := strings.Index(out, "{")
	if i < 0 {
		t.Fatalf("no JSON in tool output:\n%s", out)
	}
	if err := json.Unmarshal([]byte(out[i:]), v); err != nil {
		t.Fatalf("decode tool output: %v\n%s", err, out)
	}
}

func waitResult[T any](t *testing.T, ch <-chan T, timeout time.Duration) T {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(timeout):
		t.Fatalf("no result within %v", timeout)
	}
	var zero T
	return zero
}
