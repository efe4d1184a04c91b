package integration

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hostqos/hostqos/api"
)

// Tests of the API's answers to an ordinary user at its limits: a
// descriptor that is not a socket, a connection beyond the per-user
// limit. The user is nobody, running a copy of this test binary
// (attackerMain) in the mode the test names.

// apiLimitsAttack runs the modes of these tests (see attackerMain):
//
//	opath      ask for a qsocket with an O_PATH descriptor of a Unix socket
//	           file (the daemon's own socket); print "STATUS code" and the
//	           daemon's error text
//	overlimit  hold as many API connections as nobody may (HQ_IT_CONNS,
//	           each with a request answered and kept alive), then run
//	           `hostqos run` (a change) and `hostqos rule list` (a read)
//	           HQ_IT_TRIES times each; print each one's output after a
//	           line "RUN" or "LIST"
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
	case "overlimit":
		var n, tries int
		fmt.Sscan(os.Getenv("HQ_IT_CONNS"), &n)
		fmt.Sscan(os.Getenv("HQ_IT_TRIES"), &tries)
		for i := 0; i < n; i++ {
			c, err := net.Dial("unix", sock)
			if err != nil {
				fmt.Println("hold:", err)
				return 1
			}
			defer c.Close()
			fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: hostqosd\r\n\r\n", api.Path(api.RouteStatus))
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil || resp.StatusCode != http.StatusOK {
				fmt.Println("hold: answer", i, err)
				return 1
			}
			resp.Body.Close()
		}
		hostqos := os.Getenv("HQ_IT_HOSTQOS")
		for i := 0; i < tries; i++ {
			for _, args := range [][]string{{"RUN", "run", "--class", "bulk", "--", "true"}, {"LIST", "rule", "list"}} {
				out, _ := exec.Command(hostqos, append([]string{"--socket", sock}, args[1:]...)...).CombinedOutput()
				fmt.Printf("%s\n%s\n", args[0], strings.TrimSpace(string(out)))
			}
		}
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

// TestConnLimitAnswerReachesCLI: when nobody holds every API connection
// the per-user limit allows, nobody's next `hostqos run` (a change) and
// `hostqos rule list` (a read) print the daemon's 503 text, naming the
// limit and its flag, every time; never "outcome unknown" nor a reset.
func TestConnLimitAnswerReachesCLI(t *testing.T) {
	parallel(t)
	e := newEnv(t)
	e.startDaemon()
	openForNobody(t, e)
	const tries = 10
	out := e.runAttacker("overlimit", "HQ_IT_CONNS=16", fmt.Sprintf("HQ_IT_TRIES=%d", tries))
	parts := regexp.MustCompile(`(?m)^(RUN|LIST)$`).Split(out, -1)
	if len(parts) != 2*tries+1 {
		t.Fatalf("attacker output: %d answers, want %d:\n%s", len(parts)-1, 2*tries, out)
	}
	bad := 0
	for i, p := range parts[1:] {
		what := []string{"hostqos run", "hostqos rule list"}[i%2]
		if !strings.Contains(p, "too many API connections of uid 65534") || !strings.Contains(p, "--max-conns-per-user") ||
			strings.Contains(p, "outcome unknown") {
			bad++
			t.Errorf("%s beyond the connection limit, try %d: want the daemon's 503 text, got:\n%s", what, i/2+1, strings.TrimSpace(p))
		}
	}
	if bad == 0 {
		t.Logf("every one of %d commands showed the daemon's answer, e.g.:\n%s", 2*tries, strings.TrimSpace(parts[1]))
	}
}
