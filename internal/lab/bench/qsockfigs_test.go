package bench

import (
	"math"
	"testing"
	"time"

	"github.com/hostqos/hostqos/internal/plot"
)

// TestQSockAppAnalysis checks the QSockets application benchmarks' wire
// header, schedules and accounting on made-up arrivals (no traffic).
func TestQSockAppAnalysis(t *testing.T) {
	m := appMsg{Stream: 3, Type: 'P', Idx: 2, N: 4, Seq: 77, SentNS: 123456789, DeadlineNS: 987654321}
	b := make([]byte, appHeader+10)
	m.put(b)
	if got, ok := parseAppMsg(b); !ok || got != m {
		t.Errorf("header round trip: got %+v %v, want %+v", got, ok, m)
	}
	if _, ok := parseAppMsg(b[:appHeader-1]); ok {
		t.Error("a short message parsed")
	}

	sec := int64(time.Second)
	t0 := int64(1000) * sec
	video := appSchedule(appSenderConfig{App: "video", Start: t0, Duration: 2 * time.Second, FPS: 20})
	if len(video) != 40 || video[0].typ != 'I' || video[1].typ != 'B' || video[3].typ != 'P' || video[12].typ != 'I' {
		t.Fatalf("video schedule: %d frames, types %c%c%c%c…", len(video), video[0].typ, video[1].typ, video[2].typ, video[3].typ)
	}
	if d := video[1].gen - video[0].gen; d != sec/20 || video[0].deadline != video[1].gen {
		t.Errorf("video frames %d ns apart, deadline %d, want 50 ms and the next frame's time", d, video[0].deadline-t0)
	}
	if r := videoBitrate(20); math.Abs(r-480e3) > 1 {
		t.Errorf("video bitrate %v, want 480 kbit/s", r)
	}
	sc := appSenderConfig{App: "sensor", Start: t0, Duration: 10 * time.Second, Seed: 7,
		GapMin: 5 * time.Millisecond, GapMax: 25 * time.Millisecond, AheadMin: 5 * time.Millisecond, AheadMax: 30 * time.Millisecond, Size: 200}
	s1, s2 := appSchedule(sc), appSchedule(sc)
	if len(s1) < 10*1000/25 || len(s1) > 10*1000/5 || len(s1) != len(s2) || s1[5] != s2[5] {
		t.Fatalf("sensor schedule: %d readings (same seed: %d)", len(s1), len(s2))
	}
	for i, it := range s1 {
		if ahead := it.deadline - it.gen; ahead < int64(5*time.Millisecond) || ahead > int64(30*time.Millisecond) {
			t.Fatalf("reading %d: deadline %d ns ahead", i, ahead)
		}
		if i > 0 && (it.gen-s1[i-1].gen < int64(5*time.Millisecond) || it.gen-s1[i-1].gen > int64(25*time.Millisecond)) {
			t.Fatalf("reading %d: gap %d ns", i, it.gen-s1[i-1].gen)
		}
	}

	// Four frames 50 ms apart: 0 whole and on time, 1 missing a message,
	// 2 dropped at the source, 3 whole but late (its last message after
	// the deadline). Message 0 of frame 0 comes twice (counted once).
	ms := int64(time.Millisecond)
	items := []appSent{
		{Seq: 0, Type: 'I', Msgs: 2, GenNS: t0, DeadlineNS: t0 + 50*ms, Status: "sent"},
		{Seq: 1, Type: 'B', Msgs: 2, GenNS: t0 + 50*ms, DeadlineNS: t0 + 100*ms, Status: "sent"},
		{Seq: 2, Type: 'B', Msgs: 1, GenNS: t0 + 100*ms, DeadlineNS: t0 + 150*ms, Status: "dropped"},
		{Seq: 3, Type: 'P', Msgs: 1, GenNS: t0 + 1100*ms, DeadlineNS: t0 + 1150*ms, Status: "sent"},
	}
	arr := []appArrival{
		{appMsg{Seq: 0, Idx: 0, N: 2}, t0 + 2*ms},
		{appMsg{Seq: 0, Idx: 0, N: 2}, t0 + 3*ms},
		{appMsg{Seq: 0, Idx: 1, N: 2}, t0 + 4*ms},
		{appMsg{Seq: 1, Idx: 1, N: 2}, t0 + 52*ms},
		{appMsg{Seq: 3, Idx: 0, N: 1}, t0 + 1204*ms},
	}
	fr := outcomes(items, arr)
	if !fr[0].Delivered || fr[0].AtNS != t0+4*ms || fr[1].Delivered || fr[2].Delivered || !fr[3].Delivered {
		t.Fatalf("outcomes: %+v", fr)
	}
	x, y := fpsPerSecond(fr, t0, 3)
	if len(x) != 3 || x[0] != 1 || y[0] != 1 || y[1] != 1 || y[2] != 0 {
		t.Errorf("fps per second: %v %v", x, y)
	}
	gx, gy := frameGaps(fr, t0)
	if len(gy) != 1 || gy[0] != 1200 || gx[0] != 1.204 {
		t.Errorf("frame gaps: %v at %v, want 1200 ms at 1.204 s", gy, gx)
	}
	p := summarizeVideo(fr, t0, 0, 2*time.Second, 20)
	if p.Frames != 4 || p.Delivered != 2 || p.LostByType['B'] != 2 || p.DroppedAtSource != 1 || p.LateFrames != 1 ||
		p.MeanFPS != 1 || p.MinFPS != 1 || p.GapMax != 1200 || p.Jitter != 1150 {
		t.Errorf("video summary: %+v", p)
	}
	if got := p.lost(); got != "2 of 4 (I 0, P 0, B 2)" {
		t.Errorf("lost = %q", got)
	}
	mi := sensorMisses(fr, t0, time.Second, 2*time.Second)
	if len(mi) != 2 || mi[0].Generated != 3 || mi[0].Lost != 2 || mi[0].Dropped != 1 || mi[0].Late != 0 ||
		mi[1].Generated != 1 || mi[1].Late != 1 || mi[1].Misses() != 1 {
		t.Errorf("misses per second: %+v", mi)
	}
	if s := sumMisses(mi, 0, 2); s.Generated != 4 || s.Misses() != 3 {
		t.Errorf("misses summed: %+v", s)
	}

	pt := perturbation(10, 15, 30)
	if len(pt.X) != 5 || !math.IsNaN(pt.Y[2]) || pt.X[3] != 30 || pt.Y[4] != 10 {
		t.Errorf("perturbation marks: %v %v", pt.X, pt.Y)
	}
	fig := &plot.Figure{Title: "t", Panels: []plot.Panel{{Title: "p", Series: []plot.Series{pt, {Name: "s", X: x, Y: y}}}}}
	if _, err := fig.PNG(); err != nil {
		t.Errorf("draw: %v", err)
	}
}
