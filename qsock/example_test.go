package qsock_test

import (
	"fmt"
	"log"
	"net"
	"net/netip"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hostqos/hostqos/qsock"
)

// A datagram qsocket in class interactive whose messages carry a
// deadline, and an open TCP connection moved to class bulk without
// reconnecting (the package comment's example, compiled; it needs
// hostqosd, so it is not run).
func Example() {
	s, err := qsock.NewSocket(unix.AF_INET, unix.SOCK_DGRAM, 0, qsock.Params{Class: "interactive", Scheduler: qsock.EDFLossy})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	dst := netip.MustParseAddrPort("198.18.0.2:9000")
	frame := []byte("a video frame")
	if _, err := s.SendTo(frame, dst, &qsock.Flags{Deadline: time.Now().Add(40 * time.Millisecond), FrameStart: true, FrameEnd: true}); err != nil {
		log.Fatal(err)
	}
	info, err := s.Info()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(info.Class, info.DSCP, info.SentMsgs)

	conn, err := net.Dial("tcp", "198.18.0.2:9000")
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	if _, err := qsock.Attach(conn.(*net.TCPConn), qsock.Params{Class: "bulk"}); err != nil {
		log.Fatal(err)
	}
}
