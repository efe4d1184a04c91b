package daemon

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// eventWriteTimeout bounds one write of an event stream: a client that
// reads nothing for this long loses its stream (it resumes with ?since).
const eventWriteTimeout = 30 * time.Second

// eventKeepalive is how often an idle stream sends an empty line, so that
// a client that went away is noticed.
const eventKeepalive = 15 * time.Second

// handleEvents streams the event stream to the caller, one JSON object per
// line, until the client goes away or the daemon stops. ?since=SEQ resumes
// after SEQ; ?kind=K[,K…] keeps those kinds (or kind prefixes).
func (d *Daemon) handleEvents(w http.ResponseWriter, r *http.Request) {
	var since *uint64
	if v := r.URL.Query().Get("since"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			writeErr(w, &badRequest{Err: fmt.Errorf("since = %q: want the seq of the last event you got (a non-negative integer)", clipParam(v))})
			return
		}
		since = &n
	}
	var kinds []string
	if v := r.URL.Query().Get("kind"); v != "" {
		kinds = strings.Split(v, ",")
	}
	sub, err := d.eng.Subscribe(*callerOf(r), since, kinds)
	if err != nil {
		writeErr(w, err)
		return
	}
	defer sub.Close()
	rc := http.NewResponseController(w)
	// The request is read: a stream outlives the server's read and write
	// timeouts; each write has its own deadline below.
	_ = rc.SetReadDeadline(time.Time{})
	_ = rc.SetWriteDeadline(time.Now().Add(eventWriteTimeout))
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	if err := rc.Flush(); err != nil {
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	go func() {
		select {
		case <-d.streamsEnd:
			cancel()
		case <-ctx.Done():
		}
	}()
	bw := bufio.NewWriterSize(w, 16<<10)
	for {
		wctx, wcancel := context.WithTimeout(ctx, eventKeepalive)
		evs, err := sub.Next(wctx)
		wcancel()
		if ctx.Err() != nil {
			return
		}
		_ = rc.SetWriteDeadline(time.Now().Add(eventWriteTimeout))
		if err != nil { // idle: a keepalive line
			if _, err := bw.WriteString("\n"); err != nil {
				return
			}
		}
		for _, ev := range evs {
			b, err := json.Marshal(ev)
			if err != nil {
				d.log.Warn("encode event", "kind", ev.Kind, "err", err)
				continue
			}
			bw.Write(b)
			if err := bw.WriteByte('\n'); err != nil {
				return
			}
		}
		if err := bw.Flush(); err != nil {
			return
		}
		if err := rc.Flush(); err != nil {
			return
		}
	}
}

// clipParam cuts a query parameter quoted in an error.
func clipParam(v string) string {
	if len(v) > 64 {
		return strings.ToValidUTF8(v[:64], "") + "…"
	}
	return v
}
