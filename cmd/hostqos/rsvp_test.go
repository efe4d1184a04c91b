package main

import (
	"context"
	"strings"
	"testing"

	"github.com/hostqos/hostqos/api"
)

func (f *fakeClient) RSVP() api.RSVPAPI { return fakeRSVP{f} }

type fakeRSVP struct{ f *fakeClient }

func (r fakeRSVP) Status(_ context.Context, q api.RSVPListQuery) (api.RSVPStatus, error) {
	return api.RSVPStatus{Enabled: true, Router: true, Refresh: "1s", Lifetime: "5.25s",
		Counters: api.RSVPCounters{Received: 9, Malformed: 1, Foreign: 2, Paths: 1, Resvs: 1, OverHop: 3, BadTear: 4},
		Paths:    []api.RSVPPath{{Session: "198.18.2.2:5004/udp", Sender: "198.18.1.2:4000", Role: "router", Tspec: api.Tspec{Rate: 250000, Bucket: 3000, MinUnit: 64, MaxUnit: 1500}, PrevHop: "198.18.1.2", Expires: 4.5}},
		Resvs: []api.RSVPResv{{Session: "198.18.2.2:5004/udp", Sender: "198.18.1.2:4000", Role: "router", Service: "guaranteed", Style: "ff",
			Flowspec: api.Tspec{Rate: 250000, Bucket: 3000, MinUnit: 64, MaxUnit: 1500, ServiceRate: 275000}, NextHop: "198.18.2.2", Reservation: "rsvp-0011223344556677", Expires: 5}},
		Truncated: q.Limit == 1, NextOffset: q.Offset + q.Limit,
	}, r.f.record("RSVP.Status", []any{q}, nil)
}
func (r fakeRSVP) Get(_ context.Context, name string) (api.RSVPSession, error) {
	return api.RSVPSession{Name: name, Dest: "198.18.2.2:5004", Proto: "udp"}, r.f.record("RSVP.Get", []any{name}, nil)
}
func (r fakeRSVP) AddSession(_ context.Context, s api.RSVPSessionRequest, opts ...api.ChangeOption) (api.RSVPSession, error) {
	return api.RSVPSession{Name: s.Name, Dest: s.Dest, Proto: s.Proto}, r.f.record("RSVP.AddSession", []any{s}, opts)
}
func (r fakeRSVP) Sender(_ context.Context, name string, s api.RSVPSenderRequest, opts ...api.ChangeOption) (api.RSVPSession, error) {
	return api.RSVPSession{Name: name, Dest: "198.18.2.2:5004", Sender: &s}, r.f.record("RSVP.Sender", []any{name, s}, opts)
}
func (r fakeRSVP) Reserve(_ context.Context, name string, q api.RSVPReserveRequest, opts ...api.ChangeOption) (api.RSVPSession, error) {
	return api.RSVPSession{Name: name, Reserve: &q, Resvs: []api.RSVPResv{{Role: "receiver"}}}, r.f.record("RSVP.Reserve", []any{name, q}, opts)
}
func (r fakeRSVP) Remove(_ context.Context, name string, opts ...api.ChangeOption) error {
	return r.f.record("RSVP.Remove", []any{name}, opts)
}

// The rsvp commands map their flags to the API's requests: Tspec terms
// in bytes/s (a unit converts), the Rspec only for guaranteed service.
func TestRSVPCommands(t *testing.T) {
	for _, tc := range []struct {
		args []string
		call string // the recorded call ("" when refused)
		out  string // in stdout, or stderr when refused
	}{
		{[]string{"rsvp", "session", "add", "rtp", "--dest", "198.18.2.2:5004", "--proto", "udp"},
			`RSVP.AddSession {"name":"rtp","dest":"198.18.2.2:5004","proto":"udp"}`, "session rtp: 198.18.2.2:5004/udp"},
		{[]string{"rsvp", "session", "add", "rtp"}, "", "flag --dest: missing"},
		{[]string{"rsvp", "sender", "rtp", "--tspec", "r=2mbit,b=3000,p=500000,m=64,M=1400", "--sport", "4000"},
			`RSVP.Sender rtp {"port":4000,"tspec":{"r_Bps":250000,"b_B":3000,"p_Bps":500000,"m_B":64,"M_B":1400}}`, "Path to 198.18.2.2:5004 with r=250000 b=3000 p=500000 m=64 M=1400"},
		{[]string{"rsvp", "sender", "rtp", "--tspec", "r=250000"}, "", "give at least r (token rate) and b"},
		{[]string{"rsvp", "sender", "rtp", "--tspec", "r=250000,b=3000,R=300000"}, "", "R is an Rspec term of guaranteed service only"},
		{[]string{"rsvp", "sender", "rtp", "--tspec", "r=2m,b=3000"}, "", `r = "2m"`},
		{[]string{"rsvp", "reserve", "rtp", "--service", "guaranteed", "--flowspec", "r=250000,b=3000,R=275000,S=10", "--confirm"},
			`RSVP.Reserve rtp {"service":"guaranteed","flowspec":{"r_Bps":250000,"b_B":3000,"m_B":0,"M_B":0,"R_Bps":275000,"S_us":10},"style":"ff","confirm":true}`, "sent to 1 sender(s)"},
		{[]string{"rsvp", "reserve", "rtp", "--service", "best-effort", "--flowspec", "r=1,b=1"}, "", "want guaranteed or controlled-load"},
		{[]string{"rsvp", "reserve", "rtp", "--service", "controlled-load", "--flowspec", "r=1,b=1", "--style", "wf"}, "", "want ff or se"},
		{[]string{"rsvp", "remove", "rtp"}, "RSVP.Remove rtp", ""},
		{[]string{"rsvp", "list"}, `RSVP.Status {"Offset":0,"Limit":0}`, "198.18.1.2:4000  router  guaranteed  ff     r=250000 b=3000 m=64 M=1500 R=275000 S=0  198.18.2.2"},
		{[]string{"rsvp", "list"}, `RSVP.Status {"Offset":0,"Limit":0}`, "messages: 9 received, 1 malformed, 2 from unmanaged links"},
		{[]string{"rsvp", "list"}, `RSVP.Status {"Offset":0,"Limit":0}`, "3 over the previous hop's cap, 0 over the source's cap, 4 tears not from the state's hop"},
		{[]string{"rsvp", "list", "--limit", "1", "--offset", "5"}, `RSVP.Status {"Offset":5,"Limit":1}`, "(more states follow: hostqos rsvp list --offset 6)"},
		{[]string{"rsvp", "list", "--limit", "1", "--offset", "5", "-o", "json"}, `RSVP.Status {"Offset":5,"Limit":1}`, `"next_offset": 6`},
		{[]string{"rsvp", "show", "rtp", "-o", "json"}, "RSVP.Get rtp", `"dest": "198.18.2.2:5004"`},
	} {
		fc := &fakeClient{}
		out, errOut, code := runFake(fc, tc.args...)
		name := strings.Join(tc.args, " ")
		if tc.call == "" {
			if code == 0 || !strings.Contains(errOut, tc.out) || len(fc.calls) != 0 {
				t.Errorf("%s: exit %d, stderr %q, calls %v; want refused with %q", name, code, errOut, fc.calls, tc.out)
			}
			continue
		}
		if code != 0 || len(fc.calls) != 1 || fc.calls[0] != tc.call || !strings.Contains(out, tc.out) {
			t.Errorf("%s: exit %d (%s), calls %q, out:\n%s\nwant call %q and %q", name, code, errOut, fc.calls, out, tc.call, tc.out)
		}
	}
}
