package traffic

import (
	"encoding/binary"
	"time"
)

// HeaderSize is the size of the header that starts every datagram our UDP
// generators send; it is also the smallest UDP payload they accept.
//
//	0..1   magic 0x4851 ("HQ")
//	2      version (1)
//	3      flags: 1 = FIN (end of flow), 2 = echoed by an echo server
//	4..7   flow id (call number, stream id)
//	8..15  sequence number from 0; in a FIN: number of data packets sent
//	16..23 sender wall-clock time, Unix nanoseconds
//	24..31 aux: video: frame number (4), fragment index (2), fragment count (2);
//	       echoed packets: the echo server's receive time, Unix nanoseconds;
//	       FIN of a video flow: number of frames sent
const HeaderSize = 32

const (
	magic       = 0x4851
	version     = 1
	flagFIN     = 1
	flagEchoed  = 2
	finCopies   = 3
	finInterval = 5 * time.Millisecond
)

type header struct {
	flags uint8
	flow  uint32
	seq   uint64
	sent  int64
	aux   uint64
}

func (h *header) put(b []byte) {
	binary.BigEndian.PutUint16(b[0:], magic)
	b[2] = version
	b[3] = h.flags
	binary.BigEndian.PutUint32(b[4:], h.flow)
	binary.BigEndian.PutUint64(b[8:], h.seq)
	binary.BigEndian.PutUint64(b[16:], uint64(h.sent))
	binary.BigEndian.PutUint64(b[24:], h.aux)
}

func parseHeader(b []byte) (header, bool) {
	if len(b) < HeaderSize || binary.BigEndian.Uint16(b) != magic || b[2] != version {
		return header{}, false
	}
	return header{
		flags: b[3],
		flow:  binary.BigEndian.Uint32(b[4:]),
		seq:   binary.BigEndian.Uint64(b[8:]),
		sent:  int64(binary.BigEndian.Uint64(b[16:])),
		aux:   binary.BigEndian.Uint64(b[24:]),
	}, true
}

func videoAux(frame uint32, frag, frags uint16) uint64 {
	return uint64(frame)<<32 | uint64(frag)<<16 | uint64(frags)
}

func splitVideoAux(a uint64) (frame uint32, frag, frags uint16) {
	return uint32(a >> 32), uint16(a >> 16), uint16(a)
}

// IP and UDP header sizes used to turn payload sizes into IP packet sizes.
const (
	udpHeader  = 8
	ipv4Header = 20
	ipv6Header = 40
)

func ipOverhead(v6 bool) int {
	if v6 {
		return ipv6Header + udpHeader
	}
	return ipv4Header + udpHeader
}
