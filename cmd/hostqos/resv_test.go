package main

import (
	"strings"
	"testing"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/policy"
)

func TestResvCommands(t *testing.T) {
	c := &fakeClient{}
	out, errOut, code := runFake(c, "resv", "add", "rtp", "--service", "guaranteed", "--proto", "udp", "--rport", "5004",
		"--rate", "250kB/s", "--burst", "16KiB", "--peak", "10mbit", "--max-unit", "1400", "--service-rate", "3mbit", "--slack", "500",
		"--max-sessions", "3", "--per-session-minbw", "100kbit", "--temporary")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	want := `Reservations.Add {"name":"rtp","proto":"udp","rport":"5004","service":"guaranteed","rate":"2mbit","burst":"16KiB","peak":"10mbit",` +
		`"max_unit":"1400B","service_rate":"3mbit","slack_us":500,"max_sessions":3,"per_session_minbw":"100kbit"} (temporary)`
	if c.calls[0] != want {
		t.Fatalf("call\n%s\nwant\n%s", c.calls[0], want)
	}
	if !strings.HasPrefix(out, "admitted reservation rtp: guaranteed") {
		t.Fatalf("output %q", out)
	}
	c.calls = nil
	if _, errOut, code := runFake(c, "resv", "set", "rtp", "--rate", "3mbit", "--peak", ""); code != exitOK || c.calls[0] != `Reservations.Set rtp peak=null rate="3mbit"` {
		t.Fatalf("set: %d %s %v", code, errOut, c.calls)
	}
	if _, errOut, code := runFake(c, "resv", "add", "x", "--service", "premium"); code != exitUsage || !strings.Contains(errOut, "want guaranteed, controlled-load, best-effort") {
		t.Fatalf("bad service: %d %q", code, errOut)
	}
	if _, errOut, code := runFake(c, "rule", "add", "calls", "--proto", "tcp", "--max-sessions", "x"); code != exitUsage || !strings.Contains(errOut, "--max-sessions") {
		t.Fatalf("bad max-sessions: %d %q", code, errOut)
	}
	r := policy.NewReservation("rtp")
	r.Proto, r.Service, r.Rate, r.Burst, r.MaxSessions = "udp", policy.ServiceGuaranteed, 2_000_000, 16000, 3
	c.resvs = []api.ReservationInfo{{Reservation: r, Source: "api", Tspec: api.Tspec{Rate: 250000, Bucket: 16000, MinUnit: 64, MaxUnit: 1500, ServiceRate: 250000},
		Admission: api.ResvAdmission{Reserved: 2_000_000, BufferPackets: 250, BufferSize: 2048, Buffer: 512000},
		Counters:  &api.ResvCounters{ConformantPackets: 10, ConformantBytes: 15000},
		Sockets:   []api.BoundSocket{{PID: 42, UID: 1000, Comm: "rtpsend", Proto: "udp", Local: "198.18.0.1:4000", Remote: "198.18.0.2:5004"}}}}
	out, _, code = runFake(c, "resv", "show", "rtp")
	for _, want := range []string{"tspec:     r=250000 B/s (2mbit) b=16000 B m=64 B M=1500 B", "rspec:     R=250000 B/s",
		"buffers ⌈b/m⌉ = 250 × 2048 B = 512000 B", "conformant:     10 packets, 15000 bytes", "42   1000  rtpsend"} {
		if code != exitOK || !strings.Contains(out, want) {
			t.Errorf("show lacks %q:\n%s", want, out)
		}
	}
	out, _, _ = runFake(c, "resv", "list")
	if !strings.Contains(out, "rtp          guaranteed  proto=udp  r=2mbit b=16kB  2mbit     1/3") {
		t.Errorf("list:\n%s", out)
	}
	c.calls = nil
	runFake(c, "resv", "watch", "--count", "1")
	if len(c.calls) == 0 || !strings.Contains(c.calls[0], `"Kinds":["reservation","socket","session","policing"]`) {
		t.Errorf("watch: %v", c.calls)
	}
}
