package daemon

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/engine"
)

// The real-time channel routes: thin. A channel belongs to the process on
// the other end of the request's connection, held by its pidfd
// (SO_PEERPIDFD), so that a reused PID never keeps a channel alive.

// rtSweepInterval is how often channels of exited processes are released.
const rtSweepInterval = 500 * time.Millisecond

// rtOwner is a channel's owning process, held by a pidfd.
type rtOwner struct {
	pid   int
	fd    int
	exe   string
	start uint64
}

func (o *rtOwner) PID() int      { return o.pid }
func (o *rtOwner) Start() uint64 { return o.start }
func (o *rtOwner) Exe() string   { return o.exe }

// Alive polls the pidfd: it turns readable when its process exits.
func (o *rtOwner) Alive() bool {
	pfd := []unix.PollFd{{Fd: int32(o.fd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(pfd, 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		return err == nil && n == 0
	}
}

func (o *rtOwner) Close() {
	if o.fd >= 0 {
		unix.Close(o.fd)
		o.fd = -1
	}
}

// openRTOwner takes a pidfd of the requesting process. A request on a
// connection without a peer (tests) has none and is refused.
func openRTOwner(r *http.Request) (*rtOwner, error) {
	who := callerOf(r)
	conn := connOf(r)
	if conn == nil {
		return nil, &badRequest{Err: errors.New("a real-time channel is owned by the process on the connection; this request has none")}
	}
	fd, err := peerPidfd(conn)
	if errors.Is(err, errNoPeerPidfd) {
		fd, err = unix.PidfdOpen(who.PID, 0)
	}
	if err != nil {
		return nil, fmt.Errorf("open pidfd of process %d: %w", who.PID, err)
	}
	exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", who.PID))
	start, _ := procStart(who.PID)
	return &rtOwner{pid: who.PID, fd: fd, exe: exe, start: start}, nil
}

// procStart is the start time of process pid (field 22 of /proc/PID/stat,
// clock ticks after boot).
func procStart(pid int) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("read start time of process %d: no command name in stat", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return 0, fmt.Errorf("read start time of process %d: stat has %d fields", pid, len(f)+2)
	}
	return strconv.ParseUint(f[19], 10, 64)
}

// reopenRTOwner takes the owner of a saved channel again: the process pid
// if it still runs and started at start (else its PID is someone else's).
func reopenRTOwner(pid int, start uint64) (engine.RTOwner, error) {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return nil, fmt.Errorf("process %d has exited", pid)
	}
	o := &rtOwner{pid: pid, fd: fd, start: start}
	o.exe, _ = os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if now, err := procStart(pid); err != nil || now != start || !o.Alive() {
		o.Close()
		return nil, fmt.Errorf("process %d has exited", pid)
	}
	return o, nil
}

func (d *Daemon) rtRoutes(mux *http.ServeMux) {
	list := func(w http.ResponseWriter, r *http.Request) {
		var id uint64
		if s := r.PathValue("id"); s != "" {
			var err error
			if id, err = strconv.ParseUint(s, 10, 64); err != nil || id == 0 {
				writeErr(w, &engine.NotFoundError{What: "real-time channel", Name: s})
				return
			}
		}
		out, err := d.eng.RTChannels(*callerOf(r), id)
		if err != nil {
			writeErr(w, err)
			return
		}
		if id != 0 {
			writeJSON(w, http.StatusOK, out[0])
			return
		}
		writeJSON(w, http.StatusOK, out)
	}
	mux.HandleFunc(api.RouteRTChannels, list)
	mux.HandleFunc(api.RouteRTChannel, list)
	mux.HandleFunc(api.RouteAdmitRTChannel, func(w http.ResponseWriter, r *http.Request) {
		var req api.RTChannelRequest
		if err := decode(r, &req); err != nil {
			writeErr(w, err)
			return
		}
		owner, err := openRTOwner(r)
		if err != nil {
			writeErr(w, err)
			return
		}
		ch, err := d.eng.AdmitRTChannel(*callerOf(r), req, owner)
		if err != nil {
			owner.Close()
			writeErr(w, err)
			return
		}
		writeJSON(w, http.StatusCreated, ch)
	})
	mux.HandleFunc(api.RouteCloseRTChannel, func(w http.ResponseWriter, r *http.Request) {
		s := r.PathValue("id")
		id, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			writeErr(w, &engine.NotFoundError{What: "real-time channel", Name: s})
			return
		}
		if err := d.eng.CloseRTChannel(*callerOf(r), id); err != nil {
			writeErr(w, err)
			return
		}
		writeJSON(w, http.StatusOK, map[string]uint64{"closed": id})
	})
}

// rtSweepLoop releases the channels of exited processes.
func (d *Daemon) rtSweepLoop(ctx context.Context) {
	t := time.NewTicker(rtSweepInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-d.down:
			return
		case <-t.C:
			d.eng.SweepRTChannels()
		}
	}
}
