package datapath

import (
	"encoding/binary"
	"github.com/hostqos/hostqos/internal/testutil"
	"net/netip"
	"testing"
)

func openTest(t testing.TB, opts Options) *Datapath {
	t.Helper()
	testutil.NeedRoot(t)
	if opts.BPFFSDir == "" {
		opts.BPFFSDir = testutil.TempPinDir(t)
	}
	d, err := Open(opts)
	if err != nil {
		t.Fatalf("open datapath: %v", err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func pfx(s string) netip.Prefix { return netip.MustParsePrefix(s) }
func addr(s string) netip.Addr  { return netip.MustParseAddr(s) }

// tosOf returns the IPv4 TOS / IPv6 traffic class of an Ethernet frame.
func tosOf(frame []byte) uint8 {
	ip := frame[14:]
	if binary.BigEndian.Uint16(frame[12:]) == 0x0800 {
		return ip[1]
	}
	return ip[0]<<4 | ip[1]>>4
}

func netipAP(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }
