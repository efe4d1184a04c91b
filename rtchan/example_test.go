package rtchan_test

import (
	"fmt"
	"time"

	"github.com/hostqos/hostqos/rtchan"
)

func Example() {
	s, _ := rtchan.NewSim(rtchan.SeedParams(), rtchan.DefaultPolicy())
	rx, _ := s.Init("rx", 100)
	video, err := s.Create("rx", rtchan.Spec{Name: "video", Mmax: 60 * 1024, Bmax: 4,
		Imin: 40 * time.Millisecond, Delay: 30 * time.Millisecond})
	if err != nil {
		fmt.Println(err)
		return
	}
	bulk, _ := s.Create("rx", rtchan.Spec{Name: "bulk", Mmax: 60 * 1024, Bmax: 10, BestEffort: true})
	for i := 0; i < 25; i++ {
		t := time.Duration(i) * 40 * time.Millisecond
		s.At(t, func() {
			_ = s.SendSize(video, 60*1024, nil)
			_ = s.SendSize(bulk, 60*1024, nil)
		})
	}
	s.RunUntil(2 * time.Second)
	var n, late int
	for m, ok := rx.Recv(); ok; m, ok = rx.Recv() {
		if !m.BestEffort {
			n++
			if m.Laxity < 0 {
				late++
			}
		}
	}
	fmt.Println("video messages:", n, "late:", late)
	_, err = s.Create("rx", rtchan.Spec{Name: "tight", Mmax: 60 * 1024, Bmax: 1,
		Imin: 20 * time.Millisecond, Delay: 10 * time.Millisecond})
	fmt.Println(err)
	// Output:
	// video messages: 25 late: 0
	// admit channel "tight": its worst-case response time 12.1993ms exceeds delay bound 10ms by 2.1993ms
}
