package xdpgen

import (
	"encoding/binary"
	"net/netip"
)

// FrameSpec describes an Ethernet frame for BPF test runs.
type FrameSpec struct {
	Src, Dst     netip.Addr // IPv4 or IPv6 (both the same family)
	Proto        uint8      // 6 TCP, 17 UDP, 1 ICMP, 58 ICMPv6
	SPort, DPort uint16
	TOS          uint8 // IPv4 TOS / IPv6 traffic class (DSCP<<2 | ECN)
	Payload      int   // payload bytes after the L4 header
}

// BuildFrame builds Ethernet + IPv4/IPv6 + TCP/UDP/ICMP with a valid IPv4
// header checksum (L4 checksums are left zero).
func BuildFrame(s FrameSpec) []byte {
	var l4 []byte
	switch s.Proto {
	case 6:
		l4 = make([]byte, 20+s.Payload)
		binary.BigEndian.PutUint16(l4[0:], s.SPort)
		binary.BigEndian.PutUint16(l4[2:], s.DPort)
		l4[12] = 5 << 4
		l4[13] = 0x10 // ACK
	case 17:
		l4 = make([]byte, 8+s.Payload)
		binary.BigEndian.PutUint16(l4[0:], s.SPort)
		binary.BigEndian.PutUint16(l4[2:], s.DPort)
		binary.BigEndian.PutUint16(l4[4:], uint16(len(l4)))
	default:
		l4 = make([]byte, 8+s.Payload)
		l4[0] = 8 // echo request
	}
	eth := make([]byte, 14)
	copy(eth[0:6], []byte{0x02, 0, 0, 0, 0, 2})
	copy(eth[6:12], []byte{0x02, 0, 0, 0, 0, 1})
	if s.Src.Is4() {
		binary.BigEndian.PutUint16(eth[12:], 0x0800)
		ip := make([]byte, 20)
		ip[0] = 0x45
		ip[1] = s.TOS
		binary.BigEndian.PutUint16(ip[2:], uint16(20+len(l4)))
		binary.BigEndian.PutUint16(ip[4:], 1)
		ip[8] = 64
		ip[9] = s.Proto
		src, dst := s.Src.As4(), s.Dst.As4()
		copy(ip[12:], src[:])
		copy(ip[16:], dst[:])
		binary.BigEndian.PutUint16(ip[10:], IPv4Checksum(ip))
		return append(append(eth, ip...), l4...)
	}
	binary.BigEndian.PutUint16(eth[12:], 0x86dd)
	ip := make([]byte, 40)
	ip[0] = 0x60 | s.TOS>>4
	ip[1] = s.TOS << 4
	binary.BigEndian.PutUint16(ip[4:], uint16(len(l4)))
	ip[6] = s.Proto
	ip[7] = 64
	src, dst := s.Src.As16(), s.Dst.As16()
	copy(ip[8:], src[:])
	copy(ip[24:], dst[:])
	return append(append(eth, ip...), l4...)
}

// IPv4Checksum computes the header checksum of hdr with its checksum
// field taken as zero.
func IPv4Checksum(hdr []byte) uint16 {
	var sum uint32
	for i := 0; i+1 < len(hdr); i += 2 {
		if i == 10 {
			continue
		}
		sum += uint32(binary.BigEndian.Uint16(hdr[i:]))
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}
