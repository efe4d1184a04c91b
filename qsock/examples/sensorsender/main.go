// Command sensorsender is a remote data acquisition sensor on a qsocket
// (the Go twin of libhostqos/examples/sensor_sender.c, seed §4.2.2): COUNT
// readings at random intervals of 5 … 25 ms, each with its own deadline
// 5 … 30 ms ahead. edf-lossy (the default) drops at the source a reading
// that cannot meet its deadline; edf-lossless sends all and counts the late.
// It prints the qinfo summary.
//
//	sensorsender ADDR:PORT COUNT [CLASS [SCHEDULER]]
package main

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hostqos/hostqos/qsock"
)

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: sensorsender ADDR:PORT COUNT [CLASS [edf-lossy|edf-lossless|fifo]]")
		os.Exit(2)
	}
	dst, err := netip.ParseAddrPort(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	count, _ := strconv.Atoi(os.Args[2])
	p := qsock.Params{Class: "interactive", Scheduler: qsock.EDFLossy}
	if len(os.Args) > 3 {
		p.Class = os.Args[3]
	}
	if len(os.Args) > 4 {
		p.Scheduler = qsock.Scheduler(os.Args[4])
	}
	dom := unix.AF_INET
	if dst.Addr().Is6() {
		dom = unix.AF_INET6
	}
	s, err := qsock.NewSocket(dom, unix.SOCK_DGRAM, 0, p)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer s.Close()
	rng := rand.New(rand.NewPCG(13, 13))
	for i := 0; i < count; i++ {
		ahead := time.Duration(5+rng.IntN(26)) * time.Millisecond
		reading := fmt.Sprintf("reading %d deadline_ms %d", i, ahead.Milliseconds())
		if _, err := s.SendTo([]byte(reading), dst, &qsock.Flags{Deadline: time.Now().Add(ahead)}); err != nil && !errors.Is(err, qsock.ErrDropped) {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		time.Sleep(time.Duration(5+rng.IntN(21)) * time.Millisecond)
	}
	in, err := s.Info()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("qinfo id=%d class=%s dscp=%d sent=%d sent_bytes=%d dropped=%d late=%d packets=%d bytes=%d rate_bps=%d qdelay_mean_ns=%d qdelay_p99_ns=%d samples=%d\n",
		in.ID, in.Class, in.DSCP, in.SentMsgs, in.SentBytes, in.DroppedMsgs, in.LateMsgs, in.Packets, in.Bytes, in.Rate,
		in.QDelayMean.Nanoseconds(), in.QDelayP99.Nanoseconds(), in.QDelaySamples)
}
