// Package doccode finds the code of the documentation that the tests
// build and run as written, and builds it the way a reader would: the C
// against libhostqos installed with `make install` and found with
// `pkg-config --cflags --libs hostqos`, the Go as package main of a module
// of its own that requires this one (a replace directive points it at the
// checkout), the Python with the package of python/ on its path.
//
// A block is run by the tests when its fence's info string has the word
// "doctest" after the language:
//
//	```c doctest
//	#include <hostqos/qsock.h>
//	…
//	```
//
// Renderers show it as ordinary code of that language (they read the first
// word). Such a block must be a whole program: what a reader copies is what
// the tests compile and run.
package doccode

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// Marker is the word of a fence's info string that marks a block to run.
const Marker = "doctest"

// Block is a marked code block of a markdown file.
type Block struct {
	File string // the markdown file, as given to Find
	Line int    // the line of the opening fence (1-based)
	Lang string // c, go, python
	Code string
}

// String names the block as an editor jumps to it: file:line (lang).
func (b Block) String() string { return fmt.Sprintf("%s:%d (%s)", b.File, b.Line, b.Lang) }

// Find returns the marked blocks of the markdown file at path, in order.
// An unterminated marked block is an error.
func Find(path string) ([]Block, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	var out []Block
	var cur *Block
	var code strings.Builder
	fence := ""
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trimmed := strings.TrimLeft(line, " ")
		switch {
		case fence == "" && (strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~")):
			fence = trimmed[:3]
			info := strings.Fields(strings.TrimLeft(trimmed, "`~"))
			if len(info) >= 2 && slices.Contains(info[1:], Marker) {
				cur = &Block{File: path, Line: n, Lang: info[0]}
				code.Reset()
			}
		case fence != "" && strings.HasPrefix(trimmed, fence) && strings.Trim(trimmed, fence[:1]) == "":
			if cur != nil {
				cur.Code = code.String()
				out = append(out, *cur)
				cur = nil
			}
			fence = ""
		case cur != nil:
			code.WriteString(line)
			code.WriteByte('\n')
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if cur != nil {
		return nil, fmt.Errorf("%s: block opened at line %d is never closed", path, cur.Line)
	}
	return out, nil
}

// Docs are the markdown files of the repository at root that hold code a
// reader copies: README.md, docs/*.md and python/README.md.
func Docs(root string) ([]string, error) {
	files, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		return nil, err
	}
	files = append([]string{filepath.Join(root, "README.md")}, files...)
	files = append(files, filepath.Join(root, "python", "README.md"))
	return files, nil
}

// All returns the marked blocks of Docs(root).
func All(root string) ([]Block, error) {
	files, err := Docs(root)
	if err != nil {
		return nil, err
	}
	var out []Block
	for _, f := range files {
		bs, err := Find(f)
		if err != nil {
			return nil, err
		}
		out = append(out, bs...)
	}
	return out, nil
}

// run runs cmd and returns its combined output; a failure names the
// command and carries the output.
func run(cmd *exec.Cmd) (string, error) {
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s: %w\n%s", strings.Join(cmd.Args, " "), err, out)
	}
	return string(out), nil
}

// Lib is libhostqos installed as a reader installs it.
type Lib struct {
	Prefix string // the PREFIX it is installed under
}

// PkgConfigPath is the PKG_CONFIG_PATH that finds its hostqos.pc.
func (l Lib) PkgConfigPath() string { return filepath.Join(l.Prefix, "lib", "pkgconfig") }

// LibDir holds its shared library (for LD_LIBRARY_PATH).
func (l Lib) LibDir() string { return filepath.Join(l.Prefix, "lib") }

// InstallLib builds libhostqos from a copy of root/libhostqos in dir (so
// that tests running at once do not share its build tree) and installs
// it under dir/prefix with `make install PREFIX=…`.
func InstallLib(root, dir string) (Lib, error) {
	src := filepath.Join(dir, "libhostqos")
	if err := copyTree(filepath.Join(root, "libhostqos"), src); err != nil {
		return Lib{}, fmt.Errorf("copy libhostqos: %w", err)
	}
	// A copied build tree, if the checkout had one, is rebuilt.
	for _, d := range []string{"build", "lib"} {
		if err := os.RemoveAll(filepath.Join(src, d)); err != nil {
			return Lib{}, err
		}
	}
	l := Lib{Prefix: filepath.Join(dir, "prefix")}
	if _, err := run(exec.Command("make", "-s", "-C", src, "install", "PREFIX="+l.Prefix)); err != nil {
		return Lib{}, fmt.Errorf("install libhostqos: %w", err)
	}
	return l, nil
}

// copyTree copies the regular files and directories under from to to.
func copyTree(from, to string) error {
	return filepath.WalkDir(from, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(from, p)
		if err != nil {
			return err
		}
		dst := filepath.Join(to, rel)
		if d.IsDir() {
			return os.MkdirAll(dst, 0o755)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		return os.WriteFile(dst, data, info.Mode().Perm())
	})
}

// name is a file name for b: its markdown file's and its line.
func name(b Block, ext string) string {
	return fmt.Sprintf("%s_%d%s", strings.TrimSuffix(filepath.Base(b.File), ".md"), b.Line, ext)
}

// BuildC compiles b, a C program, as a reader does: cc FILE.c
// $(pkg-config --cflags --libs hostqos), warnings as errors. It returns the
// program's path in dir.
func BuildC(l Lib, dir string, b Block) (string, error) {
	if b.Lang != "c" {
		return "", fmt.Errorf("%s: not C", b)
	}
	src := filepath.Join(dir, name(b, ".c"))
	if err := os.WriteFile(src, []byte(b.Code), 0o644); err != nil {
		return "", err
	}
	pc := exec.Command("pkg-config", "--cflags", "--libs", "hostqos")
	pc.Env = append(os.Environ(), "PKG_CONFIG_PATH="+l.PkgConfigPath())
	flags, err := run(pc)
	if err != nil {
		return "", err
	}
	bin := strings.TrimSuffix(src, ".c")
	args := append([]string{"-std=gnu11", "-Wall", "-Werror", "-o", bin, src}, strings.Fields(flags)...)
	if _, err := run(exec.Command("cc", args...)); err != nil {
		return "", fmt.Errorf("%s does not build: %w", b, err)
	}
	return bin, nil
}

// BuildGo builds b, a Go program (package main), in a module of its own
// in dir that requires this one, with a replace directive to the
// checkout at root; dependencies come from the module cache (no
// network). It returns the program's path.
func BuildGo(root, dir string, b Block) (string, error) {
	if b.Lang != "go" {
		return "", fmt.Errorf("%s: not Go", b)
	}
	mod := filepath.Join(dir, name(b, ""))
	if err := os.MkdirAll(mod, 0o755); err != nil {
		return "", err
	}
	goVersion, err := goDirective(filepath.Join(root, "go.mod"))
	if err != nil {
		return "", err
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		return "", err
	}
	gomod := fmt.Sprintf("module doctest\n\ngo %s\n\nrequire github.com/hostqos/hostqos v0.0.0\n\nreplace github.com/hostqos/hostqos => %s\n", goVersion, abs)
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		return "", err
	}
	for f, data := range map[string][]byte{"go.mod": []byte(gomod), "go.sum": sum, "main.go": []byte(b.Code)} {
		if err := os.WriteFile(filepath.Join(mod, f), data, 0o644); err != nil {
			return "", err
		}
	}
	env := append(os.Environ(), "GOPROXY=off", "GOFLAGS=-mod=mod", "GOWORK=off")
	tidy := exec.Command("go", "mod", "tidy")
	tidy.Dir, tidy.Env = mod, env
	if _, err := run(tidy); err != nil {
		return "", fmt.Errorf("%s: resolve its imports: %w", b, err)
	}
	bin := filepath.Join(dir, name(b, ".bin"))
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Dir, build.Env = mod, env
	if _, err := run(build); err != nil {
		return "", fmt.Errorf("%s does not build: %w", b, err)
	}
	return bin, nil
}

// goDirective is the go version of a go.mod.
func goDirective(gomod string) (string, error) {
	data, err := os.ReadFile(gomod)
	if err != nil {
		return "", err
	}
	for _, l := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "go "); ok {
			return strings.TrimSpace(v), nil
		}
	}
	return "", errors.New(gomod + ": no go directive")
}

// WritePython writes b, a Python program, to dir and returns its path;
// PythonEnv is what running it needs.
func WritePython(dir string, b Block) (string, error) {
	if b.Lang != "python" {
		return "", fmt.Errorf("%s: not Python", b)
	}
	p := filepath.Join(dir, name(b, ".py"))
	return p, os.WriteFile(p, []byte(b.Code), 0o644)
}

// PythonEnv is the environment entry that lets a program import the
// hostqos module of the checkout at root (as `pip install ./python` does).
func PythonEnv(root string) (string, error) {
	abs, err := filepath.Abs(filepath.Join(root, "python"))
	return "PYTHONPATH=" + abs, err
}
