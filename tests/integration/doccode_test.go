package integration

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hostqos/hostqos/internal/doccode"
	"github.com/hostqos/hostqos/internal/testutil"
)

// TestDocCodeRuns: the programs of the docs marked "doctest" (the QSockets
// "In short" in C, Go and Python, python/README.md's) run as written
// against a real daemon managing the link to the receiver they name,
// 198.18.0.2 port 9000 (the server of this testbed): each exits 0, and
// what they send arrives marked — every UDP datagram with its class's
// DSCP from the first (AF41, then EF after the C program's qchange), the
// attached TCP connections with AF41 (Python) and bulk's DSCP (Go).
// internal/doccode's TestDocCodeBuilds builds them without a daemon.
func TestDocCodeRuns(t *testing.T) {
	parallel(t)
	root := "../.."
	blocks, err := doccode.All(root)
	if err != nil {
		t.Fatal(err)
	}
	if serverV4.Addr().String() != "198.18.0.2" {
		t.Fatalf("the server is %v; the docs' programs send to 198.18.0.2", serverV4.Addr())
	}
	e := newEnv(t)
	e.startDaemon()
	e.hostqos("link", "set", e.iface())
	tcpSink(t, e, "198.18.0.2:9000")
	sn := testutil.NewReceiver(t, e.server, e.server.Iface("client"))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	bulk, err := e.cli.Classes().Get(ctx, "bulk")
	if err != nil {
		t.Fatal(err)
	}

	lib, err := doccode.InstallLib(root, e.dir)
	if err != nil {
		t.Fatal(err)
	}
	pyPath, err := doccode.PythonEnv(root)
	if err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "HOSTQOS_SOCKET="+e.d.Socket, "LD_LIBRARY_PATH="+lib.LibDir(), pyPath)
	ran := map[string]int{}
	for _, b := range blocks {
		var prog []string
		switch b.Lang {
		case "c":
			bin, err := doccode.BuildC(lib, e.dir, b)
			if err != nil {
				t.Error(err)
				continue
			}
			prog = []string{bin}
		case "go":
			bin, err := doccode.BuildGo(root, e.dir, b)
			if err != nil {
				t.Error(err)
				continue
			}
			prog = []string{bin}
		case "python":
			p, err := doccode.WritePython(e.dir, b)
			if err != nil {
				t.Fatal(err)
			}
			prog = []string{"python3", p}
		default:
			t.Errorf("%s: the test does not know how to run %s", b, b.Lang)
			continue
		}
		cmd := e.client.Command(prog[0], prog[1:]...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("%s as written: %v\n%s", b, err, out)
			continue
		}
		t.Logf("%s: %s", b, strings.TrimSpace(string(out)))
		ran[b.Lang]++
	}
	for _, l := range []string{"c", "go", "python"} {
		if ran[l] == 0 {
			t.Errorf("no %s program of the docs ran", l)
		}
	}

	// What they sent, at the receiver.
	time.Sleep(200 * time.Millisecond)
	udp, n := sn.DSCPCounts(unix.IPPROTO_UDP, 9000)
	if n == 0 || udp[34] == 0 || udp[46] == 0 || udp[34]+udp[46] != n {
		t.Errorf("UDP to 9000: %d datagrams, DSCPs %v; want every one marked, AF41 (34) and EF (46)", n, udp)
	}
	tcp, _ := sn.DSCPCounts(unix.IPPROTO_TCP, 9000)
	if d := int(bulk.Class.DSCP); tcp[34] == 0 || tcp[d] == 0 {
		t.Errorf("TCP to 9000: DSCPs %v; want segments of the attached connections marked AF41 (34) and bulk (%d)", tcp, d)
	}
}
