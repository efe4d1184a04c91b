package traffic

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestValidateNamesTheField: every refused config field comes as a
// *FieldError naming the field, so front doors can map it to a flag; a
// config with the defaults left out is valid.
func TestValidateNamesTheField(t *testing.T) {
	to, sec := "198.18.0.2:5001", 10*time.Second
	for _, c := range []struct {
		name  string
		cfg   interface{ Validate() error }
		field string // "" for valid
	}{
		{"cbr ok", CBRConfig{To: to, PacketRate: 100, Duration: sec, DSCP: NoDSCP}, ""},
		{"cbr g729", CBRConfig{To: to, Profile: ProfileG729, Duration: sec, DSCP: NoDSCP}, ""},
		{"cbr no to", CBRConfig{PacketRate: 100, Duration: sec}, "to"},
		{"cbr to without port", CBRConfig{To: "nowhere", PacketRate: 100, Duration: sec}, "to"},
		{"cbr size", CBRConfig{To: to, Size: 10, PacketRate: 100, Duration: sec}, "size"},
		{"cbr both rates", CBRConfig{To: to, PacketRate: 100, BitRate: 1e6, Duration: sec}, "packet_rate"},
		{"cbr pps", CBRConfig{To: to, PacketRate: 2e7, Duration: sec}, "packet_rate"},
		{"cbr no rate", CBRConfig{To: to, Duration: sec}, "bit_rate"},
		{"cbr profile", CBRConfig{To: to, Profile: "g711", Duration: sec}, "profile"},
		{"cbr duration", CBRConfig{To: to, PacketRate: 1, Duration: 25 * time.Hour}, "duration"},
		{"cbr negative duration with count", CBRConfig{To: to, PacketRate: 1, Count: 5, Duration: -time.Second, DSCP: NoDSCP}, "duration"},
		{"cbr dscp", CBRConfig{To: to, PacketRate: 1, Duration: sec, DSCP: 64}, "dscp"},
		{"sink ok", SinkConfig{Listen: to, Duration: sec}, ""},
		{"sink flows", SinkConfig{Listen: to, Duration: sec, Flows: -1}, "flows"},
		{"sink idle", SinkConfig{Listen: to, Duration: sec, Idle: -1}, "idle"},
		{"echo listen", EchoConfig{Duration: sec}, "listen"},
		{"echo duration", EchoConfig{Listen: to}, "duration"},
		{"voice ok", VoiceConfig{To: to, Calls: 10, Duration: sec}, ""},
		{"voice calls", VoiceConfig{To: to, Calls: 0, Duration: sec}, "calls"},
		{"voice mode", VoiceConfig{To: to, Calls: 1, Mode: "both", Duration: sec}, "mode"},
		{"voice pps", VoiceConfig{To: to, Calls: 10000, PacketRate: 101, Duration: sec}, "packet_rate"},
		{"voice drain", VoiceConfig{To: to, Calls: 1, Duration: sec, Drain: 2 * time.Minute}, "drain"},
		{"bulk streams", BulkConfig{To: to, Streams: 5000, Duration: sec}, "streams"},
		{"tcp sink streams", TCPSinkConfig{Listen: to, Duration: sec, Streams: -1}, "streams"},
		{"fct ok", FCTConfig{To: to, Count: 1, Size: 1000}, ""},
		{"fct size", FCTConfig{To: to, Count: 1, Size: MaxTransfer + 1}, "size"},
		{"fct concurrency", FCTConfig{To: to, Count: 1, Size: 1, Concurrency: 2000}, "concurrency"},
		{"fct direction", FCTConfig{To: to, Count: 1, Size: 1, Direction: "sideways"}, "direction"},
		{"fct timeout", FCTConfig{To: to, Count: 1, Size: 1, Timeout: -time.Second}, "timeout"},
		{"pareto ok", ParetoConfig{To: to, K: 4e6, Cap: 20e6, Alpha: 1.05, Duration: sec}, ""},
		{"pareto cap below k", ParetoConfig{To: to, K: 4e6, Cap: 2e6, Alpha: 1.05, Duration: sec}, "cap"},
		{"pareto alpha", ParetoConfig{To: to, K: 4e6, Cap: 20e6, Duration: sec}, "alpha"},
		{"pareto off prob", ParetoConfig{To: to, K: 4e6, Cap: 20e6, Alpha: 1, OffProb: 1, Duration: sec}, "off_prob"},
		{"pareto interval", ParetoConfig{To: to, K: 4e6, Cap: 20e6, Alpha: 1, Interval: 2 * time.Hour, Duration: sec}, "interval"},
		{"video ok", VideoConfig{To: to, Duration: sec}, ""},
		{"video gop", VideoConfig{To: to, GOP: "IXB", Duration: sec}, "gop"},
		{"video i size", VideoConfig{To: to, ISize: -1, Duration: sec}, "i_size"},
		{"video max payload", VideoConfig{To: to, MaxPayload: 10, Duration: sec}, "max_payload"},
	} {
		err := c.cfg.Validate()
		if c.field == "" {
			if err != nil {
				t.Errorf("%s: %v", c.name, err)
			}
			continue
		}
		var fe *FieldError
		if !errors.As(err, &fe) {
			t.Errorf("%s: error %v (%T), want a *FieldError", c.name, err, err)
			continue
		}
		if fe.Field != c.field {
			t.Errorf("%s: field %q, want %q (%v)", c.name, fe.Field, c.field, err)
		}
		if fe.Reason == "" || fe.Fix == "" || !strings.HasPrefix(err.Error(), c.field) {
			t.Errorf("%s: error %q lacks the field, the reason or the fix", c.name, err)
		}
	}
}
