package doccode

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestFind: a marked block is found with its language, line and code, as
// written; unmarked blocks and the text around them are not; a marked
// block left open is an error.
func TestFind(t *testing.T) {
	md := "# T\n\n```c\nnot marked\n```\n\ntext\n\n```go doctest\npackage main\n\n// ```go doctest in a comment\nfunc main() {}\n```\n\n~~~python doctest\nprint(1)\n~~~\n"
	p := filepath.Join(t.TempDir(), "t.md")
	if err := os.WriteFile(p, []byte(md), 0o644); err != nil {
		t.Fatal(err)
	}
	bs, err := Find(p)
	if err != nil {
		t.Fatal(err)
	}
	if len(bs) != 2 || bs[0].Lang != "go" || bs[0].Line != 9 || bs[0].Code != "package main\n\n// ```go doctest in a comment\nfunc main() {}\n" ||
		bs[1].Lang != "python" || bs[1].Code != "print(1)\n" {
		t.Fatalf("blocks %+v", bs)
	}
	if err := os.WriteFile(p, []byte("```c doctest\nint x;\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Find(p); err == nil || !strings.Contains(err.Error(), "never closed") {
		t.Errorf("open block: %v", err)
	}
}

// TestDocCodeBuilds: every marked block of the docs builds as a reader
// builds it — the C with cc and pkg-config against libhostqos installed
// with make install, the Go in a module of its own (replace directive to
// this checkout), the Python compiled by python3 — and the docs mark the
// QSockets "In short" programs of each language. TestDocCodeRuns
// (tests/integration) runs them against a daemon.
func TestDocCodeBuilds(t *testing.T) {
	root := "../.."
	bs, err := All(root)
	if err != nil {
		t.Fatal(err)
	}
	langs := map[string]int{}
	for _, b := range bs {
		langs[b.Lang]++
		if strings.HasSuffix(b.File, "qsockets.md") {
			langs["qsockets.md "+b.Lang]++
		}
	}
	for _, l := range []string{"qsockets.md c", "qsockets.md go", "qsockets.md python"} {
		if langs[l] == 0 {
			t.Errorf("docs/%s: no block marked %q", strings.Fields(l)[0], strings.Fields(l)[1]+" "+Marker)
		}
	}
	dir := t.TempDir()
	var lib *Lib
	for _, b := range bs {
		switch b.Lang {
		case "c":
			for _, tool := range []string{"cc", "make", "pkg-config"} {
				if _, err := exec.LookPath(tool); err != nil {
					t.Skipf("%s: no %s (scripts/install-deps.sh installs it)", b, tool)
				}
			}
			if lib == nil {
				l, err := InstallLib(root, dir)
				if err != nil {
					t.Fatal(err)
				}
				lib = &l
			}
			if _, err := BuildC(*lib, dir, b); err != nil {
				t.Error(err)
			}
		case "go":
			if _, err := BuildGo(root, dir, b); err != nil {
				t.Error(err)
			}
		case "python":
			p, err := WritePython(dir, b)
			if err != nil {
				t.Fatal(err)
			}
			if out, err := exec.Command("python3", "-m", "py_compile", p).CombinedOutput(); err != nil {
				t.Errorf("%s does not compile: %v\n%s", b, err, out)
			}
		default:
			t.Errorf("%s: the tests do not know how to run %s", b, b.Lang)
		}
	}
}
