package rtchan

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestLocalBoundsHandWorked: three links answering 4, 10 and 6 ms for a
// 30 ms channel with 1 ms left to the network: Σ r = 20 ms, slack 9 ms,
// 3 ms each.
func TestLocalBoundsHandWorked(t *testing.T) {
	ms := time.Millisecond
	hops := []HopResponse{{"a", 4 * ms}, {"b", 10 * ms}, {"c", 6 * ms}}
	got, err := LocalBounds(30*ms, ms, hops)
	if err != nil {
		t.Fatal(err)
	}
	want := []time.Duration{7 * ms, 13 * ms, 9 * ms}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("bounds %v, want %v", got, want)
		}
	}
	// 10 ns of slack over 3 links: 4, 3, 3; the bounds still sum to delay − net.
	got, err = LocalBounds(30, 0, []HopResponse{{"a", 5}, {"b", 10}, {"c", 5}})
	if err != nil || got[0] != 9 || got[1] != 13 || got[2] != 8 {
		t.Fatalf("bounds %v (%v), want [9 13 8]", got, err)
	}
	// One link: the whole slack is its own.
	got, err = LocalBounds(30*ms, ms, hops[:1])
	if err != nil || got[0] != 29*ms {
		t.Fatalf("one link: %v (%v), want 29ms", got, err)
	}
	// 12 + 10 + 9 ms and 1 ms of network: 32 ms over a 30 ms bound.
	_, err = LocalBounds(30*ms, ms, []HopResponse{{"a", 12 * ms}, {"b", 10 * ms}, {"c", 9 * ms}})
	var pe *PathError
	if !errors.As(err, &pe) || pe.Sum != 31*ms {
		t.Fatalf("want *PathError summing 31ms, got %v", err)
	}
	for _, s := range []string{"a 12ms + b 10ms + c 9ms", "sum to 31ms", "1ms left to the network", "bound 30ms by 2ms"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("refusal %q does not say %q", err, s)
		}
	}
	if _, err := LocalBounds(ms, 0, []HopResponse{{"a", 1<<63 - 1}, {"b", 1<<63 - 1}}); !errors.As(err, &pe) {
		t.Errorf("huge responses: %v, want a refusal, not an overflow", err)
	}
	if _, err := LocalBounds(ms, 0, nil); err == nil {
		t.Error("no links: want an error")
	}
}

// TestRouteSeedTable3: the seed's Table 3 channels on a route of two
// links, set up hop by hop. Each link already carries ch1 and ch2; a
// 60 KB channel every 50 ms (ch0's traffic) with an end-to-end bound of
// 60 ms is tested at the first link against 60 ms, at the second against
// what the first left, and the receiver sums: 2 × 26.3383 = 52.6766 ms,
// slack 7.3234 ms, a local bound of 30 ms on each link. With ch0's own
// 40 ms bound the same route is refused at the receiver (52.6766 > 40)
// though each link alone would admit it.
func TestRouteSeedTable3(t *testing.T) {
	p := SeedParams()
	est := SeedSpecs()[1:3] // ch1, ch2
	ch := Spec{Name: "route", Mmax: 60 * KB, Bmax: 1, Imin: 50 * time.Millisecond, Delay: 60 * time.Millisecond}
	var hops []HopResponse
	for _, link := range []string{"sender", "router"} {
		res, err := p.Admit(est, ch)
		if err != nil {
			t.Fatalf("link %s (upstream %v): %v", link, ch.Upstream, err)
		}
		r := res[len(res)-1].Response
		if r != 26338300 {
			t.Fatalf("link %s: worst-case response %v, want 26.3383ms", link, r)
		}
		hops = append(hops, HopResponse{Link: link, Response: r})
		ch.Upstream += r
	}
	bounds, err := LocalBounds(ch.Delay, p.NetDelay, hops)
	if err != nil || bounds[0] != 30*time.Millisecond || bounds[1] != 30*time.Millisecond {
		t.Fatalf("bounds %v (%v), want 30ms on each link", bounds, err)
	}
	if _, err := LocalBounds(40*time.Millisecond, p.NetDelay, hops); err == nil || !strings.Contains(err.Error(), "by 12.6766ms") {
		t.Fatalf("40 ms end to end: %v, want refused by 12.6766ms", err)
	}
	// Hop by hop, the second link tests against what the first left: with
	// a 40 ms bound it has 40 − 26.3383 = 13.6617 ms, which ranks the
	// channel first there (D_order), so its worst case there is T_w + T_s
	// = 5.1298 + 7.0695 = 12.1993 ms; the sum 38.5376 ms fits, and the
	// slack 1.4624 ms is split: 27.0695 and 12.9305 ms.
	ch.Delay, ch.Upstream = 40*time.Millisecond, hops[0].Response
	res, err := p.Admit(est, ch)
	if err != nil || res[2].Response != 12199300 || res[2].Bound != 13661700 {
		t.Fatalf("second link with 13.6617ms left: %v (%+v), want 12.1993ms within 13.6617ms", err, res[2])
	}
	bounds, err = LocalBounds(ch.Delay, p.NetDelay, []HopResponse{hops[0], {Link: "router", Response: res[2].Response}})
	if err != nil || bounds[0] != 27069500 || bounds[1] != 12930500 {
		t.Fatalf("bounds %v (%v), want 27.0695ms and 12.9305ms", bounds, err)
	}
}

// TestEstablishedKeepsItsBound: an established channel is held to the
// local bound it was given, not to what its end-to-end bound would allow.
// A 4 KB channel every 10 ms with a 10 ms bound ranks first and adds
// ceil(w/10ms) = 2 of its T_s = 420 + 244.8 + 160 µs = 824.8 µs to ch1's
// T_w + T_s = 12.1993 ms: 13.8489 ms. Within ch1's 25 ms it is admitted;
// with ch1 given 13 ms on this link (still ranked second) it is refused,
// naming ch1 and the numbers.
func TestEstablishedKeepsItsBound(t *testing.T) {
	p := SeedParams()
	est := SeedSpecs()[:3]
	newcomer := Spec{Name: "new", Mmax: 4 * KB, Bmax: 1, Imin: 10 * time.Millisecond, Delay: 10 * time.Millisecond}
	res, err := p.Admit(est, newcomer)
	if err != nil {
		t.Fatalf("with ch1 at its 25 ms bound: %v", err)
	}
	if r1 := res[1].Response; r1 != 13848900 {
		t.Fatalf("ch1's worst case beside the newcomer %v, want 13.8489ms", r1)
	}
	est[1].Bound = 13 * time.Millisecond
	_, err = p.Admit(est, newcomer)
	var ae *AdmissionError
	if !errors.As(err, &ae) || ae.Failing != "ch1" || ae.Bound != 13*time.Millisecond || ae.Response != 13848900 {
		t.Fatalf("ch1 held to 13 ms: %v, want refused naming ch1, 13ms and 13.8489ms", err)
	}
	if !strings.Contains(err.Error(), "13.8489ms exceeds delay bound 13ms by 848.9µs") {
		t.Errorf("refusal %q does not name the numbers", err)
	}
}

// TestEstablishRoute: the route of TestRouteSeedTable3 as one
// establishment: the bounds each link keeps; over three links (the third
// the receiver's) the channel is refused at the receiver, which has 60 −
// 2 × 26.3383 = 7.3234 ms left and needs at least T_w + T_s = 12.1993 ms;
// a saturated link refuses by name.
func TestEstablishRoute(t *testing.T) {
	p := SeedParams()
	hop := func(name string) Hop { return Hop{Link: name, Params: p, Established: SeedSpecs()[1:3]} }
	route := []Hop{hop("sender"), hop("router")}
	ch := Spec{Name: "route", Mmax: 60 * KB, Bmax: 1, Imin: 50 * time.Millisecond, Delay: 60 * time.Millisecond}
	kept, err := EstablishRoute(route, ch)
	if err != nil || len(kept) != 2 || kept[0].Bound != 30*time.Millisecond || kept[1].Bound != 30*time.Millisecond {
		t.Fatalf("60 ms over two links: %+v (%v), want 30 ms kept on each", kept, err)
	}
	_, err = EstablishRoute(append(route, hop("receiver")), ch)
	var re *RouteError
	var ae *AdmissionError
	if !errors.As(err, &re) || re.Link != "receiver" || !errors.As(err, &ae) || ae.Bound != 7323400 || ae.Response != 12199300 {
		t.Fatalf("60 ms over three links: %v, want refused at the receiver: 12.1993ms over 7.3234ms", err)
	}
	if !strings.HasPrefix(err.Error(), "on link receiver: ") {
		t.Errorf("refusal %q does not name the link", err)
	}
	// A link that cannot carry it at all refuses by name.
	route[1].Established = append(route[1].Established, Spec{Name: "hog", Mmax: 60 * KB, Bmax: 1, Imin: 15 * time.Millisecond, Delay: time.Second})
	_, err = EstablishRoute(route, ch)
	if !errors.As(err, &re) || re.Link != "router" {
		t.Fatalf("a saturated second link: %v, want refused naming link router", err)
	}
}
