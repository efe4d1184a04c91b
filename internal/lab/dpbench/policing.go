package dpbench

import (
	"fmt"
	"net/netip"

	"github.com/hostqos/hostqos/internal/datapath"
	"github.com/hostqos/hostqos/internal/lab/xdpgen"
)

// PolicingResult is the cost of the reservation policer per packet,
// measured with BPF_PROG_TEST_RUN.
type PolicingResult struct {
	Repeat     uint32
	EmptyNS    float64 // an empty TC program
	PlainNS    float64 // classifier, flow hit, rule without reservation
	ReservedNS float64 // classifier, flow hit, rule with a reservation
	// PolicingNS = ReservedNS - PlainNS: the policer (reservation lookup,
	// clock, lock, both terms, counters).
	PolicingNS float64
}

// MeasurePolicing loads a private datapath (OpenScratch, closed
// afterwards) and measures the reservation policer on it (Policing).
func MeasurePolicing(repeat uint32) (PolicingResult, error) {
	s, err := OpenScratch(0)
	if err != nil {
		return PolicingResult{}, err
	}
	defer s.Close()
	return Policing(s.DP, repeat)
}

// Policing times the egress classifier on two flows that differ only in
// their rule: one plain, one naming a controlled-load reservation with a
// peak rate, whose Tspec every packet conforms to (100 Gbit/s, 1 GiB
// bucket: each run takes the conformant path, with both terms updated).
// Best of 3 per program, repeat runs each (0: a million). It replaces d's
// policy.
func Policing(d *datapath.Datapath, repeat uint32) (PolicingResult, error) {
	if repeat == 0 {
		repeat = 1_000_000
	}
	p := datapath.Policy{
		Rules: []datapath.Rule{
			{Slot: 1, Proto: 6, RPortFrom: 443, DSCPIn: -1, DSCP: 46, ClassID: 0x10010},
			{Slot: 2, Proto: 6, RPortFrom: 8443, DSCPIn: -1, DSCP: 46, ClassID: 0x10010, Reservation: 1},
		},
		Reservations: []datapath.Reservation{{ID: 1, Service: datapath.ServiceControlledLoad, Rate: 12.5e9, Bucket: 1 << 30, Peak: 12.5e9,
			MinUnit: 64, MaxUnit: 65535, ClassID: 0x10010, DSCP: 46, DemoteClassID: 0x10020, DemoteDSCP: 0}},
	}
	if err := d.Apply(p); err != nil {
		return PolicingResult{}, err
	}
	src, dst := netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("198.19.0.1")
	plain := xdpgen.BuildFrame(xdpgen.FrameSpec{Src: src, Dst: dst, Proto: 6, SPort: 40000, DPort: 443, TOS: 46 << 2, Payload: 64})
	resv := xdpgen.BuildFrame(xdpgen.FrameSpec{Src: src, Dst: dst, Proto: 6, SPort: 40000, DPort: 8443, TOS: 46 << 2, Payload: 64})
	res := PolicingResult{Repeat: repeat}
	empty, err := emptyTCProgram()
	if err != nil {
		return res, err
	}
	defer empty.Close()
	if res.EmptyNS, err = bestOf3("the empty TC program", programTimer(empty), plain, repeat); err != nil {
		return res, err
	}
	// First runs insert the flows; the timed ones hit them.
	for _, f := range [][]byte{plain, resv} {
		if _, err := d.TestRun(f, 1); err != nil {
			return res, err
		}
	}
	if res.PlainNS, err = bestOf3("the classifier on the plain flow", d.TimeRun, plain, repeat); err != nil {
		return res, err
	}
	if res.ReservedNS, err = bestOf3("the classifier on the reserved flow", d.TimeRun, resv, repeat); err != nil {
		return res, err
	}
	c, err := d.ReservationCounters()
	if err != nil {
		return res, err
	}
	if c[1].NonConformantPackets != 0 || c[1].ConformantPackets == 0 {
		return res, fmt.Errorf("measure policing: %d conformant, %d non-conformant packets: the timed path is not the conformant one", c[1].ConformantPackets, c[1].NonConformantPackets)
	}
	res.PolicingNS = res.ReservedNS - res.PlainNS
	return res, nil
}
