package store

import (
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"time"

	"github.com/hostqos/hostqos/internal/policy"
)

// Idempotency keys make a retried change safe: the engine records key →
// (request fingerprint, answer) in the same atomic state write as the
// change itself, so after a crash either both are there or neither
// (engine.WithPendingKey, LookupKey, RecordAnswer).

// Limits of the key table, per state file.
const (
	maxKeys = 1024
	keyTTL  = 24 * time.Hour
	// MaxKeptAnswer bounds a recorded answer; larger ones are not kept (a
	// replay then says "applied").
	MaxKeptAnswer = 64 << 10
)

// keyRE is the format of an idempotency key.
var keyRE = regexp.MustCompile(`^[A-Za-z0-9_-]{16,64}$`)

// ValidKey reports whether key is a well-formed idempotency key: 16 to 64
// of A-Z a-z 0-9 _ -.
func ValidKey(key string) bool { return keyRE.MatchString(key) }

// KeyEntry is a change recorded under an idempotency key.
type KeyEntry struct {
	Fingerprint string `json:"fingerprint"` // of the request: caller, method, path, body
	At          int64  `json:"at_unix"`
	// Status and Body are the answer; Status 0 means the change was
	// applied but its answer was not kept (the daemon stopped before
	// sending it, or it was too large).
	Status int             `json:"status,omitempty"`
	Body   json.RawMessage `json:"body,omitempty"`
}

// Keys maps idempotency keys to recorded changes.
type Keys map[string]*KeyEntry

// With returns a copy of t with key added, dropping entries older than
// keyTTL and the oldest beyond maxKeys.
func (t Keys) With(key string, e *KeyEntry, now time.Time) Keys {
	n := Keys{}
	for k, v := range t {
		if now.Sub(time.Unix(v.At, 0)) < keyTTL {
			n[k] = v
		}
	}
	n[key] = e
	switch {
	case len(n) == maxKeys+1:
		// The usual case of a full table: drop the oldest, without
		// sorting the table on every change.
		oldest := ""
		for k, v := range n {
			if k != key && (oldest == "" || v.At < n[oldest].At) {
				oldest = k
			}
		}
		delete(n, oldest)
	case len(n) > maxKeys:
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
func (t Keys) check() error {
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
