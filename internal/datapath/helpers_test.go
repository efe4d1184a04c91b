package datapath

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
)

func needRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// tempPinDir returns a fresh pin directory that is removed at cleanup.
func tempPinDir(t testing.TB) string {
	dir := filepath.Join("/sys/fs/bpf", "hqdp-"+randHex(4))
	t.Cleanup(func() {
		if err := Remove(dir); err != nil {
			t.Errorf("remove %s: %v", dir, err)
		}
	})
	return dir
}

func openTest(t testing.TB, opts Options) *Datapath {
	t.Helper()
	needRoot(t)
	if opts.BPFFSDir == "" {
		opts.BPFFSDir = tempPinDir(t)
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
