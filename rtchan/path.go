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
