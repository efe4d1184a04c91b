package daemon

import (
	"errors"
	"net"
	"net/http"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/engine"
)

// The qsocket routes. Attach, change, info and detach act on the socket
// the client passed on the request's connection (SCM_RIGHTS with its first
// bytes): the API connection reads with room for a few descriptors and
// keeps at most maxConnFDs of them until a handler takes one or the
// connection closes; any more are closed at once. A handler takes the
// oldest and closes it when done, so the daemon holds no application
// socket beyond a request.

// maxConnFDs bounds the descriptors one API connection holds.
const maxConnFDs = 4

type fdsKey struct{}

// fdQueue holds the descriptors received on one connection.
type fdQueue struct {
	mu     sync.Mutex
	fds    []int
	closed bool
	oob    []byte
}

// take keeps the descriptors of control messages oob (beyond maxConnFDs,
// or after the connection closed, they are closed).
func (q *fdQueue) take(oob []byte) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, m := range msgs {
		fds, err := unix.ParseUnixRights(&m)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			if q.closed || len(q.fds) >= maxConnFDs {
				unix.Close(fd)
				continue
			}
			q.fds = append(q.fds, fd)
		}
	}
}

// pop returns the oldest descriptor received, or -1.
func (q *fdQueue) pop() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.fds) == 0 {
		return -1
	}
	fd := q.fds[0]
	q.fds = q.fds[1:]
	return fd
}

func (q *fdQueue) closeAll() {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, fd := range q.fds {
		unix.Close(fd)
	}
	q.fds, q.closed = nil, true
}

// Read reads the request's bytes and keeps the descriptors that come with
// them (received close-on-exec).
func (c *apiConn) Read(b []byte) (int, error) {
	uc, ok := c.Conn.(*net.UnixConn)
	if !ok {
		return c.Conn.Read(b)
	}
	if c.fds.oob == nil {
		c.fds.oob = make([]byte, unix.CmsgSpace(maxConnFDs*4))
	}
	n, oobn, _, _, err := uc.ReadMsgUnix(b, c.fds.oob)
	if oobn > 0 {
		c.fds.take(c.fds.oob[:oobn])
	}
	return n, err
}

// errNoFD is the answer to a qsocket request without a socket.
var errNoFD = &engine.BadRequestError{Err: errors.New("this request acts on a socket passed with it (SCM_RIGHTS on the request's first bytes) and none came; use libhostqos, package qsock or the hostqos Python module")}

// withFD reads the request's body into body and calls h with the socket
// passed with the request, which is closed afterwards.
func withFD(body any, h func(w http.ResponseWriter, r *http.Request, fd int)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		err := decode(r, body)
		q, _ := r.Context().Value(fdsKey{}).(*fdQueue)
		fd := -1
		if q != nil {
			fd = q.pop()
		}
		if fd >= 0 {
			defer unix.Close(fd)
		}
		if err != nil {
			writeErr(w, err)
			return
		}
		if fd < 0 {
			writeErr(w, errNoFD)
			return
		}
		h(w, r, fd)
	}
}

func (d *Daemon) qsockRoutes(mux *http.ServeMux) {
	mux.HandleFunc(api.RouteQSockInit, func(w http.ResponseWriter, r *http.Request) {
		var req api.QSockInit
		if err := decode(r, &req); err != nil {
			writeErr(w, err)
			return
		}
		if err := d.eng.InitQSockLink(r.Context(), *callerOf(r), req); err != nil {
			writeErr(w, err)
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"link": req.Link})
	})
	mux.HandleFunc(api.RouteQSockets, d.large.bound(func(w http.ResponseWriter, r *http.Request) {
		out, err := d.eng.QSocks(*callerOf(r))
		if err != nil {
			writeErr(w, err)
			return
		}
		writeJSON(w, http.StatusOK, out)
	}))
	mux.HandleFunc(api.RouteQSockAttach, func(w http.ResponseWriter, r *http.Request) {
		var p api.QSockParams
		withFD(&p, func(w http.ResponseWriter, r *http.Request, fd int) {
			out, err := d.eng.AttachQSock(r.Context(), *callerOf(r), fd, p)
			if err != nil {
				writeErr(w, err)
				return
			}
			writeJSON(w, http.StatusCreated, out)
		})(w, r)
	})
	mux.HandleFunc(api.RouteQSockChange, func(w http.ResponseWriter, r *http.Request) {
		var p api.QSockParams
		withFD(&p, func(w http.ResponseWriter, r *http.Request, fd int) {
			out, err := d.eng.ChangeQSock(r.Context(), *callerOf(r), fd, p)
			if err != nil {
				writeErr(w, err)
				return
			}
			writeJSON(w, http.StatusOK, out)
		})(w, r)
	})
	mux.HandleFunc(api.RouteQSockInfo, func(w http.ResponseWriter, r *http.Request) {
		var none struct{}
		withFD(&none, func(w http.ResponseWriter, r *http.Request, fd int) {
			out, err := d.eng.QSockInfo(*callerOf(r), fd)
			if err != nil {
				writeErr(w, err)
				return
			}
			writeJSON(w, http.StatusOK, out)
		})(w, r)
	})
	mux.HandleFunc(api.RouteQSockDetach, func(w http.ResponseWriter, r *http.Request) {
		var none struct{}
		withFD(&none, func(w http.ResponseWriter, r *http.Request, fd int) {
			if err := d.eng.DetachQSock(r.Context(), *callerOf(r), fd); err != nil {
				writeErr(w, err)
				return
			}
			writeJSON(w, http.StatusOK, map[string]bool{"detached": true})
		})(w, r)
	})
}
