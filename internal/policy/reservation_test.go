package policy

import (
	"strings"
	"testing"
)

func resv(name string, svc Service, rate Rate, burst Size) Reservation {
	r := NewReservation(name)
	r.Proto, r.RPort, r.Service, r.Rate, r.Burst = "udp", PortRange{5004, 5004}, svc, rate, burst
	return r
}

// The seed's buffer arithmetic: ⌈b/m⌉ buffers of pow2(M + L_header) bytes.
func TestReservationBuffer(t *testing.T) {
	r := resv("v", ServiceGuaranteed, 1_000_000, 16000)
	r.MinUnit, r.MaxUnit = 100, 1400
	// ⌈16000/100⌉ = 160 buffers of pow2(1400+18 = 1418) = 2048 bytes.
	if r.BufferPackets() != 160 || r.BufferSize() != 2048 || r.Buffer() != 160*2048 {
		t.Fatalf("buffer %d × %d = %d, want 160 × 2048", r.BufferPackets(), r.BufferSize(), r.Buffer())
	}
	r.Burst = 16001 // one byte more: one more buffer
	if r.BufferPackets() != 161 {
		t.Fatalf("⌈16001/100⌉ = %d, want 161", r.BufferPackets())
	}
	r.MaxUnit = 2048 - 18 // exactly a power of two with the header
	if r.BufferSize() != 2048 {
		t.Fatalf("pow2(2048) = %d", r.BufferSize())
	}
	r.Service = ServiceBestEffort
	if r.Buffer() != 0 {
		t.Fatal("a best-effort reservation takes buffers")
	}
}

// Admission counts R for guaranteed, r for controlled load, nothing for
// best effort, with minbw, and names the numbers.
func TestAdmitReservations(t *testing.T) {
	p := DefaultPolicy()
	p.Links = []Link{{Name: "veth0", EgressRate: 10_000_000}} // 8mbit reservable
	g := resv("g", ServiceGuaranteed, 2_000_000, 16000)
	g.ServiceRate = 3_000_000
	cl := resv("cl", ServiceControlledLoad, 4_000_000, 16000)
	be := resv("be", ServiceBestEffort, 9_000_000, 16000)
	up := NewRule("up")
	up.Proto, up.MinBW = "tcp", 1_000_000
	p.Rules = []Rule{up}
	p.Reservations = []Reservation{g, cl, be}
	if err := p.Validate(""); err != nil {
		t.Fatal(err)
	}
	if err := p.Admit(""); err != nil { // 3 + 4 + 1 = 8mbit
		t.Fatalf("8mbit on 8mbit: %v", err)
	}
	if p.Guaranteed() != 8_000_000 {
		t.Fatalf("guaranteed %s, want 8mbit", p.Guaranteed())
	}
	p.Reservations[0].ServiceRate = 3_500_000
	es := AsErrors(p.Admit(""))
	want := `link "veth0": guarantees 8.5mbit exceed reservable capacity 8mbit (0.8 × 10mbit): reservation cl 4mbit, reservation g 3.5mbit, rule up 1mbit; lower a minbw or a reservation's rate, or raise egress_rate/reservable`
	if len(es) != 1 || es[0].Error() != want {
		t.Fatalf("got %v\nwant %s", es, want)
	}
}

func TestAdmitBufferPool(t *testing.T) {
	p := DefaultPolicy()
	p.Links = []Link{{Name: "veth0", EgressRate: 100_000_000, ResvBuffer: 256 << 10}}
	a := resv("a", ServiceGuaranteed, 1_000_000, 64000) // ⌈64000/64⌉ = 1000 × 2048
	p.Reservations = []Reservation{a}
	es := AsErrors(p.Admit(""))
	want := `link "veth0": reservation buffers 2048000 B exceed the buffer pool 262144 B (resv_buffer) — ⌈b/m⌉ buffers of pow2(M + 18) bytes each: reservation a 2048000 B (1000 × 2048)`
	if len(es) != 1 || !strings.HasPrefix(es[0].Error(), want) {
		t.Fatalf("got %v\nwant %s", es, want)
	}
	p.Reservations[0].MinUnit = 512 // 125 × 2048 = 256000 ≤ 262144
	if err := p.Admit(""); err != nil {
		t.Fatalf("256000 B in 262144 B: %v", err)
	}
}

// Per-session guarantees count N × minbw.
func TestAdmitPerSession(t *testing.T) {
	p := DefaultPolicy()
	p.Links = []Link{{Name: "veth0", EgressRate: 2_500_000}} // 2mbit
	call := NewRule("calls")
	call.Proto, call.MaxSessions, call.PerSessionMinBW = "udp", 20, 100_000
	p.Rules = []Rule{call}
	if err := p.Admit(""); err != nil { // 20 × 100kbit = 2mbit
		t.Fatalf("20 × 100kbit on 2mbit: %v", err)
	}
	p.Rules[0].MaxSessions = 21
	if err := p.Admit(""); err == nil || !strings.Contains(err.Error(), "rule calls sessions 21 × 100kbit 2.1mbit") {
		t.Fatalf("21 sessions: %v", err)
	}
}

func TestValidateReservation(t *testing.T) {
	for _, c := range []struct {
		name string
		mod  func(*Reservation)
		want string
	}{
		{"no selector", func(r *Reservation) { r.Proto, r.RPort = "", PortRange{} }, "needs a session selector"},
		{"no service", func(r *Reservation) { r.Service = "" }, "service: missing"},
		{"bad service", func(r *Reservation) { r.Service = "premium" }, `service = "premium": unknown service`},
		{"no rate", func(r *Reservation) { r.Rate = 0 }, "rate: missing"},
		{"peak below rate", func(r *Reservation) { r.Peak = 500_000 }, "peak = \"500kbit\": below the token rate 1mbit"},
		{"burst below M", func(r *Reservation) { r.Burst = 1000 }, "burst = 1000: smaller than the maximum packet size M = 1500"},
		{"m above M", func(r *Reservation) { r.MinUnit, r.MaxUnit = 1000, 900 }, "min_unit = 1000: above the maximum packet size M = 900"},
		{"M too big", func(r *Reservation) { r.MaxUnit, r.Burst = 70000, 70000 }, "max_unit = 70000: above 65535 bytes"},
		{"R below r", func(r *Reservation) { r.Service, r.ServiceRate = ServiceGuaranteed, 500_000 }, "service_rate = \"500kbit\": below the token rate 1mbit"},
		{"R on controlled load", func(r *Reservation) { r.ServiceRate = 2_000_000 }, "only guaranteed service has a service rate"},
		{"per-session without count", func(r *Reservation) { r.PerSessionMinBW = 1000 }, "set without max_sessions"},
		{"sessions over the reservation", func(r *Reservation) { r.MaxSessions, r.PerSessionMinBW = 11, 100_000 },
			"11 sessions × 100kbit = 1.1mbit exceed the reservation's 1mbit"},
		{"unknown enforcement", func(r *Reservation) { r.Enforce = "drop" }, `enforce = "drop": unknown enforcement`},
		{"enforcing best effort", func(r *Reservation) { r.Service, r.Enforce = ServiceBestEffort, EnforceShape }, "best-effort service reserves nothing to enforce"},
		{"more sessions than leaves", func(r *Reservation) { r.MaxSessions, r.PerSessionMaxBW = 33, 100_000 },
			"max_sessions = 33: above 32 with per-session bandwidth"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := DefaultPolicy()
			r := resv("x", ServiceControlledLoad, 1_000_000, 16000)
			c.mod(&r)
			p.Reservations = []Reservation{r}
			err := p.Validate("api")
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want …%s…", err, c.want)
			}
		})
	}
}

func TestReservationConfigRoundTrip(t *testing.T) {
	src := `
[[link]]
name = "eth0"
egress_rate = "10mbit"
resv_buffer = "1MiB"

[[reservation]]
name = "rtp"
proto = "udp"
rport = "5004"
service = "guaranteed"
rate = "125kB/s"
burst = "16KiB"
peak = "10mbit"
max_unit = 1400
service_rate = "2mbit"
slack_us = 500
max_sessions = 3
`
	p, err := Load([]byte(src), "test.toml")
	if err != nil {
		t.Fatal(err)
	}
	r, ok := p.Reservation("rtp")
	if !ok || r.Rate != 1_000_000 || r.Burst != 16<<10 || r.ServiceRate != 2_000_000 || r.MaxUnit != 1400 || r.Slack != 500 || r.MaxSessions != 3 {
		t.Fatalf("loaded %+v", r)
	}
	out, err := p.MarshalTOML()
	if err != nil {
		t.Fatal(err)
	}
	q, err := Load(out, "again")
	if err != nil {
		t.Fatalf("reload of\n%s: %v", out, err)
	}
	if r2, _ := q.Reservation("rtp"); r2 != r {
		t.Fatalf("round trip: %+v, want %+v", r2, r)
	}
	if _, err := Load([]byte("[[reservation]]\nname = \"x\"\nproto = \"udp\"\nservice = \"guaranteed\"\nrate = \"1mbit\"\nburst = \"16KiB\"\nbogus = 1\n"), "t"); err == nil ||
		!strings.Contains(err.Error(), "bogus") {
		t.Fatalf("unknown key: %v", err)
	}
}
