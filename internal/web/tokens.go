package web

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"sync"
	"time"

	"github.com/hostqos/hostqos/internal/engine"
)

// Bounds of the token table: at most maxTokens tokens live at once, at
// most maxTokensPerUID of them a user's (a user's next token replaces
// their oldest), each good for tokenTTL.
const (
	maxTokens       = 256
	maxTokensPerUID = 4
	tokenTTL        = 12 * time.Hour
	tokenBytes      = 32
)

// Token is a login secret of the web view and when it stops working.
type Token struct {
	Value   string
	Expires time.Time
}

// login is one token: the caller the API sees for it and its live
// streams.
type login struct {
	secret  [tokenBytes]byte
	caller  engine.Caller
	expires time.Time
	streams int
}

// tokens is the bounded table of logins.
type tokens struct {
	mu   sync.Mutex
	list []*login
	now  func() time.Time
}

func newTokens() *tokens { return &tokens{now: time.Now} }

// issue makes a fresh token for c. Expired tokens go first; a user with
// maxTokensPerUID tokens loses their oldest; a full table refuses.
func (t *tokens) issue(c engine.Caller) (Token, error) {
	var l login
	if _, err := rand.Read(l.secret[:]); err != nil {
		return Token{}, fmt.Errorf("make web token: %w", err)
	}
	c.PID = 0 // a token is a user's, not a process's
	l.caller = c
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	l.expires = now.Add(tokenTTL)
	keep := t.list[:0]
	var mine []int
	for _, x := range t.list {
		if now.Before(x.expires) {
			if x.caller.UID == c.UID {
				mine = append(mine, len(keep))
			}
			keep = append(keep, x)
		}
	}
	t.list = keep
	if len(mine) >= maxTokensPerUID {
		i := mine[0] // the oldest: the list is in the order of issue
		t.list = append(t.list[:i], t.list[i+1:]...)
	}
	if len(t.list) >= maxTokens {
		return Token{}, &engine.TooManyError{Why: fmt.Sprintf("%d web tokens are live (the limit); try again when one expires", maxTokens)}
	}
	t.list = append(t.list, &l)
	return Token{Value: hex.EncodeToString(l.secret[:]), Expires: l.expires}, nil
}

// lookup finds the live login of a token, comparing every entry in
// constant time.
func (t *tokens) lookup(s string) *login {
	var want [tokenBytes]byte
	if len(s) != 2*tokenBytes {
		return nil
	}
	if _, err := hex.Decode(want[:], []byte(s)); err != nil {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	var found *login
	for _, x := range t.list {
		if subtle.ConstantTimeCompare(x.secret[:], want[:]) == 1 && now.Before(x.expires) {
			found = x
		}
	}
	return found
}

// maxStreamsPerToken bounds the live streams (rates, events) of one token.
const maxStreamsPerToken = 4

// openStream takes one of l's stream places; false: all are taken.
func (t *tokens) openStream(l *login) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if l.streams >= maxStreamsPerToken {
		return false
	}
	l.streams++
	return true
}

func (t *tokens) closeStream(l *login) {
	t.mu.Lock()
	l.streams--
	t.mu.Unlock()
}
