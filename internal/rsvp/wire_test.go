package rsvp

import (
	"encoding/binary"
	"errors"
	"math"
	"net/netip"
	"reflect"
	"strings"
	"testing"
)

var (
	tsp    = Tspec{Rate: 125000, Bucket: 3000, Peak: 250000, MinUnit: 64, MaxPacket: 1500}
	tspInf = Tspec{Rate: 62500, Bucket: 1500, Peak: float32(math.Inf(1)), MinUnit: 100, MaxPacket: 1400}
	fsCL   = Flowspec{Service: ServiceCL, Tspec: tsp}
	fsGS   = Flowspec{Service: ServiceGuaranteed, Tspec: tsp, RspecRate: 150000, RspecSlack: 1000}
)

// samples returns one message of every type (and both styles) for the
// given session destination, sender, previous hop and receiver addresses.
func samples(dst, src, hop, rcv netip.Addr) []*Message {
	sess := Session{Dest: dst, Proto: 17, Port: 5004}
	h := &Hop{Addr: hop, LIH: 7}
	tmpl := Filter{Src: src, Port: 4000}
	tmpl2 := Filter{Src: src, Port: 4001}
	gs, cl := fsGS, fsCL
	errAdm := &ErrorSpec{Node: hop, Code: ErrAdmission, Value: 2}
	return []*Message{
		{Type: Path, TTL: 63, Session: sess, Hop: h, Refresh: 30000, Sender: &Sender{Template: tmpl, Tspec: &tsp}},
		{Type: Path, TTL: 63, Session: sess, Hop: h, Refresh: 1000, Sender: &Sender{Template: tmpl2, Tspec: &tspInf}},
		{Type: Resv, TTL: 64, Session: sess, Hop: h, Refresh: 30000, Confirm: rcv, Style: StyleFF,
			Flows: []FlowDesc{{Flowspec: &gs, Filters: []Filter{tmpl}}, {Flowspec: &cl, Filters: []Filter{tmpl2}}}},
		{Type: Resv, TTL: 64, Session: sess, Hop: h, Refresh: 30000, Style: StyleSE,
			Flows: []FlowDesc{{Flowspec: &cl, Filters: []Filter{tmpl, tmpl2}}}},
		{Type: PathErr, TTL: 64, Session: sess, Error: &ErrorSpec{Node: hop, Code: ErrTrafficControl, Value: 1},
			Sender: &Sender{Template: tmpl, Tspec: &tsp}},
		{Type: ResvErr, TTL: 64, Session: sess, Hop: h, Error: errAdm, Style: StyleFF,
			Flows: []FlowDesc{{Flowspec: &gs, Filters: []Filter{tmpl}}}},
		{Type: PathTear, TTL: 63, Session: sess, Hop: h, Sender: &Sender{Template: tmpl}},
		{Type: ResvTear, TTL: 64, Session: sess, Hop: h, Style: StyleFF, Flows: []FlowDesc{{Filters: []Filter{tmpl}}}},
		{Type: ResvConf, TTL: 64, Session: sess, Error: &ErrorSpec{Node: hop, Code: ErrConfirm}, Confirm: rcv,
			Style: StyleFF, Flows: []FlowDesc{{Flowspec: &gs, Filters: []Filter{tmpl}}}},
	}
}

func allSamples() []*Message {
	v4 := samples(netip.MustParseAddr("198.18.2.2"), netip.MustParseAddr("198.18.1.2"),
		netip.MustParseAddr("198.18.1.1"), netip.MustParseAddr("198.18.2.2"))
	v6 := samples(netip.MustParseAddr("2001:db8:2::2"), netip.MustParseAddr("2001:db8:1::2"),
		netip.MustParseAddr("2001:db8:1::1"), netip.MustParseAddr("2001:db8:2::2"))
	return append(v4, v6...)
}

func TestRoundTrip(t *testing.T) {
	for _, m := range allSamples() {
		b, err := m.Encode()
		if err != nil {
			t.Fatalf("%s: %v", m.Type, err)
		}
		got, err := Decode(b)
		if err != nil {
			t.Fatalf("%s %s: decode: %v", m.Type, m.Session.Dest, err)
		}
		if !reflect.DeepEqual(got, m) {
			t.Errorf("%s %s: decoded\n%+v\nwant\n%+v", m.Type, m.Session.Dest, got, m)
		}
	}
}

// TestKnownBytes pins the encoding of a Path message byte by byte against
// RFC 2205 / RFC 2210 layouts.
func TestKnownBytes(t *testing.T) {
	m := allSamples()[0]
	b, err := m.Encode()
	if err != nil {
		t.Fatal(err)
	}
	// header 8 + SESSION 12 + RSVP_HOP 12 + TIME_VALUES 8 + SENDER_TEMPLATE 12 + SENDER_TSPEC 36
	if len(b) != 88 {
		t.Fatalf("Path is %d bytes, want 88", len(b))
	}
	want := map[int][]byte{
		0:  {0x10, 1},                                            // version 1, flags 0, Path
		4:  {63, 0, 0, 88},                                       // Send_TTL, reserved, length
		8:  {0, 12, 1, 1, 198, 18, 2, 2, 17, 0, 0x13, 0x8c},      // SESSION IPv4: dest, UDP, flags, port 5004
		20: {0, 12, 3, 1, 198, 18, 1, 1, 0, 0, 0, 7},             // RSVP_HOP
		32: {0, 8, 5, 1, 0, 0, 0x75, 0x30},                       // TIME_VALUES 30000 ms
		40: {0, 12, 11, 1, 198, 18, 1, 2, 0, 0, 0x0f, 0xa0},      // SENDER_TEMPLATE port 4000
		52: {0, 36, 12, 2, 0, 0, 0, 7, 1, 0, 0, 6, 127, 0, 0, 5}, // SENDER_TSPEC IntServ headers
		68: {0x47, 0xf4, 0x24, 0x00},                             // r = 125000.0
	}
	for off, w := range want {
		if got := b[off : off+len(w)]; !reflect.DeepEqual(got, w) {
			t.Errorf("bytes at %d: % x, want % x", off, got, w)
		}
	}
	// The checksum makes the one's complement sum of the message 0xffff.
	var sum uint32
	for i := 0; i < len(b); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	if sum != 0xffff {
		t.Errorf("one's complement sum 0x%x, want 0xffff", sum)
	}
}

func TestDecodeRefuses(t *testing.T) {
	good, err := allSamples()[0].Encode()
	if err != nil {
		t.Fatal(err)
	}
	mod := func(f func(b []byte) []byte) []byte {
		b := f(append([]byte(nil), good...))
		binary.BigEndian.PutUint16(b[6:], uint16(len(b)))
		binary.BigEndian.PutUint16(b[2:], Checksum(b))
		return b
	}
	obj := func(class, ctype uint8, body ...byte) []byte {
		return appendObj(nil, class, ctype, body)
	}
	cases := []struct {
		name string
		b    []byte
		want string
	}{
		{"short", good[:6], "shorter than"},
		{"checksum", func() []byte { b := append([]byte(nil), good...); b[3] ^= 1; return b }(), "checksum"},
		{"length", func() []byte { b := append([]byte(nil), good...); b[7] = 84; return b }(), "length field"},
		{"version", mod(func(b []byte) []byte { b[0] = 0x20; return b }), "version 2"},
		{"type", mod(func(b []byte) []byte { b[1] = 9; return b }), "unknown message type"},
		{"object length", mod(func(b []byte) []byte { b[9] = 6; return b }), "length 6"},
		{"object zero length", mod(func(b []byte) []byte { b[9] = 0; return b }), "length 0"},
		{"second session", mod(func(b []byte) []byte { return append(b, b[8:20]...) }), "second SESSION"},
		{"unknown class", mod(func(b []byte) []byte { return append(b, obj(60, 1, 0, 0, 0, 0)...) }), "unknown object class 60"},
		{"integrity", mod(func(b []byte) []byte { return append(b, obj(classIntegrity, 1, 0, 0, 0, 0)...) }), "INTEGRITY"},
		{"multicast", mod(func(b []byte) []byte { b[12] = 239; return b }), "multicast"},
		{"family", mod(func(b []byte) []byte {
			return append(b[:20], append(obj(classHop, 2, make([]byte, 20)...), b[32:]...)...)
		}), "not in the session's family"},
		{"no tspec", mod(func(b []byte) []byte { return b[:52] }), "without SENDER_TSPEC"},
		{"negative rate", mod(func(b []byte) []byte { putF32(b[68:], -1); return b }), "token rate"},
		{"NaN bucket", mod(func(b []byte) []byte { putF32(b[72:], float32(math.NaN())); return b }), "bucket size"},
		{"peak below rate", mod(func(b []byte) []byte { putF32(b[76:], 1); return b }), "peak rate"},
		{"m above M", mod(func(b []byte) []byte { binary.BigEndian.PutUint32(b[80:], 9000); return b }), "minimum policed unit"},
		{"intserv length", mod(func(b []byte) []byte { b[59] = 8; return b }), "IntServ length"},
	}
	for _, c := range cases {
		_, err := Decode(c.b)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err %v, want one containing %q", c.name, err, c.want)
		}
	}
	// Skippable classes (1bbbbbbb) and ADSPEC are ignored.
	b := mod(func(b []byte) []byte { return append(b, obj(200, 1, 1, 2, 3, 4)...) })
	if _, err := Decode(b); err != nil {
		t.Errorf("class 200 not skipped: %v", err)
	}
	_, err = Decode(mod(func(b []byte) []byte { return append(b, obj(classScope, 1, 1, 2, 3, 4)...) }))
	if !errors.Is(err, ErrUnsupported) {
		t.Errorf("SCOPE: %v, want ErrUnsupported", err)
	}
}

func TestEncodeRefuses(t *testing.T) {
	s := allSamples()
	wf := *s[2]
	wf.Style = StyleWF
	noHop := *s[0]
	noHop.Hop = nil
	badGS := fsGS
	badGS.RspecRate = 1
	gs := *s[5]
	gs.Flows = []FlowDesc{{Flowspec: &badGS, Filters: gs.Flows[0].Filters}}
	for _, m := range []*Message{&wf, &noHop, &gs} {
		if _, err := m.Encode(); err == nil {
			t.Errorf("%s style %s encoded", m.Type, m.Style)
		}
	}
}
