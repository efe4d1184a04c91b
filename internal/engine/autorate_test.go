package engine

import (
	"errors"
	"testing"
)

// An automatic link starts shaped at its maximum, counts in admission at
// its minimum, and a rate the estimator hands over is in force at once:
// the HTB tree is rebuilt at it, the link's status shows it with the
// estimate, and a link.rate event says so; a failed push keeps the old
// rate; a link whose rate is not auto is left alone.
func TestSetAutoRate(t *testing.T) {
	env := newEnv(t, "[[link]]\nname = \"eth0\"\negress_rate = \"auto\"\negress_min = \"2mbit\"\negress_max = \"50mbit\"\n")
	e := env.start(t)
	if r := env.k.Trees[2].Link.Rate; r != 50_000_000 {
		t.Fatalf("auto link shaped at %d before any estimate, want its max", r)
	}
	if ls := e.Links(); ls[0].Reservable != 1_600_000 || ls[0].EgressAuto == nil || ls[0].EgressAuto.InForce != 50_000_000 {
		t.Fatalf("status %+v: want reservable 0.8 × min and the max in force", ls[0])
	}
	al := e.AutoLinks()
	if len(al) != 1 || !al[0].Auto[AutoEgress] || al[0].Auto[AutoIngress] || al[0].Min[AutoEgress] != 2_000_000 || al[0].Max[AutoEgress] != 50_000_000 {
		t.Fatalf("AutoLinks %+v", al)
	}
	s, err := e.Subscribe(root, nil, []string{EventLinkRate})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := e.SetAutoRate("eth0", AutoEgress, 7_200_000, 8_000_000, "cut"); err != nil {
		t.Fatal(err)
	}
	if r := env.k.Trees[2].Link.Rate; r != 7_200_000 {
		t.Errorf("HTB tree at %d after the cut, want 7.2 Mbit/s", r)
	}
	a := e.Links()[0].EgressAuto
	if a == nil || a.InForce != 7_200_000 || a.Estimate != 8_000_000 || a.Changes != 1 || a.Reason != "cut" || a.Changed == nil {
		t.Errorf("status after the cut: %+v", a)
	}
	evs := next(t, s)
	if len(evs) != 1 || evs[0].Fields["rate_bps"] != uint64(7_200_000) || evs[0].Fields["reason"] != "cut" {
		t.Errorf("events %+v", evs)
	}

	env.k.FailNth("Shape", 1, errors.New("injected"))
	if err := e.SetAutoRate("eth0", AutoEgress, 9_000_000, 8_000_000, "probe"); err == nil {
		t.Error("a failed push reported success")
	}
	if a := e.Links()[0].EgressAuto; a.InForce != 7_200_000 {
		t.Errorf("after a failed push the rate in force is %d, want the old 7.2 Mbit/s", a.InForce)
	}
	if err := e.SetAutoRate("eth0", AutoIngress, 5_000_000, 0, "cut"); err != nil {
		t.Errorf("ingress of a link without ingress auto: %v", err)
	}
	if a := e.Links()[0].IngressAuto; a != nil {
		t.Errorf("ingress of a link without ingress auto got %+v", a)
	}
}
