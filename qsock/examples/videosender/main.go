// Command videosender is a simulated MPEG video server on a qsocket (the
// Go twin of libhostqos/examples/video_sender.c, seed §4.2.1): 20 frames
// per second in the group of pictures IBBPBBPBBPBB, each frame cut into
// messages of at most 1200 bytes and marked as one frame with the next
// frame's time as deadline; edf-lossy drops a late frame whole at the
// source, never an I frame (non-droppable). It prints the qinfo summary.
//
//	videosender ADDR:PORT SECONDS [CLASS]
package main

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hostqos/hostqos/qsock"
)

const (
	fps = 20
	msg = 1200
)

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: videosender ADDR:PORT SECONDS [CLASS]")
		os.Exit(2)
	}
	dst, err := netip.ParseAddrPort(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	secs, _ := strconv.Atoi(os.Args[2])
	class := "interactive"
	if len(os.Args) > 3 {
		class = os.Args[3]
	}
	dom := unix.AF_INET
	if dst.Addr().Is6() {
		dom = unix.AF_INET6
	}
	s, err := qsock.NewSocket(dom, unix.SOCK_DGRAM, 0, qsock.Params{Class: class, Scheduler: qsock.EDFLossy})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer s.Close()
	gop := "IBBPBBPBBPBB"
	period := time.Second / fps
	next := time.Now()
	buf := make([]byte, msg)
	for f := 0; f < secs*fps; f++ {
		typ := gop[f%len(gop)]
		size := map[byte]int{'I': 12000, 'P': 4000, 'B': 1500}[typ]
		n := (size + msg - 1) / msg
		deadline := time.Now().Add(period)
		for m := 0; m < n; m++ {
			l := msg
			if m == n-1 {
				l = size - m*msg
			}
			copy(buf, fmt.Sprintf("frame %d type %c msg %d/%d", f, typ, m+1, n))
			fl := &qsock.Flags{Deadline: deadline, FrameStart: m == 0, FrameEnd: m == n-1, NonDroppable: typ == 'I'}
			if _, err := s.SendTo(buf[:l], dst, fl); err != nil && !errors.Is(err, qsock.ErrDropped) {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
		}
		next = next.Add(period)
		time.Sleep(time.Until(next))
	}
	printInfo(s)
}

func printInfo(s *qsock.Socket) {
	in, err := s.Info()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("qinfo id=%d class=%s dscp=%d sent=%d sent_bytes=%d dropped=%d late=%d packets=%d bytes=%d rate_bps=%d qdelay_mean_ns=%d qdelay_p99_ns=%d samples=%d\n",
		in.ID, in.Class, in.DSCP, in.SentMsgs, in.SentBytes, in.DroppedMsgs, in.LateMsgs, in.Packets, in.Bytes, in.Rate,
		in.QDelayMean.Nanoseconds(), in.QDelayP99.Nanoseconds(), in.QDelaySamples)
}
