package store

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const testKey = "0123456789abcdef0123456789abcdef"

// TestKeyTableBound: the table keeps at most maxKeys keys and none older
// than keyTTL; the newest key always stays.
func TestKeyTableBound(t *testing.T) {
	now := time.Now()
	var tab Keys
	for i := 0; i < maxKeys+10; i++ {
		tab = tab.With(fmt.Sprintf("%032d", i), &KeyEntry{At: now.Unix() - int64(maxKeys+10-i)}, now)
	}
	if len(tab) != maxKeys {
		t.Errorf("%d keys kept, want %d", len(tab), maxKeys)
	}
	if _, ok := tab[fmt.Sprintf("%032d", 0)]; ok {
		t.Error("the oldest key was kept")
	}
	tab = tab.With(testKey, &KeyEntry{At: now.Unix()}, now.Add(25*time.Hour))
	if len(tab) != 1 || tab[testKey] == nil {
		t.Errorf("after 25 h: %d keys", len(tab))
	}
}

// TestReadStateChecks: a state file of an unknown version, with slot
// numbers out of range (printed whole, not cut to 16 bits) or with unknown
// keys is refused, naming the file and the fix.
func TestReadStateChecks(t *testing.T) {
	dir := t.TempDir()
	for name, c := range map[string]struct{ content, want string }{
		"version":    {`{"version": 999, "overlay": {}}`, "version 999; this hostqosd reads versions 1 to 2"},
		"no version": {`{"overlay": {}}`, "no version"},
		"rule slot":  {`{"version": 1, "overlay": {}, "slots": {"rules": {"r": 70000}, "classes": {}}}`, `rule slot 70000 of "r" out of range 0..16383`},
		"neg slot":   {`{"version": 1, "overlay": {}, "slots": {"rules": {"r": -1}, "classes": {}}}`, `rule slot -1 of "r" out of range`},
		"dup slot":   {`{"version": 1, "overlay": {}, "slots": {"rules": {"a": 3, "b": 3}, "classes": {}}}`, `rule slot 3 given to both "a" and "b"`},
		"class idx":  {`{"version": 1, "overlay": {}, "slots": {"rules": {}, "classes": {"c": 65540}}}`, `class index 65540 of "c" out of range`},
		"baseline":   {`{"version": 1, "overlay": {}, "slots": {"rules": {}, "classes": {}, "baselines": {"99999": {}}}}`, "rule slot 99999 out of range"},
		"unknown":    {`{"version": 1, "overlay": {}, "colour": 1}`, `unknown field "colour"`},
		"type":       {`{"version": 1, "overlay": {}, "slots": {"rules": {"r": "x"}}}`, "field slots.rules"},
		"bad key":    {`{"version": 1, "overlay": {}, "idempotency_keys": {"no way": {}}}`, `idempotency key "no way" malformed`},
	} {
		path := filepath.Join(dir, name+".json")
		if err := os.WriteFile(path, []byte(c.content), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := readSnapshot(path)
		if err == nil {
			t.Errorf("%s: accepted", name)
			continue
		}
		msg := err.Error()
		if !strings.Contains(msg, c.want) || !strings.Contains(msg, path) || !strings.Contains(msg, "move it away") || strings.Contains(msg, "Go ") {
			t.Errorf("%s: %q lacks %q, the path or the fix", name, msg, c.want)
		}
	}
}
