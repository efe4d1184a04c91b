package rtchan

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// ServiceTime holds the terms of the seed's section 3.2 for one message size.
type ServiceTime struct {
	Np     int           // packets per message, ceil(M/S)
	SLast  int           // payload of the last packet
	LxS    time.Duration // L_x(S)
	LxLast time.Duration // L_x(S^last)
	Lxm    time.Duration // (Np-1)·L_x(S) + L_x(S^last)
	Clm    time.Duration // Np·C_l
	Cpr    time.Duration // ((Np-1)/P)·C_csp, rounded up to the ns
	Cpm    time.Duration // C_p^1st + (Np-1)·C_p
	// LinkBound is true in the regime C_p < L_x(S): the link dominates.
	LinkBound bool
	Ts        time.Duration // worst-case message service time
	Cb1st     time.Duration // C_p^1st + (max(Np,P)-1)·C_p
	TwCPU     time.Duration // C_b^1st + ceil(C_b^1st/L_x(S))·C_l + C_cm + C_sw
	TwLink    time.Duration // L_x(S)
	Tw        time.Duration // TwCPU + TwLink
}

// Service computes the message service time T_s and the wait time T_w of an
// m-byte message exactly as in the seed's section 3.2:
//
//	T_s = C_p^1st + L_x^m + C_l^m + C_pr            if C_p < L_x(S)
//	T_s = C_p^m + C_l^m + L_x(S^last) + C_pr         otherwise
//	T_w = C_b^1st + ceil(C_b^1st / L_x(S))·C_l + C_cm + C_sw + L_x(S)
//
// C_b^1st uses max(N_p, P) as printed in the seed. The prose calls it "a
// block of up to P packets", which would be min(N_p, P); max is never
// smaller, so the printed form is the conservative one and keeps the bound.
func (p Params) Service(m int) ServiceTime {
	var st ServiceTime
	st.Np = p.Packets(m)
	st.SLast = p.LastSize(m)
	st.LxS = p.Lx(p.S)
	st.LxLast = p.Lx(st.SLast)
	np := time.Duration(st.Np)
	st.Lxm = (np-1)*st.LxS + st.LxLast
	st.Clm = np * p.Cl
	st.Cpr = time.Duration(ceilDiv(int64(np-1)*int64(p.Ccsp()), int64(p.P)))
	st.Cpm = p.Cp1st + (np-1)*p.Cp
	st.LinkBound = p.Cp < st.LxS
	if st.LinkBound {
		st.Ts = p.Cp1st + st.Lxm + st.Clm + st.Cpr
	} else {
		st.Ts = st.Cpm + st.Clm + st.LxLast + st.Cpr
	}
	st.Cb1st = p.Cp1st + time.Duration(max(st.Np, p.P)-1)*p.Cp
	st.TwCPU = st.Cb1st + time.Duration(ceilDiv(int64(st.Cb1st), int64(st.LxS)))*p.Cl + p.Ccm + p.Csw()
	st.TwLink = st.LxS
	st.Tw = st.TwCPU + st.TwLink
	return st
}

// ChannelBound is the admission result for one real-time channel.
type ChannelBound struct {
	Name     string        `json:"name"`
	Priority int           `json:"priority"` // 0 is the highest (D_order)
	Ts       time.Duration `json:"ts_ns"`
	Tw       time.Duration `json:"tw_ns"`
	Imin     time.Duration `json:"imin_ns"`
	Bound    time.Duration `json:"bound_ns"`    // local delay bound
	Response time.Duration `json:"response_ns"` // worst-case response time
	OK       bool          `json:"ok"`
}

// Slack is Bound - Response (negative when the bound fails).
func (b ChannelBound) Slack() time.Duration { return b.Bound - b.Response }

// AdmissionError is the refusal of a channel: it names the channel whose
// bound fails (the new one or an established one) and by how much.
type AdmissionError struct {
	Channel  string        // the channel refused
	Failing  string        // the channel whose bound fails
	Bound    time.Duration // its local delay bound
	Response time.Duration // its worst-case response time (0 if unbounded)
	Reason   string        // "delay" or "utilization"
	Util     float64       // utilization at the failing priority level
}

func (e *AdmissionError) Error() string {
	if e.Reason == "utilization" {
		return fmt.Sprintf("admit channel %q: utilization %.4f at the priority level of %q reaches capacity; its delay bound %v cannot be met",
			e.Channel, e.Util, e.Failing, e.Bound)
	}
	who := "its"
	if e.Failing != e.Channel {
		who = fmt.Sprintf("established channel %q:", e.Failing)
	}
	return fmt.Sprintf("admit channel %q: %s worst-case response time %v exceeds delay bound %v by %v",
		e.Channel, who, e.Response, e.Bound, e.Response-e.Bound)
}

// MaxBusyMessages bounds the messages of a channel Analyze examines in
// one busy period. A busy period is long only when the utilization at the
// channel's priority is within a hair of 1 (its length grows as
// 1/(1 − U)): a set whose busy period is longer is refused as utilization
// rather than searched for seconds, which a daemon admitting channels for
// every local user cannot afford.
const MaxBusyMessages = 1 << 14

// maxPastBound bounds the steps the response-time iteration takes after
// it has passed a channel's bound, to report its worst case in a refusal.
const maxPastBound = 1 << 10

// Analyze runs the extended D_order test over a set of real-time channels
// (best-effort specs are skipped). Channels get fixed priorities in order of
// their local delay bound (ties keep the given order), each channel's
// worst-case response time is computed under preemptive fixed-priority
// scheduling at message granularity with a blocking term T_w, and every
// channel must finish within its local bound:
//
//	w(q) = T_w,i + (q+1)·T_s,i + Σ_{j∈hp(i)} ceil(w(q)/I_j)·T_s,j
//	R_i  = max_q (w(q) - q·I_i), over q = 0.. until w(q) ≤ (q+1)·I_i
//
// The result lists every channel in input order. The error, if any, is an
// *AdmissionError for the first failing channel in priority order. A
// channel whose busy period holds more than MaxBusyMessages of its
// messages fails as utilization.
func (p Params) Analyze(specs []Spec) ([]ChannelBound, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	type item struct {
		idx   int
		spec  Spec
		st    ServiceTime
		imin  time.Duration
		bound time.Duration
	}
	var items []item
	for i, s := range specs {
		if err := s.Validate(); err != nil {
			return nil, err
		}
		if s.BestEffort {
			continue
		}
		items = append(items, item{idx: i, spec: s, st: p.Service(s.Mmax), imin: s.MinInterval(), bound: p.Requested(s)})
	}
	sort.SliceStable(items, func(a, b int) bool { return items[a].bound < items[b].bound })
	out := make([]ChannelBound, len(specs))
	for i, s := range specs {
		out[i] = ChannelBound{Name: s.Name, Priority: -1, OK: true}
	}
	var firstErr *AdmissionError
	for prio, it := range items {
		cb := &out[it.idx]
		cb.Priority = prio
		cb.Ts, cb.Tw, cb.Imin, cb.Bound = it.st.Ts, it.st.Tw, it.imin, it.bound
		util := 0.0
		for _, h := range items[:prio+1] {
			util += float64(h.st.Ts) / float64(h.imin)
		}
		fail := func(resp time.Duration, reason string) {
			cb.OK = false
			cb.Response = resp
			if firstErr == nil {
				firstErr = &AdmissionError{Failing: it.spec.Name, Bound: it.bound, Response: resp, Reason: reason, Util: util}
			}
		}
		if it.bound <= 0 {
			fail(it.st.Tw+it.st.Ts, "delay")
			continue
		}
		if util >= 1 {
			fail(0, "utilization")
			continue
		}
		var worst time.Duration
		ok, busy := true, false
		for q := 0; ; q++ {
			if q == MaxBusyMessages {
				busy = true
				break
			}
			w := it.st.Tw + time.Duration(q+1)*it.st.Ts
			for _, h := range items[:prio] {
				w += h.st.Ts
			}
			// w only grows: once past the bound the channel has failed,
			// and the iteration goes on only to report the worst case
			// itself (at most maxPastBound more steps; the utilization
			// below 1 makes it converge).
			for past := 0; past < maxPastBound; {
				next := it.st.Tw + time.Duration(q+1)*it.st.Ts
				for _, h := range items[:prio] {
					next += time.Duration(ceilDiv(int64(w), int64(h.imin))) * h.st.Ts
				}
				if next == w {
					break
				}
				w = next
				if w-time.Duration(q)*it.imin > it.bound {
					past++
				}
			}
			r := w - time.Duration(q)*it.imin
			worst = max(worst, r)
			if worst > it.bound {
				ok = false
				break
			}
			if w <= time.Duration(q+1)*it.imin {
				break
			}
		}
		if busy {
			fail(0, "utilization")
			continue
		}
		if !ok {
			fail(worst, "delay")
			continue
		}
		cb.Response = worst
	}
	if firstErr != nil {
		return out, firstErr
	}
	return out, nil
}

// Admit tests whether channel candidate can join the established real-time
// channels without any of them (or itself) missing its delay bound.
func (p Params) Admit(established []Spec, candidate Spec) ([]ChannelBound, error) {
	all := append(append([]Spec(nil), established...), candidate)
	res, err := p.Analyze(all)
	if ae, ok := err.(*AdmissionError); ok {
		ae.Channel = candidate.Name
		return res, ae
	}
	return res, err
}

// FormatBounds renders an admission result as a table.
func FormatBounds(res []ChannelBound) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-12s %4s %12s %12s %12s %12s %12s %12s %s\n", "channel", "prio", "Ts", "Tw", "Imin", "bound", "response", "slack", "ok")
	for _, r := range res {
		if r.Priority < 0 {
			fmt.Fprintf(&b, "%-12s %4s %12s %12s %12s %12s %12s %12s %s\n", r.Name, "BE", "-", "-", "-", "-", "-", "-", "best-effort")
			continue
		}
		fmt.Fprintf(&b, "%-12s %4d %12v %12v %12v %12v %12v %12v %v\n", r.Name, r.Priority, r.Ts, r.Tw, r.Imin, r.Bound, r.Response, r.Slack(), r.OK)
	}
	return b.String()
}
