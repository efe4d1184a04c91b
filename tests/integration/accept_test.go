package integration

import (
	"net/netip"
	"strings"
	"testing"
	"time"
)

// checkAcceptedIdentity: a TCP connection that a managed server accepts
// carries the listener's identity from its first packet, in both
// directions: a rule naming the server's executable (a tcp-sink) counts
// every packet of the connection a peer on the far side opens, received
// and sent (the ACKs), the SYN included — the rule's counters equal the
// flow's. The server is a Go program, so its listener is an MPTCP socket
// and the connection a fallback TCP subflow: a kernel socket whose
// identity is its MPTCP socket's. It runs on a path env whose daemon manages the client's link;
// the server listens on clientIP, the peer sends from the server node.
func checkAcceptedIdentity(t *testing.T, e *env, clientIP netip.Addr) {
	t.Helper()
	srv := e.app("tcpsrv")
	e.hostqos("rule", "add", "accepted", "--exe", srv, "--proto", "tcp")
	listen := netip.AddrPortFrom(clientIP, 6100).String()
	cmd, out := e.start(srv, "tool", "tcp-sink", "--listen", listen, "--streams", "1", "--duration", "10s")
	eventually(t, 5*time.Second, "tcp-sink listening", func() (bool, string) {
		return strings.Contains(out.String(), "listening on"), out.String()
	})
	if b, err := e.server.Command(hostqosBin(), "tool", "tcp-send", "--to", listen, "--duration", "1s").CombinedOutput(); err != nil {
		t.Fatalf("tcp-send: %v\n%s", err, b)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("tcp-sink: %v\n%s", err, out)
	}
	time.Sleep(300 * time.Millisecond) // the last ACKs of the close
	rs := e.ruleStat("accepted")
	s, err := e.d.Stats("flows")
	if err != nil {
		t.Fatal(err)
	}
	var flowIn, flowOut uint64
	for _, f := range s.Flows {
		if f.Local == listen {
			if f.Rule != "accepted" {
				t.Errorf("accepted connection %s ↔ %s: rule %q, want accepted", f.Local, f.Remote, f.Rule)
			}
			flowIn, flowOut = f.In.Packets, f.Packets
		}
	}
	t.Logf("accepted connection: rule accepted OUT %d packets, IN %d packets %d bytes; the flow OUT %d, IN %d packets",
		rs.Packets, rs.In.Packets, rs.In.Bytes, flowOut, flowIn)
	if flowIn == 0 || rs.In.Packets != flowIn || rs.Packets != flowOut {
		t.Errorf("rule accepted counted OUT %d / IN %d packets, the accepted connection's flow %d / %d: the accepted socket (or its first packets) did not carry the server's identity",
			rs.Packets, rs.In.Packets, flowOut, flowIn)
	}
}
