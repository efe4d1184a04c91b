package rtchan

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// MaxHops bounds the links on a channel's route that LocalBounds takes:
// a route is set up hop by hop, and every hop adds a term.
const MaxHops = 64

// HopResponse is one link's worst-case response time for a channel on
// its route, as that link's admission test computed it.
type HopResponse struct {
	Link     string        `json:"link"`
	Response time.Duration `json:"response_ns"`
}

// PathError refuses a channel whose links' worst-case response times,
// with the network's share, do not fit its end-to-end delay bound.
type PathError struct {
	Delay time.Duration // the end-to-end delay bound asked for
	Net   time.Duration // the part left to the network (propagation, receiver)
	Sum   time.Duration // Σ of the hops' worst-case response times
	Hops  []HopResponse
}

func (e *PathError) Error() string {
	terms := make([]string, len(e.Hops))
	for i, h := range e.Hops {
		terms[i] = fmt.Sprintf("%s %v", h.Link, h.Response)
	}
	return fmt.Sprintf("establish channel over %d links: their worst-case response times sum to %v (%s), which with %v left to the network exceeds the end-to-end delay bound %v by %v",
		len(e.Hops), e.Sum, strings.Join(terms, " + "), e.Net, e.Delay, e.Sum+e.Net-e.Delay)
}

// LocalBounds derives each link's local delay bound from its worst-case
// response time and the channel's end-to-end delay bound, as the seed's
// channel establishment does (section 2.2): the channel is established
// only if Σ r_k + net ≤ delay; the slack delay − net − Σ r_k is then
// shared equally among the n links, d_k = r_k + slack/n (the nanoseconds
// the division leaves go to the first link), so that Σ d_k = delay − net
// and every link has room beyond its worst case. With one link, d = delay
// − net: the whole slack is that link's, which is what lets it admit the
// most channels later.
func LocalBounds(delay, net time.Duration, hops []HopResponse) ([]time.Duration, error) {
	if len(hops) == 0 || len(hops) > MaxHops {
		return nil, fmt.Errorf("derive local delay bounds: a route has 1 … %d links, not %d", MaxHops, len(hops))
	}
	if delay <= 0 || net < 0 {
		return nil, fmt.Errorf("derive local delay bounds: delay %v must be positive and network share %v not negative", delay, net)
	}
	var sum time.Duration
	for _, h := range hops {
		if h.Response < 0 {
			return nil, fmt.Errorf("derive local delay bounds: link %s has a negative response time %v", h.Link, h.Response)
		}
		if sum > math.MaxInt64-h.Response {
			sum = math.MaxInt64 // saturate: refused below all the same
		} else {
			sum += h.Response
		}
	}
	if sum > delay-net {
		return nil, &PathError{Delay: delay, Net: net, Sum: sum, Hops: append([]HopResponse(nil), hops...)}
	}
	slack := delay - net - sum
	n := time.Duration(len(hops))
	out := make([]time.Duration, len(hops))
	for i, h := range hops {
		out[i] = h.Response + slack/n
	}
	out[0] += slack % n
	return out, nil
}

// Hop is one link of a channel's route as its admission sees it: the
// link's parameters and the real-time channels it already carries.
type Hop struct {
	Link        string
	Params      Params
	Established []Spec
}

// RouteError is a refusal on a route: the link that refused (empty when
// the sum of the links' bounds failed at the receiver) and why.
type RouteError struct {
	Link string
	Err  error // an *AdmissionError or a *PathError
}

func (e *RouteError) Error() string {
	if e.Link == "" {
		return e.Err.Error()
	}
	return fmt.Sprintf("on link %s: %v", e.Link, e.Err)
}

func (e *RouteError) Unwrap() error { return e.Err }

// EstablishRoute is the seed's channel establishment over a route
// (section 2.2), as one computation: each link in turn admits the channel
// against what its end-to-end bound leaves (Upstream: the worst-case
// response times of the links before), the receiver sums them
// (LocalBounds, the network's share being the last link's NetDelay), and
// each link then checks the bound it is given, which may rank the
// channel higher there, still holds for every channel it carries. (The
// links' own tests already keep the sum within the bound when they share
// one NetDelay; the receiver's sum is what holds it when they do not.) It
// returns the channel's spec as each link keeps it (Bound set) or the
// first refusal as a *RouteError; it keeps nothing itself, so a refusal
// anywhere leaves every link as it was. A signalling protocol runs the
// same steps with a message between the links.
func EstablishRoute(route []Hop, s Spec) ([]Spec, error) {
	if len(route) == 0 || len(route) > MaxHops {
		return nil, fmt.Errorf("establish channel %q: a route has 1 … %d links, not %d", s.Name, MaxHops, len(route))
	}
	s.Upstream, s.Bound = 0, 0
	hops := make([]HopResponse, len(route))
	for i, h := range route {
		res, err := h.Params.Admit(h.Established, s)
		if err != nil {
			return nil, &RouteError{Link: h.Link, Err: err}
		}
		hops[i] = HopResponse{Link: h.Link, Response: res[len(res)-1].Response}
		s.Upstream += hops[i].Response
	}
	bounds, err := LocalBounds(s.Delay, route[len(route)-1].Params.NetDelay, hops)
	if err != nil {
		return nil, &RouteError{Err: err}
	}
	out := make([]Spec, len(route))
	for i, h := range route {
		k := s
		k.Upstream, k.Bound = 0, bounds[i]
		if _, err := h.Params.Admit(h.Established, k); err != nil {
			return nil, &RouteError{Link: h.Link, Err: err}
		}
		out[i] = k
	}
	return out, nil
}
