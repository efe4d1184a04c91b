package api

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
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

// Idempotency headers: the client sends IdempotencyKeyHeader with every
// change; the daemon marks an answer recorded earlier under the same key
// with IdempotentReplayHeader: true.
const (
	IdempotencyKeyHeader   = "Idempotency-Key"
	IdempotentReplayHeader = "Idempotent-Replay"
)

// Client talks to hostqosd over its Unix socket.
type Client struct {
	Socket string
	// IdempotencyKey is sent with changes; "" makes Do draw a new random
	// key for each change (see NewIdempotencyKey).
	IdempotencyKey string
	// AttemptTimeout bounds one attempt of a change; a change is tried
	// again with the same key until the context ends. 0 means 15 s.
	AttemptTimeout time.Duration
	http           *http.Client
	// once: a change that may have reached the daemon is not sent again
	// (see SendOnce).
	once bool
	// noWait: a refused connection is not tried again (see NoWaitForDaemon).
	noWait bool
}

// changeDeadline bounds a change whose context has no deadline of its own:
// retrying goes on at most this long.
var changeDeadline = 60 * time.Second

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

// NewIdempotencyKey returns a random 128-bit key as 32 hex digits.
func NewIdempotencyKey() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(fmt.Sprintf("read random bytes: %v", err)) // crypto/rand does not fail on Linux
	}
	return hex.EncodeToString(b[:])
}

// OutcomeUnknownError is a change whose outcome is not known: the daemon
// did not answer before the deadline, after it may have received it.
type OutcomeUnknownError struct {
	Method, Path, Key string
	Waited            time.Duration
	Last              error
}

func (e *OutcomeUnknownError) Error() string {
	what := fmt.Sprintf("hostqosd did not answer within %s", e.Waited.Round(time.Second))
	if closedUnanswered(e.Last) {
		what = "hostqosd closed the connection without an answer"
	}
	return fmt.Sprintf("%s %s: outcome unknown: %s (last: %v); "+
		"re-run the same command with --idempotency-key %s to learn whether it was applied (it is applied at most once)",
		e.Method, e.Path, what, e.Last, e.Key)
}

// closedUnanswered reports whether err is a connection the daemon closed
// (or reset) before it answered.
func closedUnanswered(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

func (e *OutcomeUnknownError) Unwrap() error { return e.Last }

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

// Class is what kind of refusal the answer is (ErrInvalid, ErrAdmission,
// …): the daemon's word for it, or, from a daemon that does not say, the
// class of its status code.
func (e *Error) Class() string {
	if e.Body.Class != "" {
		return e.Body.Class
	}
	return ClassOfStatus(e.Status)
}

// ClassOfStatus is the error class an HTTP status code stands for.
func ClassOfStatus(status int) string {
	switch status {
	case http.StatusBadRequest, http.StatusConflict, http.StatusRequestEntityTooLarge, http.StatusUnprocessableEntity:
		return ErrInvalid
	case http.StatusForbidden, http.StatusUnauthorized:
		return ErrForbidden
	case http.StatusNotFound:
		return ErrNotFound
	case http.StatusTooManyRequests, http.StatusServiceUnavailable:
		return ErrLimit
	}
	return ErrInternal
}

// ErrDaemonDown reports that nothing listens on the socket.
var ErrDaemonDown = errors.New("hostqosd is not running")

// Do sends a request with an optional JSON body and decodes the answer into
// out (when out is not nil).
//
// A change (any method but GET) carries an idempotency key. When it meets
// a transport error (timeout, reset, refused while the daemon restarts)
// after the daemon may have received it, Do sends it again with the same
// key until ctx ends: the daemon applies a key's change at most once and
// answers a repeat with the recorded answer. Do then reports the true
// outcome: the answer (applied, or an error: not applied), or an
// *OutcomeUnknownError naming the key.
func (c *Client) Do(ctx context.Context, method, path string, body, out any) error {
	var data []byte
	if body != nil {
		var err error
		if data, err = json.Marshal(body); err != nil {
			return fmt.Errorf("encode request body: %w", err)
		}
	}
	if method == http.MethodGet || method == http.MethodHead {
		resp, err := c.send(ctx, method, path, data, "")
		if err != nil {
			if isNoDaemon(err) {
				return fmt.Errorf("connect to %s: %w (start it with: hostqosd, or systemctl start hostqosd)", c.Socket, ErrDaemonDown)
			}
			if closedUnanswered(err) {
				// A read changes nothing: nothing is unknown, just unanswered.
				return fmt.Errorf("call hostqosd %s %s: it closed the connection without an answer (%w): it was stopping, or could not answer at its connection limits; try again", method, path, err)
			}
			return fmt.Errorf("call hostqosd %s %s: %w", method, path, err)
		}
		return decodeAnswer(method, path, resp, out)
	}
	key := c.IdempotencyKey
	if key == "" {
		key = NewIdempotencyKey()
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, changeDeadline)
		defer cancel()
	}
	start := time.Now()
	reached := false // an attempt may have reached the daemon
	var last error
	for attempt := 0; ; attempt++ {
		if ctx.Err() != nil && !reached {
			return fmt.Errorf("%s %s: %w; not sent, so not applied", method, path, ctx.Err())
		}
		actx, cancel := context.WithTimeout(ctx, c.attemptTimeout())
		resp, err := c.send(actx, method, path, data, key)
		if err == nil {
			err = decodeAnswer(method, path, resp, out)
			cancel()
			return err
		}
		cancel()
		last = err
		if !isNoDaemon(err) {
			reached = true
			if c.once {
				return &OutcomeUnknownError{Method: method, Path: path, Key: key, Waited: time.Since(start), Last: last}
			}
		}
		if !reached && ((attempt == 0 && (errors.Is(err, os.ErrNotExist) || c.noWait)) || time.Since(start) > noDaemonWait) {
			// Never connected: the request never reached a daemon. (A
			// refused connection is tried again for a while: a daemon
			// restarting leaves its socket file behind.)
			return fmt.Errorf("connect to %s: %w; not applied (start it with: hostqosd, or systemctl start hostqosd)", c.Socket, ErrDaemonDown)
		}
		wait := min(time.Duration(attempt+1)*200*time.Millisecond, 2*time.Second)
		select {
		case <-ctx.Done():
			if !reached {
				return fmt.Errorf("connect to %s: %w; not applied", c.Socket, ErrDaemonDown)
			}
			return &OutcomeUnknownError{Method: method, Path: path, Key: key, Waited: time.Since(start), Last: last}
		case <-time.After(wait):
		}
	}
}

// noDaemonWait is how long a change is tried again while no daemon
// accepts the connection at all.
const noDaemonWait = 10 * time.Second

func (c *Client) attemptTimeout() time.Duration {
	if c.AttemptTimeout > 0 {
		return c.AttemptTimeout
	}
	return 15 * time.Second
}

// answer is a read response.
type answer struct {
	status int
	replay bool
	data   []byte
}

// send makes one attempt and reads the whole answer.
func (c *Client) send(ctx context.Context, method, path string, data []byte, key string) (*answer, error) {
	var rd io.Reader
	if data != nil {
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://hostqosd"+path, rd)
	if err != nil {
		return nil, fmt.Errorf("build request %s %s: %w", method, path, err)
	}
	if data != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set(IdempotencyKeyHeader, key)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("read answer: %w", err)
	}
	return &answer{status: resp.StatusCode, replay: resp.Header.Get(IdempotentReplayHeader) == "true", data: b}, nil
}

// decodeAnswer turns an answer into out or an *Error.
func decodeAnswer(method, path string, a *answer, out any) error {
	if a.status >= 300 {
		e := &Error{Status: a.status}
		if json.Unmarshal(a.data, &e.Body) != nil || e.Body.Error == "" {
			e.Body.Error = strings.TrimSpace(string(a.data))
		}
		return e
	}
	if out != nil && len(a.data) > 0 {
		if err := json.Unmarshal(a.data, out); err != nil {
			if a.replay {
				return nil // applied earlier; its original answer was not kept
			}
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
