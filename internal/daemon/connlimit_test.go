package daemon

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestConnLimiter: an ordinary user's connections beyond the per-user limit,
// and all ordinary users' beyond the total, are answered 503 and closed at
// once; a closed connection frees its place; a privileged peer is admitted
// whatever ordinary users hold.
func TestConnLimiter(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "s")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var next atomic.Pointer[peer] // who the next connection is
	l := newConnLimiter(ln, 2, 3, func(net.Conn) *peer { return next.Load() }, slog.New(slog.NewTextHandler(io.Discard, nil)))
	accepted := make(chan net.Conn, 16)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	// dial connects as p; it returns the server side, or the refusal.
	dial := func(p *peer) (net.Conn, string) {
		t.Helper()
		next.Store(p)
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		select {
		case s := <-accepted:
			return s, ""
		case <-time.After(200 * time.Millisecond):
		}
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.WriteString(c, "GET /v1/status HTTP/1.1\r\nHost: hostqosd\r\n\r\n"); err != nil {
			t.Fatalf("refused connection: send request: %v", err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("refused connection: no answer: %v", err)
		}
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("refused connection: status %d", resp.StatusCode)
		}
		return nil, string(body)
	}
	alice, bob := &peer{UID: 1000}, &peer{UID: 1001}
	root := &peer{UID: 0, Privileged: true}
	a1, _ := dial(alice)
	if a1 == nil {
		t.Fatal("first connection of alice refused")
	}
	if s, _ := dial(alice); s == nil {
		t.Fatal("second connection of alice refused")
	}
	if s, why := dial(alice); s != nil || !strings.Contains(why, "--max-conns-per-user") {
		t.Fatalf("third connection of alice (limit 2 per user): admitted %v, %q", s != nil, why)
	}
	if s, _ := dial(bob); s == nil {
		t.Fatal("first connection of bob refused")
	}
	if s, why := dial(bob); s != nil || !strings.Contains(why, "--max-user-conns") {
		t.Fatalf("fourth connection of ordinary users (limit 3): admitted %v, %q", s != nil, why)
	}
	for i := 0; i < 5; i++ {
		if s, why := dial(root); s == nil {
			t.Fatalf("root refused: %s", why)
		}
	}
	a1.Close()
	a1.Close() // a second close frees nothing more
	if s, why := dial(alice); s == nil {
		t.Fatalf("alice refused after closing one: %s", why)
	}
	if s, _ := dial(bob); s != nil {
		t.Fatal("bob admitted beyond the total after alice took her place back")
	}
}

// TestRefusedConnAnsweredAfterRequest: a connection refused at the
// per-user limit gets the daemon's 503 text as the answer to its request:
// nothing comes before the client sent it (an HTTP client takes no answer
// to a request it has not sent), and a client slow to send it — a CLI on a
// busy machine — still reads the reason, not a reset or a broken pipe.
func TestRefusedConnAnsweredAfterRequest(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "s")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	l := newConnLimiter(ln, 0, 0, func(net.Conn) *peer { return &peer{UID: 1000} }, slog.New(slog.NewTextHandler(io.Discard, nil)))
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()

	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if n, err := c.Read(make([]byte, 64)); n > 0 || err == nil {
		t.Fatalf("the refused connection got %d bytes before it sent a request", n)
	}

	// A standard client that sends its request 500 ms after connecting.
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, "unix", sock)
		if err == nil {
			time.Sleep(500 * time.Millisecond)
		}
		return c, err
	}}}
	for _, method := range []string{http.MethodGet, http.MethodPost} {
		req, _ := http.NewRequest(method, "http://hostqosd/v1/runs", strings.NewReader("{}"))
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("%s by a slow client beyond the limit: %v; want the 503 answer", method, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), "--max-conns-per-user") {
			t.Errorf("%s by a slow client beyond the limit: %d %s", method, resp.StatusCode, body)
		}
	}
}
