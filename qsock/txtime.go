package qsock

import (
	"encoding/binary"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Per-message attributes reach the host's scheduler in the kernel: a
// scheduled qsocket (dwcs, edf-lossy, edf-lossless) that is a datagram
// socket has SO_TXTIME on (CLOCK_MONOTONIC, which needs no privilege),
// and each message carries one SCM_TXTIME: a u64 whose bits 8..63 are
// the deadline (CLOCK_MONOTONIC ns, rounded down to 256 ns) or the send
// time without one, and bits 0..7 the flags below. The TC egress program
// decodes and clears it (docs/qsockets.md, "Schedulers"). The values are
// the datapath's enum hq_txtime, also in <hostqos/qsock.h> (QSOCK_TXTIME_*)
// and the Python module; TestTxtimeConstantsAgree keeps them equal.
const (
	txtDeadline   = 0x01
	txtNoDrop     = 0x02
	txtFrameStart = 0x04
	txtFrameEnd   = 0x08
	txtPrioShift  = 4
	txtPrioMask   = 0x70
	txtMark       = 0x80
	txtTimeMask   = ^uint64(0xff)
)

// monoNanos is CLOCK_MONOTONIC now, in ns.
func monoNanos() uint64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return uint64(ts.Nano())
}

// txtimeWord encodes f for a message sent now (wall now, monotonic mono).
func txtimeWord(now time.Time, mono uint64, f *Flags) uint64 {
	t, flags := mono, uint64(txtMark)
	if !f.Deadline.IsZero() {
		d := int64(mono) + int64(f.Deadline.Sub(now))
		if d < 0 {
			d = 0
		}
		t = uint64(d)
		flags |= txtDeadline
	}
	if f.NonDroppable {
		flags |= txtNoDrop
	}
	if f.FrameStart {
		flags |= txtFrameStart
	}
	if f.FrameEnd {
		flags |= txtFrameEnd
	}
	flags |= uint64(f.DropPriority&7) << txtPrioShift
	return t&txtTimeMask | flags
}

// txtimeCmsg is the SCM_TXTIME control message carrying w.
func txtimeCmsg(w uint64) []byte {
	b := make([]byte, unix.CmsgSpace(8))
	h := (*unix.Cmsghdr)(unsafe.Pointer(&b[0]))
	h.Level = unix.SOL_SOCKET
	h.Type = unix.SCM_TXTIME
	h.SetLen(unix.CmsgLen(8))
	binary.NativeEndian.PutUint64(b[unix.CmsgLen(0):], w)
	return b
}

// scheduledSched says whether the host's scheduler decides s's messages.
func scheduledSched(s Scheduler) bool {
	return s == DWCS || s == EDFLossy || s == EDFLossless
}

// enableTxtime turns SO_TXTIME on for a datagram socket fd (reports
// whether it is on). A socket of another type keeps class-only service.
func enableTxtime(fd int) (bool, error) {
	typ, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TYPE)
	if err != nil || typ != unix.SOCK_DGRAM {
		return false, err
	}
	// struct sock_txtime { clockid_t clockid; __u32 flags; }
	var st [8]byte
	binary.NativeEndian.PutUint32(st[0:], unix.CLOCK_MONOTONIC)
	if err := unix.SetsockoptString(fd, unix.SOL_SOCKET, unix.SO_TXTIME, string(st[:])); err != nil {
		return false, err
	}
	return true, nil
}
