package api

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Event is one entry of the daemon's event stream (RouteEvents): something
// that happened to an object (a reservation admitted, a socket bound, a
// session refused, a rule changed). Seq numbers increase by one per event
// and keep increasing across daemon restarts (a restarted daemon starts
// above the last one's), so a client resumes with ?since=SEQ.
type Event struct {
	Seq  uint64    `json:"seq"`
	Time time.Time `json:"time"`
	// Kind is "<object>.<what happened>", e.g. "reservation.admitted";
	// EventLost marks events the reader missed.
	Kind string `json:"kind"`
	// Subject names the object, e.g. "reservation/voice"; "" for none.
	Subject string `json:"subject,omitempty"`
	// UID is the owner of the object when it is an ordinary user's (a
	// run, a socket): only they and privileged callers see the event. Nil
	// is a public event (host policy), seen by everyone.
	UID *uint32 `json:"uid,omitempty"`
	// Message says what happened in a sentence, with the numbers.
	Message string `json:"message,omitempty"`
	// Fields are the event's figures by name (kind-specific).
	Fields map[string]any `json:"fields,omitempty"`
	// Lost is, in an EventLost marker, how many events the reader missed
	// (0 when unknown, e.g. across a daemon restart).
	Lost uint64 `json:"lost,omitempty"`
}

// EventLost is the kind of the marker a reader gets in place of events it
// missed: it read too slowly and the daemon's ring of recent events moved
// past it, or it resumed from a seq the daemon no longer holds.
const EventLost = "lost"

// EventsOptions select what an event stream carries.
type EventsOptions struct {
	// Since resumes after this seq: the daemon first sends the events
	// after it that it still holds (a lost marker for those it does not).
	// Nil starts with the next event.
	Since *uint64
	// Kinds keeps only events whose kind is one of these or starts with
	// one of them followed by "." ("reservation" keeps
	// "reservation.admitted"); empty keeps all.
	Kinds []string
	// NoResume makes Follow return when the stream ends (the daemon
	// stopped) instead of connecting again and resuming after the last
	// event seen.
	NoResume bool
}

// EventsPath is the request path of an event stream with these options.
func EventsPath(o EventsOptions) string {
	q := url.Values{}
	if o.Since != nil {
		q.Set("since", strconv.FormatUint(*o.Since, 10))
	}
	if len(o.Kinds) > 0 {
		q.Set("kind", strings.Join(o.Kinds, ","))
	}
	p := Path(RouteEvents)
	if len(q) > 0 {
		p += "?" + q.Encode()
	}
	return p
}

// EventsAPI follows the daemon's event stream.
type EventsAPI interface {
	// Follow calls fn with each event, in order, until ctx ends, fn
	// returns an error (Follow returns it) or, with NoResume, the stream
	// ends. Without NoResume a stream that ends (the daemon restarted) is
	// opened again, resuming after the last event fn got.
	Follow(ctx context.Context, o EventsOptions, fn func(Event) error) error
}

// Events returns the client for the event stream.
func (c *Client) Events() EventsAPI { return &eventsClient{c} }

type eventsClient struct{ c *Client }

// maxEventLine bounds one line of the stream the client reads.
const maxEventLine = 1 << 20

// errStreamEnded is a stream the daemon closed.
var errStreamEnded = errors.New("the daemon ended the event stream")

func (e *eventsClient) Follow(ctx context.Context, o EventsOptions, fn func(Event) error) error {
	retry := 0
	for {
		got, err := e.followOnce(ctx, o, func(ev Event) error {
			if ev.Kind != EventLost || ev.Seq > 0 {
				s := ev.Seq
				o.Since = &s
			}
			return fn(ev)
		})
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var ae *Error
		var fe *fnError
		switch {
		case errors.As(err, &fe):
			return fe.err
		case errors.As(err, &ae):
			return err // the daemon refused the request
		case o.NoResume:
			if errors.Is(err, errStreamEnded) {
				return nil
			}
			return err
		}
		if got {
			retry = 0
		}
		if retry++; time.Duration(retry)*500*time.Millisecond > noDaemonWait+changeDeadline {
			return fmt.Errorf("follow events: %w", err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(min(time.Duration(retry)*200*time.Millisecond, 2*time.Second)):
		}
	}
}

// fnError is an error of the caller's fn: Follow returns it as it is.
type fnError struct{ err error }

func (e *fnError) Error() string { return e.err.Error() }

// followOnce reads one stream until it ends; got says whether any event
// came.
func (e *eventsClient) followOnce(ctx context.Context, o EventsOptions, fn func(Event) error) (got bool, err error) {
	path := EventsPath(o)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://hostqosd"+path, nil)
	if err != nil {
		return false, fmt.Errorf("build request GET %s: %w", path, err)
	}
	hc := *e.c.http
	hc.Timeout = 0 // a stream lasts as long as ctx
	resp, err := hc.Do(req)
	if err != nil {
		if isNoDaemon(err) {
			return false, fmt.Errorf("connect to %s: %w", e.c.Socket, ErrDaemonDown)
		}
		return false, fmt.Errorf("call hostqosd GET %s: %w", path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		return false, decodeAnswer(http.MethodGet, path, &answer{status: resp.StatusCode, data: b}, nil)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), maxEventLine)
	for sc.Scan() {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue // the daemon's keepalive
		}
		var ev Event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return got, fmt.Errorf("decode event: %w", err)
		}
		got = true
		if err := fn(ev); err != nil {
			return got, &fnError{err}
		}
	}
	if err := sc.Err(); err != nil {
		return got, fmt.Errorf("read event stream: %w", err)
	}
	return got, errStreamEnded
}
