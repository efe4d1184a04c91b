//go:build !linux

package shaper

import (
	"errors"
	"net/netip"
	"time"
)

// ErrForeignQdisc is wrapped by Apply's error when the link's root qdisc
// belongs to someone else.
var ErrForeignQdisc = errors.New("foreign root qdisc")

var errUnsupported = errors.New("HTB shaping needs Linux")

// ClassStats are the kernel counters of one HTB class.
type ClassStats struct {
	Minor                             uint16
	Bytes, Packets, Drops, Overlimits uint64
	Backlog                           uint32
	RateBps                           uint64
}

// Apply is only supported on Linux.
func Apply(plan Plan, opts ...Option) error { return errUnsupported }

// ApplyFrom is only supported on Linux.
func ApplyFrom(was, plan Plan, opts ...Option) error { return errUnsupported }

// Remove is only supported on Linux.
func Remove(ifindex int, opts ...Option) error { return errUnsupported }

// Owned is only supported on Linux.
func Owned(ifindex int) (bool, error) { return false, errUnsupported }

// Stats is only supported on Linux.
func Stats(ifindex int) ([]ClassStats, error) { return nil, errUnsupported }

// Direction is a TC hook of a link: egress or ingress.
type Direction int

const (
	Egress Direction = iota
	Ingress
)

// AttachBPF needs Linux.
func AttachBPF(ifindex int, dir Direction, fd int) (bool, error) { return false, errUnsupported }

// BPFProgram needs Linux.
func BPFProgram(ifindex int, dir Direction) (int, bool, error) { return 0, false, errUnsupported }

// DetachBPF needs Linux.
func DetachBPF(ifindex int, dir Direction, removeClsact bool) error { return errUnsupported }

// RouteIfindex is only supported on Linux.
func RouteIfindex(dst netip.Addr) (int, error) { return 0, errUnsupported }

// TCPPath is only filled on Linux.
type TCPPath struct {
	Remote        netip.Addr
	Cookie        uint64
	RTT, MinRTT   time.Duration
	DeliveryRate  uint64
	AppLimited    bool
	BytesAcked    uint64
	Retrans       uint32
	RcvRTT        time.Duration
	BytesReceived uint64
}

// TCPPaths is only supported on Linux.
func TCPPaths(limit int) ([]TCPPath, error) { return nil, errUnsupported }

// LinkTxBytes is only supported on Linux.
func LinkTxBytes(ifindex int) (uint64, error) { return 0, errUnsupported }

// DefaultRouteLinks is only supported on Linux.
func DefaultRouteLinks() ([]string, error) { return nil, errUnsupported }
