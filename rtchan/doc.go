// Package rtchan implements real-time channels: simplex message streams with
// a linear-bounded traffic contract (Mmax, Rmax, Bmax) and a delay bound,
// guaranteed by admission control (D_order extended with CPU and link costs),
// logical arrival times, one handler per channel scheduled by multi-class EDF
// with cooperative preemption, a multi-class non-preemptive EDF link
// scheduler, and overload protection — the host architecture of the seed
// "Structuring Communication Software for Quality-of-Service Guarantees".
//
// The scheduling core is a deterministic state machine driven either by a
// virtual-time discrete-event engine over an emulated link (Sim, the seed's
// null device) or by a real-time loop sending paced UDP datagrams
// (UDPHost, Receiver). See docs/rtchan.md.
package rtchan
