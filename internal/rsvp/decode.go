package rsvp

import (
	"encoding/binary"
	"fmt"
	"math"
	"net/netip"
)

// Decode parses one RSVP message: the common header (version, length equal
// to len(b), checksum when non-zero), then its objects. Single objects may
// come in any order; flow and sender descriptors in the order of RFC 2205
// §3.1. Unknown classes of the form 0bbbbbbb are refused (§3.10); 1bbbbbbb
// ones, POLICY_DATA and ADSPEC are skipped. The result is validated as a
// whole (Validate). Nothing is allocated beyond the message's own size.
func Decode(b []byte) (*Message, error) {
	if len(b) < 8 {
		return nil, errMsg("%d bytes, shorter than the 8-byte common header", len(b))
	}
	if len(b) > MaxMessage {
		return nil, errMsg("%d bytes, longer than %d", len(b), MaxMessage)
	}
	if v := b[0] >> 4; v != Version {
		return nil, errMsg("version %d, want %d", v, Version)
	}
	if n := int(binary.BigEndian.Uint16(b[6:])); n != len(b) {
		return nil, errMsg("length field %d, but %d bytes received", n, len(b))
	}
	if len(b)%4 != 0 {
		return nil, errMsg("length %d not a multiple of 4", len(b))
	}
	if c := binary.BigEndian.Uint16(b[2:]); c != 0 && c != Checksum(b) {
		return nil, errMsg("checksum 0x%04x, computed 0x%04x", c, Checksum(b))
	}
	m := &Message{Type: MsgType(b[1]), TTL: b[4]}
	if _, ok := msgNames[m.Type]; !ok {
		return nil, errMsg("unknown message type %d", b[1])
	}
	d := decoder{m: m}
	objs := 0
	for off := 8; off < len(b); {
		if len(b)-off < 4 {
			return nil, errMsg("%d trailing bytes at offset %d", len(b)-off, off)
		}
		n := int(binary.BigEndian.Uint16(b[off:]))
		if n < 4 || n%4 != 0 || off+n > len(b) {
			return nil, errMsg("object at offset %d: length %d (want a multiple of 4, at least 4, within the message)", off, n)
		}
		if objs++; objs > MaxObjects {
			return nil, errMsg("more than %d objects", MaxObjects)
		}
		if err := d.object(b[off+2], b[off+3], b[off+4:off+n]); err != nil {
			return nil, fmt.Errorf("object at offset %d: %w", off, err)
		}
		off += n
	}
	if err := m.Validate(); err != nil {
		return nil, err
	}
	return m, nil
}

type decoder struct {
	m                                         *Message
	session, hop, time, errspec, confirm, sty bool
}

func (d *decoder) once(seen *bool, name string) error {
	if *seen {
		return errMsg("second %s object", name)
	}
	*seen = true
	return nil
}

// addr reads an address body of ctype 1 (IPv4) or 2 (IPv6) followed by
// rest bytes.
func addr(ctype uint8, body []byte, rest int, name string) (netip.Addr, []byte, error) {
	var n int
	switch ctype {
	case 1:
		n = 4
	case 2:
		n = 16
	default:
		return netip.Addr{}, nil, errMsg("%s C-Type %d (want 1 IPv4 or 2 IPv6)", name, ctype)
	}
	if len(body) != n+rest {
		return netip.Addr{}, nil, errMsg("%s C-Type %d: %d bytes, want %d", name, ctype, len(body)+4, n+rest+4)
	}
	a, _ := netip.AddrFromSlice(body[:n])
	return a, body[n:], nil
}

func (d *decoder) object(class, ctype uint8, body []byte) error {
	m := d.m
	switch class {
	case classSession:
		if err := d.once(&d.session, "SESSION"); err != nil {
			return err
		}
		a, r, err := addr(ctype, body, 4, "SESSION")
		if err != nil {
			return err
		}
		m.Session = Session{Dest: a, Proto: r[0], Flags: r[1], Port: binary.BigEndian.Uint16(r[2:])}
	case classHop:
		if err := d.once(&d.hop, "RSVP_HOP"); err != nil {
			return err
		}
		a, r, err := addr(ctype, body, 4, "RSVP_HOP")
		if err != nil {
			return err
		}
		m.Hop = &Hop{Addr: a, LIH: binary.BigEndian.Uint32(r)}
	case classTimeValues:
		if err := d.once(&d.time, "TIME_VALUES"); err != nil {
			return err
		}
		if ctype != 1 || len(body) != 4 {
			return errMsg("TIME_VALUES C-Type %d, %d bytes (want C-Type 1, 8 bytes)", ctype, len(body)+4)
		}
		m.Refresh = binary.BigEndian.Uint32(body)
	case classErrorSpec:
		if err := d.once(&d.errspec, "ERROR_SPEC"); err != nil {
			return err
		}
		a, r, err := addr(ctype, body, 4, "ERROR_SPEC")
		if err != nil {
			return err
		}
		m.Error = &ErrorSpec{Node: a, Flags: r[0], Code: r[1], Value: binary.BigEndian.Uint16(r[2:])}
	case classResvConfirm:
		if err := d.once(&d.confirm, "RESV_CONFIRM"); err != nil {
			return err
		}
		a, _, err := addr(ctype, body, 0, "RESV_CONFIRM")
		if err != nil {
			return err
		}
		m.Confirm = a
	case classStyle:
		if err := d.once(&d.sty, "STYLE"); err != nil {
			return err
		}
		if ctype != 1 || len(body) != 4 {
			return errMsg("STYLE C-Type %d, %d bytes (want C-Type 1, 8 bytes)", ctype, len(body)+4)
		}
		m.Style = Style(binary.BigEndian.Uint32(body) & 0xffffff)
		if m.Style == 0 {
			return errMsg("STYLE option vector 0")
		}
	case classSenderTemplate:
		if m.Sender != nil {
			return errMsg("second sender descriptor")
		}
		a, r, err := addr(ctype, body, 4, "SENDER_TEMPLATE")
		if err != nil {
			return err
		}
		m.Sender = &Sender{Template: Filter{Src: a, Port: binary.BigEndian.Uint16(r[2:])}}
	case classSenderTspec:
		if m.Sender == nil || m.Sender.Tspec != nil {
			return errMsg("SENDER_TSPEC not right after a SENDER_TEMPLATE")
		}
		fs, err := intserv(ctype, body, "SENDER_TSPEC")
		if err != nil {
			return err
		}
		if fs.Service != ServiceGeneral {
			return errMsg("SENDER_TSPEC service %d (want 1)", fs.Service)
		}
		m.Sender.Tspec = &fs.Tspec
	case classFlowspec:
		fs, err := intserv(ctype, body, "FLOWSPEC")
		if err != nil {
			return err
		}
		if fs.Service != ServiceCL && fs.Service != ServiceGuaranteed {
			return errMsg("FLOWSPEC service %d (want 2 guaranteed or 5 controlled-load)", fs.Service)
		}
		if len(m.Flows) >= MaxFlows {
			return errMsg("more than %d flow descriptors", MaxFlows)
		}
		m.Flows = append(m.Flows, FlowDesc{Flowspec: &fs})
	case classFilterSpec:
		a, r, err := addr(ctype, body, 4, "FILTER_SPEC")
		if err != nil {
			return err
		}
		f := Filter{Src: a, Port: binary.BigEndian.Uint16(r[2:])}
		n := 0
		for _, fd := range m.Flows {
			n += len(fd.Filters)
		}
		if n >= MaxFlows {
			return errMsg("more than %d filter specs", MaxFlows)
		}
		last := len(m.Flows) - 1
		switch {
		case last < 0:
			// ResvTear may omit flowspecs: a filter alone is a descriptor.
			m.Flows = append(m.Flows, FlowDesc{Filters: []Filter{f}})
		case m.Style == StyleFF && len(m.Flows[last].Filters) > 0:
			// FF: a filter without its own flowspec reuses the previous one.
			m.Flows = append(m.Flows, FlowDesc{Flowspec: m.Flows[last].Flowspec, Filters: []Filter{f}})
		default:
			m.Flows[last].Filters = append(m.Flows[last].Filters, f)
		}
	case classIntegrity:
		return fmt.Errorf("INTEGRITY: %w (RFC 2747 authentication is out of scope)", ErrUnsupported)
	case classScope:
		return fmt.Errorf("SCOPE (wildcard-filter style): %w", ErrUnsupported)
	case classAdspec, classPolicyData:
		// Carried through unchanged by RFC 2205 routers; we neither use nor forward them.
	default:
		if class&0x80 == 0 {
			return errMsg("unknown object class %d", class)
		}
	}
	return nil
}

// intserv reads an RFC 2210 IntServ body: SENDER_TSPEC (service 1) or
// FLOWSPEC (service 5, or service 2 with an Rspec).
func intserv(ctype uint8, b []byte, name string) (Flowspec, error) {
	var fs Flowspec
	if ctype != 2 {
		return fs, errMsg("%s C-Type %d (want 2, IntServ)", name, ctype)
	}
	if len(b) < 8 {
		return fs, errMsg("%s: %d bytes, too short", name, len(b)+4)
	}
	if v := b[0] >> 4; v != 0 {
		return fs, errMsg("%s: IntServ version %d (want 0)", name, v)
	}
	if n := int(binary.BigEndian.Uint16(b[2:])); 4*(n+1) != len(b) {
		return fs, errMsg("%s: IntServ length %d words, object holds %d", name, n, len(b)/4-1)
	}
	fs.Service = b[4]
	want := 6
	if fs.Service == ServiceGuaranteed {
		want = 9
	}
	if n := int(binary.BigEndian.Uint16(b[6:])); n != want || len(b) != 4*(want+2) {
		return fs, errMsg("%s: service %d data length %d words (want %d)", name, fs.Service, n, want)
	}
	if b[8] != paramTokenBucket || binary.BigEndian.Uint16(b[10:]) != 5 {
		return fs, errMsg("%s: parameter %d length %d (want 127 token bucket, 5 words)", name, b[8], binary.BigEndian.Uint16(b[10:]))
	}
	fs.Tspec = Tspec{Rate: getF32(b[12:]), Bucket: getF32(b[16:]), Peak: getF32(b[20:]),
		MinUnit: binary.BigEndian.Uint32(b[24:]), MaxPacket: binary.BigEndian.Uint32(b[28:])}
	if fs.Service == ServiceGuaranteed {
		if b[32] != paramRspec || binary.BigEndian.Uint16(b[34:]) != 2 {
			return fs, errMsg("%s: parameter %d length %d (want 130 Rspec, 2 words)", name, b[32], binary.BigEndian.Uint16(b[34:]))
		}
		fs.RspecRate = getF32(b[36:])
		fs.RspecSlack = binary.BigEndian.Uint32(b[40:])
	}
	return fs, nil
}

// Validate checks that m has exactly the objects its type needs, in one
// address family, for a unicast session, with sane traffic parameters.
func (m *Message) Validate() error {
	t := m.Type
	if _, ok := msgNames[t]; !ok {
		return errMsg("unknown message type %d", uint8(t))
	}
	s := m.Session
	if !s.Dest.IsValid() {
		return errMsg("%s without SESSION", t)
	}
	if s.Dest.IsMulticast() {
		return fmt.Errorf("session %s: multicast destinations: %w (unicast sessions only)", s.Dest, ErrUnsupported)
	}
	if s.Dest.IsUnspecified() {
		return errMsg("session destination %s", s.Dest)
	}
	v6 := s.Dest.Is6()
	fam := func(a netip.Addr, what string) error {
		if !a.IsValid() || a.Is6() != v6 {
			return errMsg("%s address %v not in the session's family (%s)", what, a, s.Dest)
		}
		return nil
	}
	need := func(ok bool, what string) error {
		if !ok {
			return errMsg("%s without %s", t, what)
		}
		return nil
	}
	deny := func(present bool, what string) error {
		if present {
			return errMsg("%s must not carry %s", t, what)
		}
		return nil
	}
	hasHop := t != PathErr && t != ResvConf
	hasTime := t == Path || t == Resv
	hasErr := t == PathErr || t == ResvErr || t == ResvConf
	pathish := t == Path || t == PathTear || t == PathErr
	for _, err := range []error{
		need(m.Hop != nil || !hasHop, "RSVP_HOP"), deny(m.Hop != nil && !hasHop, "RSVP_HOP"),
		need(m.Refresh != 0 || !hasTime, "TIME_VALUES (a non-zero refresh period)"), deny(m.Refresh != 0 && !hasTime, "TIME_VALUES"),
		need(m.Error != nil || !hasErr, "ERROR_SPEC"), deny(m.Error != nil && !hasErr, "ERROR_SPEC"),
		need(m.Confirm.IsValid() || t != ResvConf, "RESV_CONFIRM"), deny(m.Confirm.IsValid() && t != Resv && t != ResvConf, "RESV_CONFIRM"),
		need(m.Style != 0 || pathish, "STYLE"), deny(m.Style != 0 && pathish, "STYLE"),
		need(m.Sender != nil || t != Path, "a sender descriptor"), deny(m.Sender != nil && !pathish, "a sender descriptor"),
		need(len(m.Flows) > 0 || pathish || t == ResvErr, "a flow descriptor"), deny(len(m.Flows) > 0 && pathish, "a flow descriptor"),
	} {
		if err != nil {
			return err
		}
	}
	if m.Hop != nil {
		if err := fam(m.Hop.Addr, "RSVP_HOP"); err != nil {
			return err
		}
	}
	if m.Error != nil {
		if err := fam(m.Error.Node, "ERROR_SPEC"); err != nil {
			return err
		}
	}
	if m.Confirm.IsValid() {
		if err := fam(m.Confirm, "RESV_CONFIRM"); err != nil {
			return err
		}
	}
	if sd := m.Sender; sd != nil {
		if err := fam(sd.Template.Src, "SENDER_TEMPLATE"); err != nil {
			return err
		}
		if sd.Tspec == nil && t == Path {
			return errMsg("Path without SENDER_TSPEC")
		}
		if sd.Tspec != nil {
			if err := sd.Tspec.Validate(); err != nil {
				return fmt.Errorf("SENDER_TSPEC: %w", err)
			}
		}
	}
	switch m.Style {
	case 0, StyleFF, StyleSE:
	case StyleWF:
		return fmt.Errorf("style WF (wildcard filter): %w (FF and SE only)", ErrUnsupported)
	default:
		return errMsg("STYLE option vector 0x%x (want FF 0x0a or SE 0x12)", uint32(m.Style))
	}
	if len(m.Flows) > MaxFlows {
		return errMsg("%d flow descriptors, more than %d", len(m.Flows), MaxFlows)
	}
	if m.Style == StyleSE && len(m.Flows) > 1 {
		return errMsg("SE style with %d flowspecs (one shared flowspec expected)", len(m.Flows))
	}
	if t == ResvErr && len(m.Flows) > 1 {
		return errMsg("ResvErr with %d flow descriptors (at most one)", len(m.Flows))
	}
	for i, f := range m.Flows {
		if len(f.Filters) == 0 {
			return errMsg("flow descriptor %d without FILTER_SPEC", i)
		}
		if m.Style == StyleFF && len(f.Filters) != 1 {
			return errMsg("FF flow descriptor %d with %d filter specs (one each)", i, len(f.Filters))
		}
		if len(f.Filters) > MaxFlows {
			return errMsg("flow descriptor %d: %d filter specs, more than %d", i, len(f.Filters), MaxFlows)
		}
		for _, flt := range f.Filters {
			if err := fam(flt.Src, "FILTER_SPEC"); err != nil {
				return err
			}
		}
		if f.Flowspec == nil {
			if t != ResvTear {
				return errMsg("%s flow descriptor %d without FLOWSPEC", t, i)
			}
			continue
		}
		if err := f.Flowspec.Validate(); err != nil {
			return fmt.Errorf("FLOWSPEC %d: %w", i, err)
		}
	}
	return nil
}

// Validate checks a token bucket: finite non-negative r and b, p ≥ r (or
// +Inf), m ≤ M.
func (t Tspec) Validate() error {
	for _, f := range []struct {
		name string
		v    float32
	}{{"r (token rate)", t.Rate}, {"b (bucket size)", t.Bucket}} {
		if f.v < 0 || math.IsNaN(float64(f.v)) || math.IsInf(float64(f.v), 0) {
			return errMsg("%s %v: want a finite number ≥ 0", f.name, f.v)
		}
	}
	if math.IsNaN(float64(t.Peak)) || t.Peak < t.Rate {
		return errMsg("p (peak rate) %v below r %v: want p ≥ r or +Inf", t.Peak, t.Rate)
	}
	if t.MinUnit > t.MaxPacket {
		return errMsg("m (minimum policed unit) %d above M (maximum packet size) %d", t.MinUnit, t.MaxPacket)
	}
	return nil
}

// Validate checks a flowspec: its service, Tspec and, for guaranteed
// service, R ≥ r (RFC 2212).
func (f Flowspec) Validate() error {
	if err := f.Tspec.Validate(); err != nil {
		return err
	}
	switch f.Service {
	case ServiceCL:
		if f.RspecRate != 0 || f.RspecSlack != 0 {
			return errMsg("controlled-load flowspec with an Rspec")
		}
	case ServiceGuaranteed:
		r := float64(f.RspecRate)
		if math.IsNaN(r) || math.IsInf(r, 0) || f.RspecRate < f.Tspec.Rate {
			return errMsg("Rspec R %v: want a finite rate ≥ r %v", f.RspecRate, f.Tspec.Rate)
		}
	default:
		return errMsg("flowspec service %d (want 2 guaranteed or 5 controlled-load)", f.Service)
	}
	return nil
}
