package daemon

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/engine"
	"github.com/hostqos/hostqos/internal/policy"
)

// Idempotency keys make a retried change safe. The CLI sends every
// mutating request with a header Idempotency-Key (a random key per
// change). The engine records key → (request fingerprint, answer) in the
// same atomic state write as the change itself, so after a crash either
// both are there or neither (see engine.WithPendingKey). A request repeating a recorded key gets the
// recorded answer (header Idempotent-Replay: true) instead of being
// applied again; the same key with another request is refused (422).
// Failed changes are not recorded: repeating one tries it again.

// fingerprint identifies a request: who sent it, what and to which path.
func fingerprint(uid uint32, r *http.Request, body []byte) string {
	h := sha256.New()
	fmt.Fprintf(h, "%d\x00%s\x00%s\x00", uid, r.Method, r.URL.RequestURI())
	h.Write(body)
	return hex.EncodeToString(h.Sum(nil))
}

// idempotent wraps the API: a mutating request with an Idempotency-Key
// header is answered from the key table when the key is known, and its
// answer is recorded when it succeeds. Requests without the header pass
// through.
func (d *Daemon) idempotent(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get(api.IdempotencyKeyHeader)
		// Only the keys of privileged callers are kept: an ordinary user
		// must not be able to push root's keys out of the bounded table.
		if key == "" || r.Method == http.MethodGet || r.Method == http.MethodHead || !callerOf(r).Privileged {
			next.ServeHTTP(w, r)
			return
		}
		if !engine.ValidKey(key) {
			writeErr(w, &badRequest{Err: fmt.Errorf("header %s = %q: want 16 to 64 of A-Z a-z 0-9 _ -, e.g. 32 random hex digits", api.IdempotencyKeyHeader, policy.Clip(key))})
			return
		}
		body, err := readBody(r)
		if err != nil {
			writeErr(w, err)
			return
		}
		fp := fingerprint(callerOf(r).UID, r, body)
		release, err := d.claimKey(r.Context(), key)
		if err != nil {
			writeErr(w, err)
			return
		}
		defer release()
		if replay, ok := d.eng.LookupKey(key); ok {
			if replay.Fingerprint != fp {
				writeJSON(w, http.StatusUnprocessableEntity, api.ErrorBody{Error: fmt.Sprintf(
					"idempotency key %s was already used for another request; nothing was changed; send a new change with a new key", key)})
				return
			}
			writeReplay(w, replay)
			return
		}
		ctx, pk := engine.WithPendingKey(r.Context(), key, fp)
		r = r.WithContext(ctx)
		r.Body = io.NopCloser(bytes.NewReader(body))
		rec := &recorder{header: http.Header{}}
		next.ServeHTTP(rec, r)
		if rec.status >= 200 && rec.status < 300 {
			d.eng.RecordAnswer(pk, rec.status, bytes.Clone(rec.body.Bytes()))
		}
		rec.send(w)
	})
}

// claimKey makes requests with the same key wait for each other, so that
// a retry arriving while the first attempt is still at work gets its
// answer instead of applying the change twice.
func (d *Daemon) claimKey(ctx context.Context, key string) (release func(), err error) {
	for {
		d.keyMu.Lock()
		if d.inflight == nil {
			d.inflight = map[string]chan struct{}{}
		}
		ch, busy := d.inflight[key]
		if !busy {
			done := make(chan struct{})
			d.inflight[key] = done
			d.keyMu.Unlock()
			return func() {
				d.keyMu.Lock()
				delete(d.inflight, key)
				d.keyMu.Unlock()
				close(done)
			}, nil
		}
		d.keyMu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, &badRequest{Err: fmt.Errorf("idempotency key %s: an earlier request with it is still at work; retry with the same key", key)}
		}
	}
}

// writeReplay sends a recorded answer again.
func writeReplay(w http.ResponseWriter, e engine.KeyEntry) {
	w.Header().Set(api.IdempotentReplayHeader, "true")
	if e.Status == 0 {
		writeJSON(w, http.StatusOK, map[string]any{"applied": true,
			"note": "applied earlier (before the daemon restarted); its original answer was not kept"})
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(e.Status)
	_, _ = w.Write(e.Body)
}

// recorder buffers a handler's answer so it can be recorded and then sent.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (rc *recorder) Header() http.Header { return rc.header }
func (rc *recorder) WriteHeader(code int) {
	if rc.status == 0 {
		rc.status = code
	}
}
func (rc *recorder) Write(b []byte) (int, error) {
	if rc.status == 0 {
		rc.status = http.StatusOK
	}
	return rc.body.Write(b)
}

func (rc *recorder) send(w http.ResponseWriter) {
	for k, v := range rc.header {
		w.Header()[k] = v
	}
	if rc.status == 0 {
		rc.status = http.StatusOK
	}
	w.Header().Set("Content-Length", strconv.Itoa(rc.body.Len()))
	w.WriteHeader(rc.status)
	_, _ = w.Write(rc.body.Bytes())
}
