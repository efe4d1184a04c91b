package api

import (
	"context"
	"errors"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// serve answers on a Unix socket with h; it returns the socket path.
func serve(t *testing.T, h http.Handler) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "s.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	return sock
}

// TestChangeRetriedWithSameKey: a change whose answer is lost is sent
// again with the same key, and the answer then received is the outcome.
func TestChangeRetriedWithSameKey(t *testing.T) {
	var mu sync.Mutex
	var keys []string
	sock := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		keys = append(keys, r.Header.Get(IdempotencyKeyHeader))
		n := len(keys)
		mu.Unlock()
		if n == 1 { // applied, but the answer is lost
			hj, _ := w.(http.Hijacker)
			c, _, _ := hj.Hijack()
			c.Close()
			return
		}
		w.Header().Set(IdempotentReplayHeader, "true")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"name":"a"}`))
	}))
	c := NewClient(sock)
	var out struct{ Name string }
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Do(ctx, "POST", "/v1/rules", map[string]string{"name": "a"}, &out); err != nil || out.Name != "a" {
		t.Fatalf("Do = %v, out %+v", err, out)
	}
	if len(keys) != 2 || keys[0] != keys[1] || len(keys[0]) != 32 {
		t.Errorf("keys sent: %q, want the same 32-digit key twice", keys)
	}
	// GETs carry no key.
	keys = nil
	_ = c.Get(ctx, "/v1/status", nil)
	if len(keys) != 1 || keys[0] != "" {
		t.Errorf("GET keys: %q", keys)
	}
}

// TestChangeOutcomeUnknown: when the daemon never answers, Do reports the
// outcome as unknown, naming the key to re-run with.
func TestChangeOutcomeUnknown(t *testing.T) {
	block := make(chan struct{})
	defer close(block)
	sock := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-block:
		case <-r.Context().Done():
		}
	}))
	c := NewClient(sock)
	c.IdempotencyKey = "0123456789abcdef0123456789abcdef"
	c.AttemptTimeout = 300 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err := c.Do(ctx, "DELETE", "/v1/rules/a", nil, nil)
	var ue *OutcomeUnknownError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "--idempotency-key 0123456789abcdef0123456789abcdef") || !strings.Contains(err.Error(), "outcome unknown") {
		t.Errorf("Do = %v", err)
	}
}

// TestChangeNoDaemon: with no socket at all the change was not applied,
// and Do says so at once.
func TestChangeNoDaemon(t *testing.T) {
	c := NewClient(filepath.Join(t.TempDir(), "none.sock"))
	ctx, cancel := context.WithTimeout(context.Background(), atOnce)
	defer cancel()
	err := c.Do(ctx, "POST", "/v1/rules", map[string]string{}, nil)
	if !errors.Is(err, ErrDaemonDown) || !strings.Contains(err.Error(), "not applied") || ctx.Err() != nil {
		t.Errorf("Do = %v (its %v deadline passed: %v)", err, atOnce, ctx.Err() != nil)
	}
}

// atOnce is the deadline of a call that must give up at once rather than
// wait for a daemon: generous for a failed connect on a loaded machine,
// and well below the noDaemonWait it would otherwise spend retrying.
const atOnce = noDaemonWait / 2

// TestChangeWithoutDeadlineEnds: a change whose context has no deadline
// still ends (after changeDeadline) when the daemon never answers.
func TestChangeWithoutDeadlineEnds(t *testing.T) {
	block := make(chan struct{})
	defer close(block)
	sock := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-block:
		case <-r.Context().Done():
		}
	}))
	defer func(d time.Duration) { changeDeadline = d }(changeDeadline)
	changeDeadline = time.Second
	c := NewClient(sock)
	c.AttemptTimeout = 200 * time.Millisecond
	done := make(chan error, 1)
	go func() { done <- c.Do(context.Background(), "DELETE", "/v1/rules/a", nil, nil) }()
	select {
	case err := <-done:
		var ue *OutcomeUnknownError
		if !errors.As(err, &ue) {
			t.Errorf("Do = %v, want outcome unknown", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Do without a deadline did not end")
	}
}

// TestChangeCancelledNotSent: a change whose context has already ended is
// not sent, and says it was not applied (not "outcome unknown").
func TestChangeCancelledNotSent(t *testing.T) {
	sock := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("request sent: %s %s", r.Method, r.URL)
	}))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := NewClient(sock).Do(ctx, "POST", "/v1/rules", map[string]string{"name": "a"}, nil)
	var ue *OutcomeUnknownError
	if err == nil || errors.As(err, &ue) || !strings.Contains(err.Error(), "not applied") {
		t.Errorf("Do = %v, want not sent, not applied", err)
	}
}

// TestRunStartSentOnce: a run start whose answer is lost is not sent again
// (the daemon does not deduplicate an ordinary user's runs by key): the
// outcome is reported unknown after one request.
func TestRunStartSentOnce(t *testing.T) {
	var mu sync.Mutex
	n := 0
	sock := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		n++
		mu.Unlock()
		hj, _ := w.(http.Hijacker)
		c, _, _ := hj.Hijack()
		c.Close() // applied, answer lost
	}))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := NewClient(sock).Runs().Start(ctx, RunRequest{Class: "bulk", DSCP: NoDSCP})
	var ue *OutcomeUnknownError
	if !errors.As(err, &ue) {
		t.Errorf("Start = %v, want outcome unknown", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if n != 1 {
		t.Errorf("the run start was sent %d times, want once", n)
	}
}

// TestDownNoWaitOnStaleSocket: with a socket file nobody listens on (a
// crashed daemon's), a change with NoWaitForDaemon gives up at once, not
// applied, so that `hostqos down` falls back to cleaning up itself.
func TestDownNoWaitOnStaleSocket(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "s.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close() // the file stays; connections are refused
	ctx, cancel := context.WithTimeout(context.Background(), atOnce)
	defer cancel()
	_, err = NewClient(sock).Down(ctx, NoWaitForDaemon())
	if !errors.Is(err, ErrDaemonDown) || ctx.Err() != nil {
		t.Errorf("Down = %v (its %v deadline passed: %v), want ErrDaemonDown at once", err, atOnce, ctx.Err() != nil)
	}
}

// TestClosedWithoutAnswer: a connection the daemon closes without
// answering is reported as such: for a read, with nothing "unknown" about
// it; for a change sent once, as an unknown outcome that says the
// connection was closed, not that the daemon took too long.
func TestClosedWithoutAnswer(t *testing.T) {
	sock := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hj, _ := w.(http.Hijacker)
		c, _, _ := hj.Hijack()
		c.Close()
	}))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c := NewClient(sock)
	err := c.Get(ctx, "/v1/rules", nil)
	if err == nil || !strings.Contains(err.Error(), "closed the connection without an answer") || strings.Contains(err.Error(), "outcome unknown") {
		t.Errorf("GET = %v, want: closed without an answer", err)
	}
	_, err = c.Runs().Start(ctx, RunRequest{Class: "bulk", DSCP: NoDSCP})
	if err == nil || !strings.Contains(err.Error(), "closed the connection without an answer") || strings.Contains(err.Error(), "did not answer within") {
		t.Errorf("run start = %v, want: outcome unknown, closed without an answer", err)
	}
}
