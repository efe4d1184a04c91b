package web

import (
	"strings"
	"testing"
	"time"

	"github.com/hostqos/hostqos/internal/engine"
)

// TestTokens: a token finds its user's login until it expires; a wrong,
// short or non-hex one finds nothing; a user's fifth token replaces their
// oldest; a full table refuses (429) until tokens expire.
func TestTokens(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	tt := newTokens()
	tt.now = func() time.Time { return now }
	tok, err := tt.issue(engine.Caller{PID: 42, UID: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if l := tt.lookup(tok.Value); l == nil || l.caller.UID != 1000 || l.caller.PID != 0 {
		t.Fatalf("lookup of a fresh token: %+v", l)
	}
	wrong := []byte(tok.Value)
	wrong[0] ^= 1
	for _, s := range []string{"", "x", string(wrong), strings.Repeat("z", 64), tok.Value[:63]} {
		if tt.lookup(s) != nil {
			t.Errorf("lookup(%q) found a login", s)
		}
	}
	var mine []Token
	for i := 0; i < maxTokensPerUID; i++ {
		x, err := tt.issue(engine.Caller{UID: 1000})
		if err != nil {
			t.Fatal(err)
		}
		mine = append(mine, x)
	}
	if tt.lookup(tok.Value) != nil {
		t.Error("the user's oldest token still works after their fifth was made")
	}
	for _, x := range mine {
		if tt.lookup(x.Value) == nil {
			t.Error("a newer token of the user stopped working")
		}
	}
	for uid := uint32(2000); len(tt.list) < maxTokens; uid++ {
		if _, err := tt.issue(engine.Caller{UID: uid}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := tt.issue(engine.Caller{UID: 1}); err == nil {
		t.Error("a full table took another token")
	} else if _, ok := err.(*engine.TooManyError); !ok {
		t.Errorf("a full table: %v; want a TooManyError", err)
	}
	now = now.Add(tokenTTL)
	if tt.lookup(mine[0].Value) != nil {
		t.Error("an expired token works")
	}
	if _, err := tt.issue(engine.Caller{UID: 1}); err != nil || len(tt.list) != 1 {
		t.Errorf("after every token expired: %v, %d live", err, len(tt.list))
	}
}
