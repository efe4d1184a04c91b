package datapath

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/hostqos/hostqos/internal/shaper"
	"github.com/hostqos/hostqos/internal/testutil"
)

// qschedRate is the rate of the test's qsched class: 10 µs a byte, so a
// datagram of 1,000 bytes (1,042 on the wire) takes 10.42 ms.
const qschedRate = 800_000

// qschedMargin is the scheduler's margin the test gives the link.
const qschedMargin = 15140 * time.Microsecond

func monoNow() uint64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return uint64(ts.Nano())
}

// txt is one message's SCM_TXTIME word: a deadline in from now (0: none)
// and the flags.
func txt(in time.Duration, flags uint64) uint64 {
	t := monoNow()
	if in != 0 {
		t += uint64(in)
		flags |= TxtDeadline
	}
	return t&^TxtFlags | flags | TxtMark
}

func txtCmsg(w uint64) []byte {
	b := make([]byte, unix.CmsgSpace(8))
	h := (*unix.Cmsghdr)(unsafe.Pointer(&b[0]))
	h.Level, h.Type = unix.SOL_SOCKET, unix.SCM_TXTIME
	h.SetLen(unix.CmsgLen(8))
	binary.NativeEndian.PutUint64(b[unix.CmsgLen(0):], w)
	return b
}

// TestQSockScheduler: the host-wide scheduler in the egress program, on
// real datagrams of a qsocket (IPv4 and IPv6) whose SCM_TXTIME carries
// their attributes, through a qsched class of 800 kbit/s: EDF lossy drops
// a droppable message predicted after its deadline and never a
// non-droppable one, drops a frame whose first message it dropped whole
// and sends a frame it started whole, prefers to drop the higher drop
// priority; EDF lossless sends all and counts the late; DWCS with ipg
// 1 ms and a loss tolerance of 1 in any 3 consecutive drops every third
// message of an overloaded stream, never more, and never a non-droppable
// one; messages go to the band of their slack.
func TestQSockScheduler(t *testing.T) {
	b := newResvBed(t)
	plan, err := shaper.Build(shaper.LinkSpec{Ifindex: b.p.IndexA, Name: b.p.IfA, Rate: 100_000_000, QSched: qschedRate},
		[]shaper.ClassSpec{{Name: "default", Index: 0, Priority: 4, Default: true}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	b.p.A.MustDo(t, func() error { return shaper.Apply(plan) })
	reset := func() {
		t.Helper()
		if err := b.d.SetQScheds(nil); err != nil {
			t.Fatal(err)
		}
		if err := b.d.SetQScheds(map[int]QSched{b.p.IndexA: {Rate: qschedRate, ClassID0: shaper.QSchedBandClassID(0), Margin: qschedMargin}}); err != nil {
			t.Fatal(err)
		}
	}
	bandPackets := func() []uint64 {
		t.Helper()
		var st []shaper.ClassStats
		b.p.A.MustDo(t, func() error { st, err = shaper.Stats(b.p.IndexA); return err })
		out := make([]uint64, shaper.QSchedBands)
		for _, c := range st {
			if c.Minor > shaper.QSchedMinor && c.Minor <= shaper.QSchedMinor+shaper.QSchedBands {
				out[c.Minor-shaper.QSchedMinor-1] = c.Packets
			}
		}
		return out
	}

	for _, fam := range []struct {
		name   string
		domain int
		dst    netip.AddrPort
	}{
		{"IPv4", unix.AF_INET, netip.AddrPortFrom(testutil.PairB4.Addr(), 9500)},
		{"IPv6", unix.AF_INET6, netip.AddrPortFrom(testutil.PairB6.Addr(), 9501)},
	} {
		t.Run(fam.name, func(t *testing.T) {
			// The outcomes follow from how long each message takes at
			// the class's rate (10.42 ms): a sender held off the CPU for
			// ~6 ms between two sends (a loaded 2-core machine) changes
			// one. So a run that differs is repeated, with new sockets
			// and the qsocket attached afresh (its counters zero), up to
			// 3 times; a wrong scheduler differs in every run.
			var errs []string
			errorf := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }
			run := func() {
				var rfd, fd int
				b.p.B.MustDo(t, func() error {
					var err error
					if rfd, err = unix.Socket(fam.domain, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0); err != nil {
						return err
					}
					if err := unix.SetsockoptTimeval(rfd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Usec: 300000}); err != nil {
						return err
					}
					return unix.Bind(rfd, sockaddrOf(fam.dst))
				})
				defer unix.Close(rfd)
				b.p.A.MustDo(t, func() error {
					var err error
					fd, err = unix.Socket(fam.domain, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
					return err
				})
				defer unix.Close(fd)
				var st [8]byte
				binary.NativeEndian.PutUint32(st[:], unix.CLOCK_MONOTONIC)
				if err := unix.SetsockoptString(fd, unix.SOL_SOCKET, unix.SO_TXTIME, string(st[:])); err != nil {
					t.Fatal(err)
				}
				cookie, err := SocketCookie(fd)
				if err != nil {
					t.Fatal(err)
				}
				const id = 9
				q := QSock{Cookie: cookie, ClassID: shaper.ClassLeafID(0), DSCP: -1, Sched: SchedEDFLossy, Rate: qschedRate}
				if err := b.d.AttachQSock(fd, id, q); err != nil {
					t.Fatal(err)
				}
				msg := make([]byte, 1000)
				seq := byte(0)
				// send sends message seq+1 with w (0: no SCM_TXTIME).
				send := func(w uint64) {
					t.Helper()
					seq++
					msg[0] = seq
					var oob []byte
					if w != 0 {
						oob = txtCmsg(w)
					}
					if _, err := unix.SendmsgN(fd, msg, oob, sockaddrOf(fam.dst), 0); err != nil {
						t.Fatal(err)
					}
				}
				got := func() []byte {
					t.Helper()
					var out []byte
					buf := make([]byte, 2000)
					for {
						n, _, err := unix.Recvfrom(rfd, buf, 0)
						if err != nil || n == 0 {
							return out
						}
						out = append(out, buf[0])
					}
				}
				counters := func() QSockCounters {
					t.Helper()
					c, err := b.d.ReadQSock(id)
					if err != nil {
						t.Fatal(err)
					}
					return c
				}
				check := func(what string, want []byte, late, lateDropped, frameDropped, violations uint64) {
					t.Helper()
					// Bands reorder: the sets must be equal.
					g := got()
					slices.Sort(g)
					if !slices.Equal(g, want) {
						errorf("%s: received %v, want %v", what, g, want)
					}
					c := counters()
					if c.Late != late || c.LateDropped != lateDropped || c.FrameDropped != frameDropped || c.Violations != violations {
						errorf("%s: late %d, late-dropped %d, frame-dropped %d, violations %d; want %d, %d, %d, %d",
							what, c.Late, c.LateDropped, c.FrameDropped, c.Violations, late, lateDropped, frameDropped, violations)
					}
				}

				// EDF lossy. Each message sent moves the finish time of its
				// band and the less urgent ones 10.42 ms on.
				reset()
				send(txt(time.Second, 0))                                     // 1: band 7, fin +10 ms: sent
				send(txt(30*time.Millisecond, 0))                             // 2: band 5 (16-32 ms), empty: fin +10 ms (+15 ms margin): sent, ahead of 1
				send(txt(30*time.Millisecond, 0))                             // 3: fin +21 ms (+15): dropped
				send(txt(30*time.Millisecond, TxtNoDrop))                     // 4: sent late
				send(txt(5*time.Millisecond, TxtFrameStart))                  // 5: a frame that cannot start in time: dropped
				send(txt(time.Second, 0))                                     // 6: its middle: dropped
				send(txt(time.Second, TxtFrameEnd))                           // 7: its end: dropped
				send(txt(time.Second, TxtFrameStart))                         // 8: a frame in time: sent
				send(txt(time.Millisecond, 0))                                // 9: late, but its frame started: sent
				send(txt(0, TxtFrameEnd))                                     // 10: sent
				send(0)                                                       // 11: no attributes: sent
				check("edf-lossy", []byte{1, 2, 4, 8, 9, 10, 11}, 2, 2, 2, 0) // late: 4 and 9
				// Drop priority: a message of drop priority 7 is kept only
				// with 7 message-times of room before its deadline.
				reset()
				send(txt(time.Second, 0))                       // 12: sent
				send(txt(60*time.Millisecond, 7<<TxtPrioShift)) // 13: fin +10 ms (+15), + 7 × 10 ms > 60 ms: dropped
				send(txt(60*time.Millisecond, 0))               // 14: sent
				check("drop priority", []byte{12, 14}, 2, 3, 2, 0)

				// EDF lossless: all sent, the late counted; bands by slack.
				q.Sched = SchedEDFLossless
				if err := b.d.ChangeQSock(id, q); err != nil {
					t.Fatal(err)
				}
				reset()
				before := bandPackets()
				send(txt(3*time.Millisecond, 0))   // 15: slack 3 ms (band 2), fin +10 ms: late, so sent last (band 7)
				send(txt(500*time.Millisecond, 0)) // 16: band 7
				send(txt(0, 0))                    // 17: no deadline: band 7
				send(txt(30*time.Millisecond, 0))  // 18: band 5, ahead of them all: on time
				check("edf-lossless", []byte{15, 16, 17, 18}, 3, 3, 2, 0)
				after := bandPackets()
				for band, want := range map[int]uint64{5: 1, 7: 3} {
					if d := after[band] - before[band]; d != want {
						errorf("band %d got %d packets, want %d (before %v, after %v)", band, d, want, before, after)
					}
				}

				// DWCS, ipg 1 ms, 1 loss in any 3: a stream far over its
				// rate misses every deadline.
				q.Sched, q.IPGNanos, q.OLN, q.OLD = SchedDWCS, uint64(time.Millisecond), 1, 3
				if err := b.d.ChangeQSock(id, q); err != nil {
					t.Fatal(err)
				}
				reset()
				for i := 0; i < 6; i++ {
					send(txt(0, 0)) // 19..24: D S S D S S
				}
				send(txt(0, TxtNoDrop)) // 25: its window allows a loss, but it is non-droppable
				send(txt(0, 0))         // 26: dropped
				check("dwcs", []byte{20, 21, 23, 24, 25}, 8, 6, 2, 5)
			}
			testutil.Measured(t, "scheduler outcomes", 3, func(int) (bool, string) {
				errs = nil
				run()
				return len(errs) == 0, strings.Join(errs, "; ")
			})
		})
	}
}

func sockaddrOf(ap netip.AddrPort) unix.Sockaddr {
	if ap.Addr().Is4() {
		return sockaddr(ap)
	}
	return &unix.SockaddrInet6{Port: int(ap.Port()), Addr: ap.Addr().As16()}
}
