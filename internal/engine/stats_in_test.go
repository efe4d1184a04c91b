package engine

import (
	"testing"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/datapath"
)

// TestClassStatsIn: a class's received side is the sum of its rules' IN
// (with their rates), and class default's also what no rule matched; every
// link's row of a class carries it.
func TestClassStatsIn(t *testing.T) {
	env := newEnv(t, shapedConfig)
	e := env.start(t)
	k := env.k
	r := rule("call")
	r.Class = "voice"
	if _, err := e.AddRule(ctx, root, r, false); err != nil {
		t.Fatal(err)
	}
	slot := e.slots.Rules["call"]
	k.Counters = make([]datapath.Counters, datapath.MaxRules)
	k.Counters[slot] = datapath.Counters{RxPackets: 10, RxBytes: 1000}
	k.RxUnmatched = datapath.Counters{RxPackets: 100, RxBytes: 150000, RxDrops: 3}
	e.Tick()
	k.Counters[slot] = datapath.Counters{RxPackets: 20, RxBytes: 2000, RxDrops: 1}
	k.RxUnmatched = datapath.Counters{RxPackets: 200, RxBytes: 300000, RxDrops: 5}
	e.Tick()

	var st api.Stats
	if err := e.Stats(root, "classes", &st); err != nil {
		t.Fatal(err)
	}
	in := map[string]api.Counter{}
	for _, c := range st.Classes {
		if c.Link != "eth0" {
			t.Errorf("class %s on link %q, want eth0", c.Class, c.Link)
		}
		in[c.Class] = c.In
	}
	if v := in["voice"]; v.Packets != 20 || v.Bytes != 2000 || v.Drops != 1 || v.RateBps <= 0 {
		t.Errorf("voice IN %+v, want rule call's 20 packets, 2000 bytes, 1 drop and a rate", v)
	}
	if d := in["default"]; d.Packets != 200 || d.Bytes != 300000 || d.Drops != 5 || d.RateBps <= 0 {
		t.Errorf("default IN %+v, want the unmatched 200 packets, 300000 bytes, 5 drops and a rate", d)
	}
	if b := in["bulk"]; b.Packets != 0 || b.Bytes != 0 {
		t.Errorf("bulk IN %+v, want nothing", b)
	}
	if err := e.Stats(root, "links", &st); err != nil {
		t.Fatalf("stat links: %v", err)
	}
}
