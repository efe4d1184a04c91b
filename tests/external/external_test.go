// Package external checks that the public packages can be imported by a
// program in another module, as an application would.
package external

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestImportFromAnotherModule builds a program in a temporary module that
// imports github.com/hostqos/hostqos/api and .../rtchan (with a replace
// directive pointing at this checkout) and runs it. Modules come from the
// local module cache only: the test needs no network.
func TestImportFromAnotherModule(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	write := func(name, content string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module example.com/qosapp\n\ngo 1.26\n\nrequire github.com/hostqos/hostqos v0.0.0\n\nreplace github.com/hostqos/hostqos => "+root+"\n")
	write("main.go", `package main

import (
	"fmt"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/rtchan"
)

func main() {
	c := api.NewClient(api.DefaultSocket)
	_ = c.Rules() // the typed client
	var classes api.ClassesAPI = c.Classes() // the interfaces programs name
	var resvs api.ReservationsAPI = c.Reservations()
	_, _ = classes, resvs
	r := api.NewRule("web")
	r.Proto, r.MaxBW, r.DSCP = "tcp", 10e6, 34
	spec := rtchan.Spec{Name: "video", Mmax: 1200, Rmax: 1000, Bmax: 4}
	fmt.Println(c.Socket, spec.Name, r.Name, r.MaxBW)
}
`)
	// The application's go.sum comes from this checkout's: the same
	// dependencies at the same versions.
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	write("go.sum", string(sum))
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("go", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off", "GOWORK=off")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	run("build", "-o", filepath.Join(dir, "qosapp"), ".")
	out, err := exec.Command(filepath.Join(dir, "qosapp")).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "/run/hostqos/hostqosd.sock video web 10mbit" {
		t.Fatalf("the application printed %q (%v)", out, err)
	}
}
