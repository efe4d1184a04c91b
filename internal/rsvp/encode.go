package rsvp

import (
	"encoding/binary"
	"fmt"
	"math"
	"net/netip"
)

// Encode validates m and returns its wire form with the checksum set.
func (m *Message) Encode() ([]byte, error) {
	if err := m.Validate(); err != nil {
		return nil, fmt.Errorf("encode RSVP %s: %w", m.Type, err)
	}
	b := make([]byte, 8, 128)
	b[0] = Version << 4
	b[1] = byte(m.Type)
	b[4] = m.TTL
	b = m.appendSession(b)
	if m.Hop != nil {
		b = appendAddrObj(b, classHop, m.Hop.Addr, binary.BigEndian.AppendUint32(nil, m.Hop.LIH))
	}
	if m.Type == Path || m.Type == Resv {
		b = appendObj(b, classTimeValues, 1, binary.BigEndian.AppendUint32(nil, m.Refresh))
	}
	if m.Error != nil {
		e := m.Error
		b = appendAddrObj(b, classErrorSpec, e.Node, []byte{e.Flags, e.Code, byte(e.Value >> 8), byte(e.Value)})
	}
	if m.Confirm.IsValid() {
		b = appendAddrObj(b, classResvConfirm, m.Confirm, nil)
	}
	if m.Style != 0 {
		b = appendObj(b, classStyle, 1, binary.BigEndian.AppendUint32(nil, uint32(m.Style)&0xffffff))
	}
	if s := m.Sender; s != nil {
		b = appendFilter(b, classSenderTemplate, s.Template)
		if s.Tspec != nil {
			b = appendObj(b, classSenderTspec, 2, tspecBody(ServiceGeneral, *s.Tspec, 0, 0))
		}
	}
	for _, f := range m.Flows {
		// FF: one descriptor per filter, each with its flowspec; SE: one
		// flowspec, then the filters it covers.
		if fs := f.Flowspec; fs != nil {
			b = appendObj(b, classFlowspec, 2, tspecBody(fs.Service, fs.Tspec, fs.RspecRate, fs.RspecSlack))
		}
		for _, flt := range f.Filters {
			b = appendFilter(b, classFilterSpec, flt)
		}
	}
	if len(b) > MaxMessage {
		return nil, fmt.Errorf("encode RSVP %s: %d bytes exceed %d", m.Type, len(b), MaxMessage)
	}
	binary.BigEndian.PutUint16(b[6:], uint16(len(b)))
	binary.BigEndian.PutUint16(b[2:], Checksum(b))
	return b, nil
}

func appendObj(b []byte, class, ctype uint8, body []byte) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(4+len(body)))
	b = append(b, class, ctype)
	return append(b, body...)
}

// appendAddrObj appends an object whose body is an address then rest; the
// C-Type is 1 for IPv4 and 2 for IPv6 (every such class here).
func appendAddrObj(b []byte, class uint8, a netip.Addr, rest []byte) []byte {
	body := a.AsSlice()
	ctype := uint8(1)
	if a.Is6() {
		ctype = 2
	}
	return appendObj(b, class, ctype, append(body, rest...))
}

func (m *Message) appendSession(b []byte) []byte {
	s := m.Session
	return appendAddrObj(b, classSession, s.Dest, []byte{s.Proto, s.Flags, byte(s.Port >> 8), byte(s.Port)})
}

func appendFilter(b []byte, class uint8, f Filter) []byte {
	return appendAddrObj(b, class, f.Src, []byte{0, 0, byte(f.Port >> 8), byte(f.Port)})
}

// Parameter numbers of the IntServ data (RFC 2210 §3.1, 3.3; RFC 2212).
const (
	paramTokenBucket = 127
	paramRspec       = 130
)

// tspecBody is the IntServ body of a SENDER_TSPEC (service 1) or FLOWSPEC
// (service 5: Tspec; service 2: Tspec and Rspec).
func tspecBody(service uint8, t Tspec, rate float32, slack uint32) []byte {
	words := 6 // service header's data: token bucket header + 5 words
	if service == ServiceGuaranteed {
		words = 9
	}
	b := make([]byte, 0, 4*(words+2))
	b = append(b, 0, 0) // version 0, reserved
	b = binary.BigEndian.AppendUint16(b, uint16(words+1))
	b = append(b, service, 0)
	b = binary.BigEndian.AppendUint16(b, uint16(words))
	b = append(b, paramTokenBucket, 0, 0, 5)
	for _, f := range []float32{t.Rate, t.Bucket, t.Peak} {
		b = binary.BigEndian.AppendUint32(b, math.Float32bits(f))
	}
	b = binary.BigEndian.AppendUint32(b, t.MinUnit)
	b = binary.BigEndian.AppendUint32(b, t.MaxPacket)
	if service == ServiceGuaranteed {
		b = append(b, paramRspec, 0, 0, 2)
		b = binary.BigEndian.AppendUint32(b, math.Float32bits(rate))
		b = binary.BigEndian.AppendUint32(b, slack)
	}
	return b
}
