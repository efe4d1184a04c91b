package xdpgen

import (
	"encoding/binary"
	"net/netip"
	"testing"
)

// TestBuildFrame: the frames have the lengths, types, addresses and ports
// asked for, and an IPv4 header whose checksum verifies.
func TestBuildFrame(t *testing.T) {
	for _, c := range []struct {
		src, dst     string
		proto        uint8
		l3, l4       int
		etype        uint16
		sport, dport uint16
	}{
		{"198.18.0.1", "198.19.0.1", 6, 20, 20, 0x0800, 40000, 443},
		{"198.18.0.1", "198.19.0.1", 17, 20, 8, 0x0800, 5000, 53},
		{"2001:db8::1", "2001:db8::2", 17, 40, 8, 0x86dd, 5000, 53},
		{"2001:db8::1", "2001:db8::2", 58, 40, 8, 0x86dd, 0, 0},
	} {
		src, dst := netip.MustParseAddr(c.src), netip.MustParseAddr(c.dst)
		f := BuildFrame(FrameSpec{Src: src, Dst: dst, Proto: c.proto, SPort: c.sport, DPort: c.dport, TOS: 46 << 2, Payload: 64})
		if len(f) != 14+c.l3+c.l4+64 {
			t.Errorf("%s %d: %d bytes, want %d", c.src, c.proto, len(f), 14+c.l3+c.l4+64)
			continue
		}
		if et := binary.BigEndian.Uint16(f[12:]); et != c.etype {
			t.Errorf("%s %d: ethertype %#x, want %#x", c.src, c.proto, et, c.etype)
		}
		ip, l4 := f[14:14+c.l3], f[14+c.l3:]
		var gotSrc, gotDst netip.Addr
		var tos uint8
		if src.Is4() {
			gotSrc, gotDst = netip.AddrFrom4([4]byte(ip[12:16])), netip.AddrFrom4([4]byte(ip[16:20]))
			tos = ip[1]
			if ip[9] != c.proto || int(binary.BigEndian.Uint16(ip[2:])) != c.l3+c.l4+64 {
				t.Errorf("%s %d: protocol %d, total length %d", c.src, c.proto, ip[9], binary.BigEndian.Uint16(ip[2:]))
			}
			if got := binary.BigEndian.Uint16(ip[10:]); got != IPv4Checksum(ip) || got == 0 {
				t.Errorf("%s %d: header checksum %#x, want %#x", c.src, c.proto, got, IPv4Checksum(ip))
			}
		} else {
			gotSrc, gotDst = netip.AddrFrom16([16]byte(ip[8:24])), netip.AddrFrom16([16]byte(ip[24:40]))
			tos = ip[0]<<4 | ip[1]>>4
			if ip[6] != c.proto || int(binary.BigEndian.Uint16(ip[4:])) != c.l4+64 {
				t.Errorf("%s %d: next header %d, payload length %d", c.src, c.proto, ip[6], binary.BigEndian.Uint16(ip[4:]))
			}
		}
		if gotSrc != src || gotDst != dst || tos != 46<<2 {
			t.Errorf("%s %d: %v → %v, traffic class %#x", c.src, c.proto, gotSrc, gotDst, tos)
		}
		if c.proto == 6 || c.proto == 17 {
			if sp, dp := binary.BigEndian.Uint16(l4[0:]), binary.BigEndian.Uint16(l4[2:]); sp != c.sport || dp != c.dport {
				t.Errorf("%s %d: ports %d → %d", c.src, c.proto, sp, dp)
			}
		}
	}
}

// TestIPv4Checksum: RFC 1071's one's-complement sum of a header with its
// checksum filled in is 0xffff.
func TestIPv4Checksum(t *testing.T) {
	hdr := []byte{0x45, 0, 0, 0x54, 0xab, 0xcd, 0x40, 0, 64, 1, 0, 0, 192, 0, 2, 1, 198, 51, 100, 7}
	binary.BigEndian.PutUint16(hdr[10:], IPv4Checksum(hdr))
	var sum uint32
	for i := 0; i < len(hdr); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(hdr[i:]))
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	if sum != 0xffff {
		t.Fatalf("header with its checksum sums to %#x, want 0xffff", sum)
	}
}
