package daemon

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"sort"
	"strconv"
	"time"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/policy"
)

// Idempotency keys make a retried change safe. The CLI sends every
// mutating request with a header Idempotency-Key (a random key per
// change). The daemon records key → (request fingerprint, answer) in the
// same atomic state write as the change itself, so after a crash either
// both are there or neither. A request repeating a recorded key gets the
// recorded answer (header Idempotent-Replay: true) instead of being
// applied again; the same key with another request is refused (422).
// Failed changes are not recorded: repeating one tries it again.

// Limits of the key table, per state file.
const (
	maxKeys       = 1024
	keyTTL        = 24 * time.Hour
	maxKeptAnswer = 64 << 10 // larger answers are not kept (a replay says "applied")
)

// keyRE is the format of an idempotency key.
var keyRE = regexp.MustCompile(`^[A-Za-z0-9_-]{16,64}$`)

// keyEntry is a change recorded under an idempotency key.
type keyEntry struct {
	Fingerprint string `json:"fingerprint"` // of the request: caller, method, path, body
	At          int64  `json:"at_unix"`
	// Status and Body are the answer; Status 0 means the change was
	// applied but its answer was not kept (the daemon stopped before
	// sending it, or it was too large).
	Status int             `json:"status,omitempty"`
	Body   json.RawMessage `json:"body,omitempty"`
}

// keyTable maps idempotency keys to recorded changes.
type keyTable map[string]*keyEntry

// with returns a copy of t with key added, dropping entries older than
// keyTTL and the oldest beyond maxKeys.
func (t keyTable) with(key string, e *keyEntry, now time.Time) keyTable {
	n := keyTable{}
	for k, v := range t {
		if now.Sub(time.Unix(v.At, 0)) < keyTTL {
			n[k] = v
		}
	}
	n[key] = e
	if len(n) > maxKeys {
		keys := make([]string, 0, len(n))
		for k := range n {
			keys = append(keys, k)
		}
		sort.Slice(keys, func(i, j int) bool { return n[keys[i]].At < n[keys[j]].At })
		for _, k := range keys[:len(n)-maxKeys] {
			if k != key {
				delete(n, k)
			}
		}
	}
	return n
}

// check validates a table read from a state file.
func (t keyTable) check() error {
	if len(t) > 4*maxKeys {
		return fmt.Errorf("%d idempotency keys, more than this daemon ever keeps", len(t))
	}
	for k, e := range t {
		if !keyRE.MatchString(k) || e == nil {
			return fmt.Errorf("idempotency key %q malformed", policy.Clip(k))
		}
	}
	return nil
}

// pendingKey is a keyed request on its way through change: change records
// it with the state write and sets entry.
type pendingKey struct {
	key, fingerprint string
	entry            *keyEntry
}

type pendingKeyCtx struct{}

// lookupKey finds a recorded key in either state file's table.
func (d *Daemon) lookupKey(key string) *keyEntry {
	if e, ok := d.keysTemp[key]; ok {
		return e
	}
	return d.keysPersist[key]
}

// recordKeyLocked adds the pending key of the change being written to the
// table of the file that holds the change: the runtime file when the
// temporary overlay changes (it is written last, so the key there means
// both files were written), else the state file.
func (d *Daemon) recordKeyLocked(tempChanged bool) (keysP, keysT keyTable) {
	keysP, keysT = d.keysPersist, d.keysTemp
	pk := d.commit
	if pk == nil {
		return
	}
	pk.entry = &keyEntry{Fingerprint: pk.fingerprint, At: time.Now().Unix()}
	if tempChanged {
		keysT = keysT.with(pk.key, pk.entry, time.Now())
	} else {
		keysP = keysP.with(pk.key, pk.entry, time.Now())
	}
	return
}

// changeFor is change for an API request: when the request carries an
// idempotency key, the key is recorded in the same state write as the
// change.
func (d *Daemon) changeFor(r *http.Request, source string, mutate func(persist, temp *overlay, eff *policy.Policy) error) error {
	pk, _ := r.Context().Value(pendingKeyCtx{}).(*pendingKey)
	if pk == nil {
		return d.change(source, mutate)
	}
	return d.change(source, func(persist, temp *overlay, eff *policy.Policy) error {
		if err := mutate(persist, temp, eff); err != nil {
			return err
		}
		d.commit = pk // under d.mu; change's applyLocked consumes it
		return nil
	})
}

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
		if !keyRE.MatchString(key) {
			writeErr(w, &badRequest{fmt.Errorf("header %s = %q: want 16 to 64 of A-Z a-z 0-9 _ -, e.g. 32 random hex digits", api.IdempotencyKeyHeader, policy.Clip(key))})
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
		d.mu.Lock()
		e := d.lookupKey(key)
		var replay keyEntry
		if e != nil {
			replay = *e
		}
		d.mu.Unlock()
		if e != nil {
			if replay.Fingerprint != fp {
				writeJSON(w, http.StatusUnprocessableEntity, api.ErrorBody{Error: fmt.Sprintf(
					"idempotency key %s was already used for another request; nothing was changed; send a new change with a new key", key)})
				return
			}
			writeReplay(w, replay)
			return
		}
		pk := &pendingKey{key: key, fingerprint: fp}
		r = r.WithContext(context.WithValue(r.Context(), pendingKeyCtx{}, pk))
		r.Body = io.NopCloser(bytes.NewReader(body))
		rec := &recorder{header: http.Header{}}
		next.ServeHTTP(rec, r)
		if rec.status >= 200 && rec.status < 300 {
			d.mu.Lock()
			ent := pk.entry
			if ent == nil { // applied without a state write (reload, runs): kept in memory
				ent = &keyEntry{Fingerprint: fp, At: time.Now().Unix()}
				d.keysPersist = d.keysPersist.with(key, ent, time.Now())
			}
			if rec.body.Len() <= maxKeptAnswer {
				ent.Status, ent.Body = rec.status, json.RawMessage(bytes.Clone(rec.body.Bytes()))
			}
			d.mu.Unlock()
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
			return nil, &badRequest{fmt.Errorf("idempotency key %s: an earlier request with it is still at work; retry with the same key", key)}
		}
	}
}

// writeReplay sends a recorded answer again.
func writeReplay(w http.ResponseWriter, e keyEntry) {
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
