package engine

import (
	"context"
	"encoding/json"
	"time"

	"github.com/hostqos/hostqos/internal/store"
)

// Idempotency keys make a retried change safe. A front door gives a keyed
// change to the engine with WithPendingKey; the engine records key →
// (request fingerprint, answer) in the same atomic state write as the
// change itself (the store's key tables), so after a crash either both are
// there or neither. Failed changes are not recorded. The front door
// replays recorded answers (LookupKey) and records the answer it sent
// (RecordAnswer).

// KeyEntry is a change recorded under an idempotency key.
type KeyEntry = store.KeyEntry

// MaxKeptAnswer bounds a recorded answer; larger ones are not kept (a
// replay then says "applied").
const MaxKeptAnswer = store.MaxKeptAnswer

// ValidKey reports whether key is a well-formed idempotency key: 16 to 64
// of A-Z a-z 0-9 _ -.
func ValidKey(key string) bool { return store.ValidKey(key) }

// PendingKey is a keyed request on its way through a change: the change
// records it with the state write.
type PendingKey struct {
	key, fingerprint string
	entry            *KeyEntry
}

type pendingKeyCtx struct{}

// WithPendingKey returns a context that makes the engine's change record
// key (with the request's fingerprint) in the same state write.
func WithPendingKey(ctx context.Context, key, fingerprint string) (context.Context, *PendingKey) {
	pk := &PendingKey{key: key, fingerprint: fingerprint}
	return context.WithValue(ctx, pendingKeyCtx{}, pk), pk
}

func pendingFrom(ctx context.Context) *PendingKey {
	pk, _ := ctx.Value(pendingKeyCtx{}).(*PendingKey)
	return pk
}

// LookupKey finds a recorded key in either state file's table.
func (e *Engine) LookupKey(key string) (KeyEntry, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if ent, ok := e.keysTemp[key]; ok {
		return *ent, true
	}
	if ent, ok := e.keysPersist[key]; ok {
		return *ent, true
	}
	if ent, ok := e.keysMem[key]; ok {
		return *ent, true
	}
	return KeyEntry{}, false
}

// RecordAnswer records the answer to a keyed change that succeeded. The
// key of a change applied without a state write (reload, down) is kept in
// memory only, in a table of its own that no state write carries: after a
// restart such a change is not known to have happened.
func (e *Engine) RecordAnswer(pk *PendingKey, status int, body []byte) {
	e.mu.Lock()
	defer e.mu.Unlock()
	ent := pk.entry
	if ent == nil {
		ent = &KeyEntry{Fingerprint: pk.fingerprint, At: time.Now().Unix()}
		e.keysMem = e.keysMem.With(pk.key, ent, time.Now())
	}
	if len(body) <= MaxKeptAnswer {
		ent.Status, ent.Body = status, json.RawMessage(body)
	}
}

// recordKeyLocked adds the pending key of the change being written to the
// table of the file that holds the change: the runtime file when the
// temporary overlay changes (it is written last, so the key there means
// both files were written), else the state file.
func (e *Engine) recordKeyLocked(tempChanged bool) (keysP, keysT store.Keys) {
	keysP, keysT = e.keysPersist, e.keysTemp
	pk := e.commit
	if pk == nil {
		return
	}
	pk.entry = &KeyEntry{Fingerprint: pk.fingerprint, At: time.Now().Unix()}
	if tempChanged {
		keysT = keysT.With(pk.key, pk.entry, time.Now())
	} else {
		keysP = keysP.With(pk.key, pk.entry, time.Now())
	}
	return
}
