package atomicfile

import (
	"os"
	"path/filepath"
	"testing"
)

// Write creates the directory and the file, replaces it whole, leaves no
// temporary file, and on failure keeps the old contents.
func TestWrite(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	path := filepath.Join(dir, "x.json")
	for _, data := range []string{"first, a longer one\n", "second\n"} {
		if err := Write(path, []byte(data)); err != nil {
			t.Fatal(err)
		}
		if b, err := os.ReadFile(path); err != nil || string(b) != data {
			t.Fatalf("read back %q, %v; want %q", b, err, data)
		}
	}
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o644 {
		t.Errorf("mode %v, %v; want 0644", st.Mode(), err)
	}
	// A directory in the way of the rename: refused, old file kept.
	if err := Write(dir, []byte("x")); err == nil {
		t.Error("replacing a directory succeeded")
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("left in the directory: %v, want x.json only", ents)
	}
	if b, _ := os.ReadFile(path); string(b) != "second\n" {
		t.Errorf("after a failed write: %q", b)
	}
}
