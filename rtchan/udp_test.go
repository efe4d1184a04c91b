package rtchan

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hostqos/hostqos/internal/testutil"
)

func TestHqrtWireRoundTrip(t *testing.T) {
	h := wireHdr{be: true, channel: 7, seq: 1 << 40, idx: 3, npkts: 12, size: 16000, deadline: -5, offset: 4200}
	b := make([]byte, WireHeader)
	h.put(b)
	got, err := parseHdr(b)
	if err != nil || got != h {
		t.Fatalf("round trip %+v -> %+v (%v)", h, got, err)
	}
	if _, err := parseHdr(b[:10]); err == nil {
		t.Fatal("short packet accepted")
	}
}

// Real UDP between two namespaces: admitted channels meet every deadline
// while best-effort channels of the same sender saturate the paced link.
func TestHqrtUDPNetns(t *testing.T) {
	testutil.NeedRoot(t)
	if testing.Short() {
		t.Skip("real-time test skipped in -short mode")
	}
	pair := testutil.NewPair(t)
	// The machine is a shared VM: a stall of the whole machine can spoil a
	// run (deadline misses when timers fire late, best-effort throughput
	// when the sender cannot run). Up to three attempts; a real regression
	// fails every one.
	testutil.Measured(t, "real-time channels over UDP", 3, func(attempt int) (bool, string) {
		problems, late := udpAttempt(t, pair, attempt)
		return len(problems) == 0, fmt.Sprintf("worst timer lateness %v; %s", late, strings.Join(problems, "; "))
	})
}

func udpAttempt(t *testing.T, pair *testutil.Pair, attempt int) (problems []string, late time.Duration) {
	ipA, ipB := pair.A.AddrV4().String(), pair.B.AddrV4().String()
	fail := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	port := 7000 + attempt
	const linkBits = 20_000_000
	p := UDPParams(linkBits)
	var rx *Receiver
	if err := pair.B.Do(func() error {
		var err error
		rx, err = ListenUDP(fmt.Sprintf("%s:%d", ipB, port), 4096)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer rx.Close()
	go func() { // the application: consume messages
		for {
			if _, err := rx.Recv(context.Background()); err != nil {
				return
			}
		}
	}()
	var conn *net.UDPConn
	if err := pair.A.Do(func() error {
		var err error
		conn, err = net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP(ipA)})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	host, err := NewUDPHost(conn, p, DefaultPolicy())
	if err != nil {
		t.Fatal(err)
	}
	defer host.Shutdown()

	const msgSize = 16000 // 12 packets of ≤1400 B
	dest := fmt.Sprintf("%s:%d", ipB, port)
	rt := []Spec{
		{Name: "rt0", Mmax: msgSize, Bmax: 4, Imin: 50 * time.Millisecond, Delay: 150 * time.Millisecond},
		{Name: "rt1", Mmax: msgSize, Bmax: 2, Imin: 40 * time.Millisecond, Delay: 120 * time.Millisecond},
		{Name: "rt2", Mmax: msgSize, Bmax: 2, Imin: 50 * time.Millisecond, Delay: 100 * time.Millisecond},
	}
	var rtIDs []ChannelID
	for _, s := range rt {
		id, err := host.Create(dest, s)
		if err != nil {
			t.Fatalf("create %s: %v", s.Name, err)
		}
		rtIDs = append(rtIDs, id)
	}
	// A channel that would overload the link is refused.
	if _, err := host.Create(dest, Spec{Name: "hog", Mmax: msgSize, Bmax: 1, Imin: 8 * time.Millisecond, Delay: 100 * time.Millisecond}); err == nil {
		t.Fatal("over-capacity channel admitted")
	} else {
		var ae *AdmissionError
		if !errors.As(err, &ae) {
			t.Fatalf("refusal is not an AdmissionError: %v", err)
		}
	}
	var beIDs []ChannelID
	for i := 0; i < 2; i++ {
		id, err := host.Create(dest, Spec{Name: fmt.Sprintf("be%d", i), Mmax: msgSize, Bmax: 24, BestEffort: true})
		if err != nil {
			t.Fatal(err)
		}
		beIDs = append(beIDs, id)
	}

	const run = 3 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), run)
	defer cancel()
	var wg sync.WaitGroup
	payload := make([]byte, msgSize)
	for i := range payload {
		payload[i] = byte(i)
	}
	start := time.Now()
	for i, id := range rtIDs {
		wg.Add(1)
		go func(id ChannelID, period time.Duration) {
			defer wg.Done()
			tk := time.NewTicker(period)
			defer tk.Stop()
			for {
				if err := host.Send(id, payload); err != nil && !errors.Is(err, ErrQueueFull) {
					fail("send rt: %v", err)
					return
				}
				select {
				case <-ctx.Done():
					return
				case <-tk.C:
				}
			}
		}(id, rt[i].Imin+rt[i].Imin/20)
	}
	for _, id := range beIDs {
		wg.Add(1)
		go func(id ChannelID) {
			defer wg.Done()
			for ctx.Err() == nil {
				if err := host.Send(id, payload); errors.Is(err, ErrQueueFull) {
					time.Sleep(2 * time.Millisecond)
				} else if err != nil {
					fail("send be: %v", err)
					return
				}
			}
		}(id)
	}
	wg.Wait()
	elapsed := time.Since(start)
	for i := 0; i < 200 && !host.Idle(); i++ {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond) // last datagrams through the veth

	report := map[ChannelID]RecvStats{}
	for _, r := range rx.Report() {
		report[r.Channel] = r
	}
	var rtPayload float64
	for i, id := range rtIDs {
		st, err := host.Stats(id)
		if err != nil {
			t.Fatal(err)
		}
		rs := report[id]
		t.Logf("%s: sent %d msgs (dropped %d) sender laxity min %v mean %v; received %d lost %d late %d laxity min %v mean %v",
			rt[i].Name, st.MsgsSent, st.MsgsDropped, st.MinLaxity, st.MeanLaxity(), rs.Msgs, rs.Lost, rs.Late, rs.MinLaxity, rs.MeanLaxity())
		if st.MsgsSent < uint64(0.8*run.Seconds()/rt[i].Imin.Seconds()) {
			fail("%s: only %d messages sent", rt[i].Name, st.MsgsSent)
		}
		if st.Misses != 0 || st.MsgsDropped != 0 {
			fail("%s: sender misses %d drops %d", rt[i].Name, st.Misses, st.MsgsDropped)
		}
		if rs.Msgs != st.MsgsSent || rs.Lost != 0 {
			fail("%s: receiver got %d messages (lost %d), sender sent %d", rt[i].Name, rs.Msgs, rs.Lost, st.MsgsSent)
		}
		if rs.Late != 0 || rs.MinLaxity < 0 {
			fail("%s: %d messages late at the receiver (min laxity %v)", rt[i].Name, rs.Late, rs.MinLaxity)
		}
		// The receiver's laxity matches the sender's: it sees the last
		// packet no later than a few ms after its nominal end of transmission.
		if d := rs.MeanLaxity() - st.MeanLaxity(); math.Abs(float64(d)) > float64(10*time.Millisecond) {
			fail("%s: receiver mean laxity %v vs sender %v", rt[i].Name, rs.MeanLaxity(), st.MeanLaxity())
		}
		rtPayload += float64(rs.Bytes)
	}
	var bePayload float64
	for _, id := range beIDs {
		bePayload += float64(report[id].Bytes)
	}
	// Rates over the receiver's observation span (it includes the drain of
	// queued messages after the generators stop).
	var first, last time.Time
	for _, r := range report {
		if first.IsZero() || r.First.Before(first) {
			first = r.First
		}
		if r.Last.After(last) {
			last = r.Last
		}
	}
	secs := last.Sub(first).Seconds()
	if secs < 0.8*elapsed.Seconds() {
		t.Fatalf("receiver saw traffic for %.2fs of a %.2fs run", secs, elapsed.Seconds())
	}
	// Payload capacity of the paced link: 1400 of every 1464 bytes.
	capacity := float64(linkBits) / 8 * float64(p.S) / float64(p.S+p.HeaderBytes)
	rtRate, beRate := rtPayload/secs, bePayload/secs
	t.Logf("link payload capacity %.0f B/s: real-time %.0f B/s, best effort %.0f B/s (%.0f%% of the rest)", capacity, rtRate, beRate, 100*beRate/(capacity-rtRate))
	if beRate < 0.7*(capacity-rtRate) {
		fail("best effort got %.0f B/s of the %.0f B/s left", beRate, capacity-rtRate)
	}
	if rtRate+beRate > 1.1*capacity {
		fail("link not paced: %.0f B/s over a %.0f B/s link", rtRate+beRate, capacity)
	}
	return problems, host.MaxTimerLateness()
}
