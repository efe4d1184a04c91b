package daemon

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/hostqos/hostqos/api"
)

// Default bounds of ordinary users' API connections (hostqosd flags
// --max-conns-per-user and --max-user-conns).
const (
	DefaultMaxConnsPerUser = 16
	DefaultMaxUserConns    = 128
)

// Timeouts and sizes of API requests. An ordinary user cannot hold a
// connection (a file descriptor, a goroutine, buffers) longer than these.
const (
	apiReadHeaderTimeout = 10 * time.Second // request line and headers
	apiReadTimeout       = 10 * time.Second // the whole request, body included
	apiWriteTimeout      = 30 * time.Second // handling plus sending the answer
	apiIdleTimeout       = 30 * time.Second // keep-alive between requests
	apiMaxHeaderBytes    = 64 << 10
)

// connLimiter is the API listener: it learns each connection's peer
// (SO_PEERCRED) once, at accept, and refuses a connection of an ordinary
// user at once — a short 503 answer, then close — when that user, or
// ordinary users together, already hold as many as allowed. Privileged
// peers (root, group hostqos) are never counted nor refused, so no flood of
// ordinary users' connections keeps the admin out.
type connLimiter struct {
	net.Listener
	perUser, total int
	peerOf         func(net.Conn) *peer
	log            *slog.Logger

	mu       sync.Mutex
	byUID    map[uint32]int
	users    int       // live connections of ordinary users
	refused  int       // since the last warning
	lastWarn time.Time // of the last "refused" log line
	answers  chan struct{}
}

func newConnLimiter(ln net.Listener, perUser, total int, peerOf func(net.Conn) *peer, log *slog.Logger) *connLimiter {
	return &connLimiter{Listener: ln, perUser: perUser, total: total, peerOf: peerOf, log: log,
		byUID: map[uint32]int{}, answers: make(chan struct{}, refuseAnswers)}
}

// apiConn is an accepted API connection and who is at the other end.
type apiConn struct {
	net.Conn
	peer *peer
	once sync.Once
	done func()
	fds  fdQueue // descriptors received with the request (qsockets.go)
}

func (c *apiConn) Close() error {
	c.fds.closeAll()
	err := c.Conn.Close()
	if c.done != nil {
		c.once.Do(c.done)
	}
	return err
}

// Accept returns the next connection the limits allow.
func (l *connLimiter) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		p := l.peerOf(c)
		if p.Privileged {
			return &apiConn{Conn: c, peer: p}, nil
		}
		why := l.admit(p.UID)
		if why == "" {
			uid := p.UID
			return &apiConn{Conn: c, peer: p, done: func() { l.release(uid) }}, nil
		}
		l.refuse(c, why)
	}
}

// admit counts a new connection of an ordinary user, or says why not.
func (l *connLimiter) admit(uid uint32) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var why string
	switch {
	case l.byUID[uid] >= l.perUser:
		why = fmt.Sprintf("too many API connections of uid %d (limit %d per user); close some, or the admin raises it with hostqosd --max-conns-per-user", uid, l.perUser)
	case l.users >= l.total:
		why = fmt.Sprintf("too many API connections of ordinary users (limit %d in all); try again later, or the admin raises it with hostqosd --max-user-conns", l.total)
	default:
		l.byUID[uid]++
		l.users++
		return ""
	}
	l.refused++
	if time.Since(l.lastWarn) > 10*time.Second {
		l.log.Warn("api connections refused", "refused", l.refused, "uid", uid, "reason", why)
		l.lastWarn, l.refused = time.Now(), 0
	}
	return why
}

func (l *connLimiter) release(uid uint32) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.users--
	if l.byUID[uid]--; l.byUID[uid] <= 0 {
		delete(l.byUID, uid)
	}
}

// How a refused connection is answered: at most refuseAnswers answers are
// under way at once, each within refuseWait of the accept (the client's
// request head of at most refuseHead bytes must come in that time), and
// what follows the head is read, up to refuseDrain bytes, so that closing
// does not reset the connection under the answer.
const (
	refuseAnswers = 32
	refuseWait    = 2 * time.Second
	refuseHead    = 16 << 10
	refuseDrain   = 64 << 10
)

// refuse answers a refused connection with 503 and why, then closes it.
// The connection holds a file descriptor for at most refuseWait.
//
// The answer is written after the request's head was read: an HTTP/1.1
// client takes an answer only to a request it sent (Go's, for one, drops
// an answer that comes before it registered its request), and the daemon
// then reads what follows, so that the client reads the reason, not a
// reset. When refuseAnswers such answers are under way, the answer is
// written at once instead and the connection closed: most clients still
// read it.
func (l *connLimiter) refuse(c net.Conn, why string) {
	select {
	case l.answers <- struct{}{}:
	default:
		_ = c.SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
		_ = writeRefusal(c, why)
		c.Close()
		return
	}
	go func() {
		defer func() { <-l.answers }()
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(refuseWait))
		br := bufio.NewReaderSize(io.LimitReader(c, refuseHead+refuseDrain), 4096)
		if _, err := http.ReadRequest(bufio.NewReader(io.LimitReader(br, refuseHead))); err != nil {
			return // no request (or not HTTP) in time: nothing to answer
		}
		if err := writeRefusal(c, why); err != nil {
			return
		}
		if uc, ok := c.(*net.UnixConn); ok {
			_ = uc.CloseWrite()
		}
		_, _ = io.Copy(io.Discard, br) // until the client closes, refuseDrain, or the deadline
	}()
}

// writeRefusal writes the 503 answer saying why to a refused connection.
func writeRefusal(c net.Conn, why string) error {
	body, _ := json.Marshal(api.ErrorBody{Error: why})
	_, err := fmt.Fprintf(c, "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s\n", len(body)+1, body)
	return err
}
