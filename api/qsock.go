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
	"sync"
	"syscall"
	"time"
)

// The qsocket routes (docs/qsockets.md). Attach, change, info
// and detach act on a socket the client passes with the request: one
// descriptor in an SCM_RIGHTS message on the first bytes of the request,
// on a connection used for that one request (FDRequest).
const (
	RouteQSockInit   = "POST /v1/qsockets/init"
	RouteQSockets    = "GET /v1/qsockets"
	RouteQSockAttach = "POST /v1/qsockets"
	RouteQSockChange = "PATCH /v1/qsockets"
	RouteQSockInfo   = "POST /v1/qsockets/info"
	RouteQSockDetach = "POST /v1/qsockets/detach"
)

// The schedulers a qsocket may name (struct qos_params.scheduler).
const (
	SchedFIFO        = "fifo"
	SchedDWCS        = "dwcs"
	SchedEDFLossy    = "edf-lossy"
	SchedEDFLossless = "edf-lossless"
)

// Schedulers lists them in the order of their numbers in the datapath's
// record (1 = fifo).
var Schedulers = []string{SchedFIFO, SchedDWCS, SchedEDFLossy, SchedEDFLossless}

// QSockParams is the QoS a qsocket asks for: struct qos_params of
// libhostqos. A class, or explicit attributes; a scheduler with its
// attributes.
type QSockParams struct {
	// Class names the class (its DSCP, priority and HTB leaf); "" with
	// no Priority means class default.
	Class string `json:"class,omitempty"`
	// Priority picks the class of this priority when Class is "".
	Priority *int `json:"priority,omitempty"`
	// DSCP overrides the class's mark (root or group hostqos only).
	DSCP *int `json:"dscp,omitempty"`
	// Rate, in bit/s: with fifo, the library paces the socket's messages
	// at it (0: no pacing); with dwcs and edf-*, the rate the host's
	// scheduler admits and serves the socket at (0: 1 Mbit/s), no pacing.
	Rate uint64 `json:"rate,omitempty"`
	// Scheduler: fifo (default), dwcs, edf-lossy or edf-lossless.
	Scheduler string `json:"scheduler,omitempty"`
	// DWCS attributes: the inter-packet gap in µs and the loss tolerance,
	// at most OLN of every OLD consecutive messages may be lost.
	IPGMicros uint32 `json:"ipg_us,omitempty"`
	OLN       uint32 `json:"oln,omitempty"`
	OLD       uint32 `json:"old,omitempty"`
	// RTChannel, with Class rtchan.DaemonClass, names the real-time
	// channel (its id) whose datagrams the socket carries: they leave in
	// the channel's own leaf, at the rate it was admitted with. Only the
	// channel's process may name it.
	RTChannel uint64 `json:"rt_channel,omitempty"`
}

// QSockInit prepares a link for qsockets (qsockinit): it is managed by
// hostqos (classifier and HTB root) with EgressRate, as `hostqos link set`.
type QSockInit struct {
	Link       string `json:"link"`
	EgressRate string `json:"egress_rate,omitempty"`
}

// QSocket is a registered socket as the daemon knows it.
type QSocket struct {
	ID        uint32 `json:"id"`
	Cookie    uint64 `json:"cookie"`
	UID       uint32 `json:"uid"`
	Class     string `json:"class"`
	DSCP      int    `json:"dscp"`
	Scheduler string `json:"scheduler"`
	// Rate is a scheduled qsocket's declared rate (bit/s), what the
	// links' qsocket scheduler admitted it at; 0 for fifo.
	Rate uint64 `json:"rate,omitempty"`
}

// QSockInfo is a qsocket's feedback from the daemon: what its packets did
// in the classifier. The library adds its own counts (messages sent,
// dropped and late at the source, queueing delay) and TCP_INFO.
type QSockInfo struct {
	QSocket
	Open    bool   `json:"open"`
	Packets uint64 `json:"packets"`
	Bytes   uint64 `json:"bytes"`
	// Rate is the socket's rate over the last complete second, bit/s.
	Rate uint64 `json:"rate"`
	// The host-wide scheduler's decisions on a scheduled qsocket's
	// datagrams: sent predicted after their deadline (Late), dropped
	// because they could not meet it (LateDropped) or with the rest of
	// their frame (FrameDropped), the bytes of both, and DWCS messages
	// sent late with no loss left in their window (Violations).
	Late         uint64 `json:"late"`
	LateDropped  uint64 `json:"late_dropped"`
	FrameDropped uint64 `json:"frame_dropped"`
	DroppedBytes uint64 `json:"dropped_bytes"`
	Violations   uint64 `json:"violations"`
}

// QSocketsAPI is what Client.QSockets offers: the qsocket routes.
type QSocketsAPI interface {
	Init(ctx context.Context, req QSockInit) error
	List(ctx context.Context) ([]QSocket, error)
	Attach(ctx context.Context, fd int, p QSockParams) (QSocket, error)
	Change(ctx context.Context, fd int, p QSockParams) (QSocket, error)
	Info(ctx context.Context, fd int) (QSockInfo, error)
	Detach(ctx context.Context, fd int) error
}

var _ QSocketsAPI = (*QSocketsClient)(nil)

// QSockets is the client of the qsocket routes.
func (c *Client) QSockets() QSocketsAPI { return &QSocketsClient{c: c} }

// QSocketsClient is what Client.QSockets returns.
type QSocketsClient struct{ c *Client }

// Init prepares a link for qsockets (root or group hostqos).
func (q *QSocketsClient) Init(ctx context.Context, req QSockInit) error {
	return q.c.Do(ctx, Method(RouteQSockInit), Path(RouteQSockInit), req, nil)
}

// List returns the open qsockets the caller may see (their own; all for
// root and group hostqos).
func (q *QSocketsClient) List(ctx context.Context) ([]QSocket, error) {
	var out []QSocket
	err := q.c.Do(ctx, Method(RouteQSockets), Path(RouteQSockets), nil, &out)
	return out, err
}

// Attach makes the socket fd a qsocket with params.
func (q *QSocketsClient) Attach(ctx context.Context, fd int, p QSockParams) (QSocket, error) {
	var out QSocket
	err := q.c.FDRequest(ctx, RouteQSockAttach, fd, p, &out)
	return out, err
}

// Change gives qsocket fd new params.
func (q *QSocketsClient) Change(ctx context.Context, fd int, p QSockParams) (QSocket, error) {
	var out QSocket
	err := q.c.FDRequest(ctx, RouteQSockChange, fd, p, &out)
	return out, err
}

// Info reads qsocket fd's feedback.
func (q *QSocketsClient) Info(ctx context.Context, fd int) (QSockInfo, error) {
	var out QSockInfo
	err := q.c.FDRequest(ctx, RouteQSockInfo, fd, struct{}{}, &out)
	return out, err
}

// Detach makes fd an ordinary socket again.
func (q *QSocketsClient) Detach(ctx context.Context, fd int) error {
	return q.c.FDRequest(ctx, RouteQSockDetach, fd, struct{}{}, nil)
}

// fdConn is a connection whose first write carries a descriptor
// (SCM_RIGHTS).
type fdConn struct {
	*net.UnixConn
	fd   int
	once sync.Once
}

func (c *fdConn) Write(b []byte) (int, error) {
	var n int
	var err error
	sent := false
	c.once.Do(func() {
		sent = true
		n, _, err = c.UnixConn.WriteMsgUnix(b, syscall.UnixRights(c.fd), nil)
	})
	if sent {
		return n, err
	}
	return c.UnixConn.Write(b)
}

// FDRequest sends one request on a connection of its own whose first
// bytes carry descriptor fd (SCM_RIGHTS), and decodes the answer into out
// (when not nil). It is sent once, never again: the daemon acts on the
// socket it received.
func (c *Client) FDRequest(ctx context.Context, route string, fd int, body, out any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return fmt.Errorf("encode request: %w", err)
	}
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			conn, err := dialSocket(ctx, c.Socket)
			if err != nil {
				return nil, err
			}
			return &fdConn{UnixConn: conn.(*net.UnixConn), fd: fd}, nil
		},
		DisableKeepAlives: true,
	}
	defer tr.CloseIdleConnections()
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
	}
	req, err := http.NewRequestWithContext(ctx, Method(route), "http://hostqosd"+Path(route), bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED) {
			return fmt.Errorf("%s %s: %w (%v)", Method(route), Path(route), ErrDaemonDown, err)
		}
		return fmt.Errorf("%s %s: %w", Method(route), Path(route), err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return fmt.Errorf("%s %s: read answer: %w", Method(route), Path(route), err)
	}
	if resp.StatusCode >= 300 {
		e := &Error{Status: resp.StatusCode}
		if json.Unmarshal(data, &e.Body) != nil || e.Body.Error == "" {
			e.Body.Error = fmt.Sprintf("HTTP %d: %s", resp.StatusCode, bytes.TrimSpace(data))
		}
		return e
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("%s %s: decode answer: %w", Method(route), Path(route), err)
		}
	}
	return nil
}
