package integration

import (
	"fmt"
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/testutil"
)

// TestProtectedClientGetsClass: the managed host serves on a TCP port; a
// client protected with --class voice gets its answers marked EF (the
// class's DSCP) while an unprotected client's answers from the same port
// are not; after `protect remove` the protected client's are not either.
func TestProtectedClientGetsClass(t *testing.T) {
	parallel(t)
	e := newEnv(t)
	e.startDaemon()
	e.addServerAddrs(t, legitV4)
	e.hostqos("link", "set", e.iface())
	const port = 8443
	var ln net.Listener
	if err := e.client.Do(func() (err error) {
		ln, err = net.Listen("tcp", netip.AddrPortFrom(clientV4.Addr(), port).String())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() { // the server: answers every connection with 64 KiB
		buf := make([]byte, 64<<10)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write(buf)
			c.Close()
		}
	}()
	sn := testutil.NewReceiver(t, e.server, e.server.Iface("client"))
	fetch := func(from netip.Addr, lport int) {
		t.Helper()
		if err := e.server.Do(func() error {
			d := net.Dialer{LocalAddr: &net.TCPAddr{IP: from.AsSlice(), Port: lport}}
			c, err := d.Dial("tcp", netip.AddrPortFrom(clientV4.Addr(), port).String())
			if err != nil {
				return err
			}
			defer c.Close()
			n, err := io.Copy(io.Discard, c)
			if err == nil && n != 64<<10 {
				err = fmt.Errorf("read %d bytes", n)
			}
			return err
		}); err != nil {
			t.Fatalf("fetch from %v:%d: %v", from, lport, err)
		}
	}
	e.hostqos("protect", "add", legitV4.String(), "--port", fmt.Sprint(port), "--class", "voice")
	var ps []api.ProtectedInfo
	e.hostqosJSON(&ps, "protect", "list", "-o", "json")
	if len(ps) != 1 || ps[0].Class != "voice" {
		t.Fatalf("protect list: %+v", ps)
	}
	fetch(legitV4, 40001)         // protected
	fetch(serverV4.Addr(), 40002) // not protected
	e.hostqos("protect", "remove", netip.AddrPortFrom(legitV4, port).String())
	fetch(legitV4, 40003) // no longer protected
	for _, c := range []struct {
		lport uint16
		want  bool
	}{{40001, true}, {40002, false}, {40003, false}} {
		// The receiver's capture may lag the fetch on a busy machine.
		var counts map[int]int
		var n int
		eventually(t, 5*time.Second, fmt.Sprintf("answers to port %d captured", c.lport), func() (bool, string) {
			counts, n = sn.DSCPCounts(unix.IPPROTO_TCP, c.lport)
			return n >= 3, fmt.Sprintf("only %d packets seen (%v)", n, counts) // segments may arrive coalesced
		})
		t.Logf("answers to port %d: DSCP counts %v", c.lport, counts)
		if all := counts[dscpEF] == n; all != c.want || (!c.want && counts[dscpEF] != 0) {
			t.Errorf("answers to port %d: DSCP counts %v of %d packets; want all EF = %v", c.lport, counts, n, c.want)
		}
	}
}
