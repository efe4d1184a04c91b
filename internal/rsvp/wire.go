// Package rsvp is RSVP signalling (RFC 2205) with the IntServ objects of
// RFC 2210: the wire format of the seven message types, a strict bounded
// parser, and raw IP protocol 46 sockets. Roles and soft state build on it.
//
// Only unicast sessions with the fixed-filter (FF) and shared-explicit (SE)
// styles are accepted; INTEGRITY, SCOPE (wildcard filter) and multicast
// destinations are refused with an error naming them.
package rsvp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net/netip"
)

// MsgType is the common header's message type (RFC 2205 §3.1.1).
type MsgType uint8

// The RSVP message types.
const (
	Path     MsgType = 1
	Resv     MsgType = 2
	PathErr  MsgType = 3
	ResvErr  MsgType = 4
	PathTear MsgType = 5
	ResvTear MsgType = 6
	ResvConf MsgType = 7
)

var msgNames = map[MsgType]string{Path: "Path", Resv: "Resv", PathErr: "PathErr", ResvErr: "ResvErr",
	PathTear: "PathTear", ResvTear: "ResvTear", ResvConf: "ResvConf"}

func (t MsgType) String() string {
	if n, ok := msgNames[t]; ok {
		return n
	}
	return fmt.Sprintf("type %d", uint8(t))
}

// Object class numbers (RFC 2205 appendix A).
const (
	classSession        = 1
	classHop            = 3
	classIntegrity      = 4
	classTimeValues     = 5
	classErrorSpec      = 6
	classScope          = 7
	classStyle          = 8
	classFlowspec       = 9
	classFilterSpec     = 10
	classSenderTemplate = 11
	classSenderTspec    = 12
	classAdspec         = 13
	classPolicyData     = 14
	classResvConfirm    = 15
)

// Protocol is RSVP's IP protocol number.
const Protocol = 46

// Version is the RSVP protocol version of the common header.
const Version = 1

// Limits of the parser: a message is at most MaxMessage bytes and carries at
// most MaxObjects objects and MaxFlows flow descriptors or filter specs.
const (
	MaxMessage = 65535
	MaxObjects = 512
	MaxFlows   = 256
)

// Style is the STYLE object's option vector (RFC 2205 §A.7).
type Style uint32

// The reservation styles. Wildcard filter is refused by this implementation.
const (
	StyleWF Style = 0x11 // shared, wildcard
	StyleFF Style = 0x0a // distinct, explicit
	StyleSE Style = 0x12 // shared, explicit
)

func (s Style) String() string {
	switch s {
	case StyleWF:
		return "WF"
	case StyleFF:
		return "FF"
	case StyleSE:
		return "SE"
	}
	return fmt.Sprintf("style 0x%x", uint32(s))
}

// Session is the SESSION object: the destination of the data flow.
type Session struct {
	Dest  netip.Addr
	Proto uint8 // IP protocol of the data flow (17 UDP, 6 TCP)
	Flags uint8 // bit 0: E_Police
	Port  uint16
}

// Hop is the RSVP_HOP object: the previous or next RSVP hop's address on
// the link and its logical interface handle.
type Hop struct {
	Addr netip.Addr
	LIH  uint32
}

// Filter is a SENDER_TEMPLATE or FILTER_SPEC: a sender's address and port.
type Filter struct {
	Src  netip.Addr
	Port uint16
}

// Tspec is the IntServ token bucket (RFC 2210 §3.1, RFC 2215): rates in
// bytes/s, sizes in bytes. Peak may be +Inf (unknown).
type Tspec struct {
	Rate      float32 // r
	Bucket    float32 // b
	Peak      float32 // p
	MinUnit   uint32  // m
	MaxPacket uint32  // M
}

// Service numbers of the IntServ flowspec.
const (
	ServiceGeneral    = 1
	ServiceGuaranteed = 2
	ServiceCL         = 5
)

// Flowspec is the FLOWSPEC object: a controlled-load (Tspec only) or
// guaranteed (Tspec and Rspec R, S) request.
type Flowspec struct {
	Service    uint8 // ServiceCL or ServiceGuaranteed
	Tspec      Tspec
	RspecRate  float32 // R, bytes/s (guaranteed only)
	RspecSlack uint32  // S, microseconds (guaranteed only)
}

// ErrorSpec is the ERROR_SPEC object (RFC 2205 §A.5).
type ErrorSpec struct {
	Node  netip.Addr
	Flags uint8
	Code  uint8
	Value uint16
}

// Error codes used here (RFC 2205 appendix B).
const (
	ErrConfirm          = 0  // ResvConf
	ErrAdmission        = 1  // admission control failure
	ErrNoPathInfo       = 3  // no path state for a Resv
	ErrNoSenderInfo     = 4  // no sender for a filter
	ErrConflictingStyle = 5  // conflicting reservation style
	ErrUnknownStyle     = 6  // unknown reservation style
	ErrAPI              = 20 // API error
	ErrTrafficControl   = 21 // traffic control error
	ErrSystem           = 23 // RSVP system error
)

// Sender is a sender descriptor: SENDER_TEMPLATE, SENDER_TSPEC.
type Sender struct {
	Template Filter
	Tspec    *Tspec // required in Path, optional in PathTear and PathErr
}

// FlowDesc is a flow descriptor of a Resv, ResvTear, ResvErr or ResvConf:
// a flowspec and the filter specs it covers (one for FF, one or more for SE).
// Flowspec is nil when the message carries none (a ResvTear may omit it).
type FlowDesc struct {
	Flowspec *Flowspec
	Filters  []Filter
}

// Message is one RSVP message. Which fields are present depends on Type;
// Decode checks the required objects of each type and Encode writes them
// in the order of RFC 2205 §3.1.
type Message struct {
	Type    MsgType
	TTL     uint8 // Send_TTL
	Session Session
	Hop     *Hop       // all but PathErr and ResvConf
	Refresh uint32     // TIME_VALUES R in ms (Path, Resv)
	Error   *ErrorSpec // PathErr, ResvErr, ResvConf
	Confirm netip.Addr // RESV_CONFIRM (Resv optional, ResvConf)
	Style   Style      // Resv, ResvTear, ResvErr, ResvConf
	Sender  *Sender    // Path, PathTear, PathErr
	Flows   []FlowDesc // Resv, ResvTear, ResvErr, ResvConf
}

// Checksum is the RSVP checksum: the one's complement of the one's
// complement sum of the message with the checksum field taken as zero.
func Checksum(b []byte) uint16 {
	var sum uint32
	for i := 0; i+1 < len(b); i += 2 {
		if i == 2 {
			continue
		}
		sum += uint32(b[i])<<8 | uint32(b[i+1])
	}
	if len(b)%2 == 1 {
		sum += uint32(b[len(b)-1]) << 8
	}
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}

// errMsg is the prefix of every decoding error.
func errMsg(format string, a ...any) error {
	return fmt.Errorf("malformed RSVP message: "+format, a...)
}

// ErrUnsupported marks a well-formed message using something this
// implementation refuses (INTEGRITY, SCOPE, wildcard style, multicast).
var ErrUnsupported = errors.New("unsupported")

func putF32(b []byte, f float32) { binary.BigEndian.PutUint32(b, math.Float32bits(f)) }
func getF32(b []byte) float32    { return math.Float32frombits(binary.BigEndian.Uint32(b)) }
