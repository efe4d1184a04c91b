package rsvpfront

import (
	"math"
	"net/netip"
	"strings"
	"testing"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/policy"
	"github.com/hostqos/hostqos/internal/rsvp"
)

// TestRSVPRatesBounded: the rates of an RSVP Tspec are held to
// policy.MaxRate like every other rate: the API's (bytes/s) are refused
// naming the bound, and a wire flowspec's float rate far above it (up to
// 3.4e38 B/s) becomes a reservation that validation refuses, not a rate
// converted out of range; NaN is no rate.
func TestRSVPRatesBounded(t *testing.T) {
	for _, ts := range []api.Tspec{{Rate: 1 << 62, Bucket: 3000}, {Rate: 250000, Peak: math.MaxUint64, Bucket: 3000}, {Rate: 250000, ServiceRate: 2e12, Bucket: 3000}} {
		if _, err := rsvpTspec(ts); err == nil || !strings.Contains(err.Error(), "a rate is at most 1250000000000 B/s (10tbit)") {
			t.Errorf("%+v: %v, want refused at 10tbit", ts, err)
		}
	}
	if _, err := rsvpTspec(api.Tspec{Rate: 1_250_000_000_000, Bucket: 3000}); err != nil {
		t.Errorf("10 Tbit/s exactly: %v", err)
	}
	k := rsvp.FlowKey{Session: rsvp.Session{Dest: netip.MustParseAddr("198.18.0.2"), Proto: 17, Port: 5004},
		Sender: rsvp.Filter{Src: netip.MustParseAddr("198.18.0.1"), Port: 4000}}
	for _, rate := range []float32{math.MaxFloat32, 2e12, float32(math.NaN()), -1} {
		fs := rsvp.Flowspec{Service: rsvp.ServiceCL, Tspec: rsvp.Tspec{Rate: rate, Bucket: 3000, Peak: float32(math.Inf(1)), MinUnit: 64, MaxPacket: 1500}}
		r, err := Reservation(k, fs)
		if err != nil {
			t.Fatal(err)
		}
		p := policy.DefaultPolicy()
		p.Reservations = []policy.Reservation{r}
		err = p.Validate("rsvp")
		if err == nil || !strings.Contains(err.Error(), "field rate") {
			t.Errorf("r = %g B/s: reservation rate %d, validation %v; want field rate refused", rate, r.Rate, err)
		}
	}
}
