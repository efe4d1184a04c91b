package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/hostqos/hostqos/internal/policy"
)

// Client talks to hostqosd over its Unix socket.
type Client struct {
	Socket string
	http   *http.Client
}

// NewClient returns a client for the socket path; "" means $HOSTQOS_SOCKET
// or DefaultSocket.
func NewClient(socket string) *Client {
	if socket == "" {
		socket = os.Getenv(SocketEnv)
	}
	if socket == "" {
		socket = DefaultSocket
	}
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return dialSocket(ctx, socket)
		},
		DisableKeepAlives: true,
	}
	return &Client{Socket: socket, http: &http.Client{Transport: tr, Timeout: 60 * time.Second}}
}

// dialSocket connects to the daemon. A full listen backlog (EAGAIN: many
// clients connecting at once) is waited out until ctx ends, not reported as
// a daemon that is not running.
func dialSocket(ctx context.Context, socket string) (net.Conn, error) {
	var d net.Dialer
	for {
		c, err := d.DialContext(ctx, "unix", socket)
		if err == nil || !errors.Is(err, syscall.EAGAIN) {
			return c, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// Error is an error answer from the daemon.
type Error struct {
	Status int
	Body   ErrorBody
}

func (e *Error) Error() string {
	if len(e.Body.Fields) > 0 {
		var b strings.Builder
		b.WriteString(e.Body.Error)
		for _, f := range e.Body.Fields {
			b.WriteString("\n  ")
			b.WriteString(f.Error())
		}
		return b.String()
	}
	return e.Body.Error
}

// ErrDaemonDown reports that nothing listens on the socket.
var ErrDaemonDown = errors.New("hostqosd is not running")

// Do sends a request with an optional JSON body and decodes the answer into
// out (when out is not nil).
func (c *Client) Do(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("encode request body: %w", err)
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://hostqosd"+path, rd)
	if err != nil {
		return fmt.Errorf("build request %s %s: %w", method, path, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		if isNoDaemon(err) {
			return fmt.Errorf("connect to %s: %w (start it with: hostqosd, or systemctl start hostqosd)", c.Socket, ErrDaemonDown)
		}
		return fmt.Errorf("call hostqosd %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("read answer to %s %s: %w", method, path, err)
	}
	if resp.StatusCode >= 300 {
		e := &Error{Status: resp.StatusCode}
		if json.Unmarshal(data, &e.Body) != nil || e.Body.Error == "" {
			e.Body.Error = strings.TrimSpace(string(data))
		}
		return e
	}
	if out != nil && len(data) > 0 {
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("decode answer to %s %s: %w", method, path, err)
		}
	}
	return nil
}

func isNoDaemon(err error) bool {
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Op == "dial" {
		return true
	}
	return errors.Is(err, os.ErrNotExist)
}

// Get is Do with GET.
func (c *Client) Get(ctx context.Context, path string, out any) error {
	return c.Do(ctx, http.MethodGet, path, nil, out)
}

// FieldErrors returns the field errors carried by err, if any.
func FieldErrors(err error) []*policy.FieldError {
	var e *Error
	if errors.As(err, &e) {
		return e.Body.Fields
	}
	return nil
}
