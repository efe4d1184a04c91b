package qsock

import (
	"encoding/binary"
	"errors"
	"slices"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Queueing delay on the host, measured with the kernel's software transmit
// timestamps (SO_TIMESTAMPING): one message in every sampleEvery asks for
// its time of entering the qdisc (SCM_TSTAMP_SCHED) and of leaving it to
// the driver (SCM_TSTAMP_SND); their difference is a sample. At most one
// sample is under way, so the two reports need no id; they are read from
// the socket's error queue without waiting, at the next send or Info. A
// sample whose second report does not come within a second (the packet
// was dropped) is abandoned.

const (
	sampleEvery = 8
	keepSamples = 256
	sampleWait  = time.Second
)

// tstampCmsg asks one sendmsg for both transmit timestamps.
var tstampCmsg = func() []byte {
	b := make([]byte, unix.CmsgSpace(4))
	h := (*unix.Cmsghdr)(unsafe.Pointer(&b[0]))
	h.Level = unix.SOL_SOCKET
	h.Type = unix.SO_TIMESTAMPING
	h.SetLen(unix.CmsgLen(4))
	binary.NativeEndian.PutUint32(b[unix.CmsgLen(0):], unix.SOF_TIMESTAMPING_TX_SCHED|unix.SOF_TIMESTAMPING_TX_SOFTWARE)
	return b
}()

type tstamps struct {
	enabled, failed bool
	outstanding     bool
	since           time.Time
	sched, snd      int64 // ns, 0 = not yet
	count           uint64
	ring            [keepSamples]time.Duration
	n               int // samples kept (≤ keepSamples)
	next            int
	ewma            time.Duration
}

func (t *tstamps) wantSample(fd int) bool {
	if t.failed || t.outstanding {
		return false
	}
	t.count++
	if t.count%sampleEvery != 1 {
		return false
	}
	if !t.enabled {
		err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TIMESTAMPING,
			unix.SOF_TIMESTAMPING_SOFTWARE|unix.SOF_TIMESTAMPING_OPT_TSONLY)
		if err != nil {
			t.failed = true
			return false
		}
		t.enabled = true
	}
	t.outstanding, t.since, t.sched, t.snd = true, time.Now(), 0, 0
	return true
}

func (t *tstamps) unsample() { t.outstanding = false }

// drain reads the error queue's timestamp reports without waiting.
func (t *tstamps) drain(fd int) {
	if !t.outstanding {
		return
	}
	oob := make([]byte, 512)
	for t.outstanding {
		_, oobn, _, _, err := unix.Recvmsg(fd, nil, oob, unix.MSG_ERRQUEUE|unix.MSG_DONTWAIT)
		if err != nil {
			if errors.Is(err, unix.EAGAIN) && time.Since(t.since) > sampleWait {
				t.outstanding = false
			}
			return
		}
		msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err != nil {
			continue
		}
		var ts int64
		info := uint32(1 << 31)
		for _, m := range msgs {
			switch {
			case m.Header.Level == unix.SOL_SOCKET && m.Header.Type == unix.SO_TIMESTAMPING && len(m.Data) >= 16:
				sec := int64(binary.NativeEndian.Uint64(m.Data[0:8]))
				nsec := int64(binary.NativeEndian.Uint64(m.Data[8:16]))
				ts = sec*1e9 + nsec
			case (m.Header.Level == unix.SOL_IP && m.Header.Type == unix.IP_RECVERR) ||
				(m.Header.Level == unix.SOL_IPV6 && m.Header.Type == unix.IPV6_RECVERR):
				if len(m.Data) >= 16 && m.Data[4] == unix.SO_EE_ORIGIN_TIMESTAMPING {
					info = binary.NativeEndian.Uint32(m.Data[8:12])
				}
			}
		}
		switch info {
		case unix.SCM_TSTAMP_SCHED:
			t.sched = ts
		case unix.SCM_TSTAMP_SND:
			t.snd = ts
		}
		if t.sched != 0 && t.snd != 0 {
			t.add(time.Duration(max(t.snd-t.sched, 0)))
			t.outstanding = false
		}
	}
}

func (t *tstamps) add(d time.Duration) {
	t.ring[t.next] = d
	t.next = (t.next + 1) % keepSamples
	t.n = min(t.n+1, keepSamples)
	if t.ewma == 0 {
		t.ewma = d
	} else {
		t.ewma += (d - t.ewma) / 8
	}
}

// estimate is the expected queueing delay (a moving average).
func (t *tstamps) estimate() time.Duration { return t.ewma }

// summary is the mean and 99th percentile of the kept samples.
func (t *tstamps) summary() (mean, p99 time.Duration, n int) {
	if t.n == 0 {
		return 0, 0, 0
	}
	s := slices.Clone(t.ring[:t.n])
	slices.Sort(s)
	var sum time.Duration
	for _, d := range s {
		sum += d
	}
	return sum / time.Duration(len(s)), s[min(len(s)-1, (len(s)*99+99)/100-1)], len(s)
}
