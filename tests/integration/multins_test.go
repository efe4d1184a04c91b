package integration

import (
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hostqos/hostqos/internal/testutil"
)

// TestDaemonsInTwoNamespacesDoNotInterfere: two daemons, each in its own
// network namespace, both with a rule for the same executable but a
// different DSCP. Each program run in a namespace is marked by that
// namespace's daemon only.
func TestDaemonsInTwoNamespacesDoNotInterfere(t *testing.T) {
	parallel(t)
	a, b := newEnv(t), newEnv(t)
	a.startDaemon()
	b.startDaemon()
	app := a.app("shared-app") // one file, one inode: the same app for both
	a.hostqos("link", "set", a.iface())
	b.hostqos("link", "set", b.iface())
	a.hostqos("rule", "add", "same", "--exe", app, "--dscp", "EF")
	b.hostqos("rule", "add", "same", "--exe", app, "--dscp", "AF41")

	sa, err := testutil.StartReceiver(a.server, a.server.Iface("client"))
	if err != nil {
		t.Fatal(err)
	}
	defer sa.Stop()
	sb, err := testutil.StartReceiver(b.server, b.server.Iface("client"))
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Stop()
	to := serverV4.Addr().String() + ":7040"
	a.udpSink(to, 20*time.Second)
	b.udpSink(to, 20*time.Second)
	a.runApp(app, "tool", "udp-send", "--to", to, "--pps", "200", "--count", "30", "--size", "100")
	b.runApp(app, "tool", "udp-send", "--to", to, "--pps", "200", "--count", "30", "--size", "100")
	time.Sleep(300 * time.Millisecond)
	allDSCP(t, sa, unix.IPPROTO_UDP, 7040, dscpEF, 30)
	allDSCP(t, sb, unix.IPPROTO_UDP, 7040, dscpAF41, 30)
}
