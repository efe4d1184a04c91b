package integration

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hostqos/hostqos/api"
)

// Tests of the API's answers to an ordinary user at its limits: a
// descriptor that is not a socket. The user is nobody, running a
// copy of this test binary (attackerMain) in the mode the test names.

// apiLimitsAttack runs the modes of these tests (see attackerMain):
//
//	opath      ask for a qsocket with an O_PATH descriptor of a Unix socket
//	           file (the daemon's own socket); print "STATUS code" and the
//	           daemon's error text
func apiLimitsAttack(mode string) int {
	sock := os.Getenv("HQ_IT_SOCKET")
	switch mode {
	case "opath":
		fd, err := unix.Open(sock, unix.O_PATH|unix.O_CLOEXEC, 0)
		if err != nil {
			fmt.Println("STATUS open:", err)
			return 1
		}
		defer unix.Close(fd)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err = api.NewClient(sock).QSockets().Attach(ctx, fd, api.QSockParams{Class: "bulk"})
		var ae *api.Error
		if !errors.As(err, &ae) {
			fmt.Println("STATUS no refusal:", err)
			return 1
		}
		fmt.Printf("STATUS %d\n%s\n", ae.Status, ae.Error())
		return 0
	}
	fmt.Fprintln(os.Stderr, "unknown attacker mode", mode)
	return 2
}

// runAttacker runs this test binary as nobody in mode, with env added, and
// returns its output.
func (e *env) runAttacker(mode string, env ...string) string {
	e.t.Helper()
	cmd := e.asUser(uidNobody, e.attacker())
	cmd.Env = append(append(os.Environ(), attackerEnv+"="+mode, "HQ_IT_SOCKET="+e.d.Socket, "HQ_IT_HOSTQOS="+hostqosBin()), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		e.t.Fatalf("attacker %s: %v\n%s", mode, err, out)
	}
	return string(out)
}

// fdNumber is how a descriptor number of the daemon would show in a text.
var fdNumber = regexp.MustCompile(`(?i)(socket|descriptor|fd) \d+`)

// TestQSockNotASocket: an ordinary user passing an O_PATH descriptor of a
// Unix socket file for a qsocket is told, with HTTP 400, that it is not a
// socket (and what to pass instead), with none of the daemon's descriptor
// numbers in the answer.
func TestQSockNotASocket(t *testing.T) {
	parallel(t)
	e := newEnv(t)
	e.startDaemon()
	openForNobody(t, e)
	out := e.runAttacker("opath")
	if !strings.Contains(out, "STATUS 400") || !strings.Contains(out, "not a socket") {
		t.Errorf("qsocket of an O_PATH descriptor: want 400 \"not a socket\", got:\n%s", out)
	}
	if m := fdNumber.FindString(out); m != "" || strings.Contains(out, "bad file descriptor") {
		t.Errorf("the answer shows the daemon's descriptor (%q):\n%s", m, out)
	}
}
