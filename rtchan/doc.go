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
//
// The package is the application library and the admission test
// (Params.Admit, which hostqosd runs for the channels it admits) and
// nothing else: the seed's evaluation (its workload, the sweeps of Figs.
// 7-9 and their plots, `hostqos rtchan bench`) lives in
// internal/lab/rtchanlab, over Sim and its trace, so that importers of
// rtchan link no plotting code.
package rtchan
