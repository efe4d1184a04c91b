package api

import (
	"net/netip"
	"net/url"
	"reflect"
	"strings"
	"testing"
)

// TestExplainQueryRoundTrip: what the client encodes the daemon reads
// back; bad values are refused naming the parameter.
func TestExplainQueryRoundTrip(t *testing.T) {
	ef := 46
	for _, q := range []ExplainQuery{
		{PID: 42},
		{Exe: "/usr/bin/curl"},
		{Proto: "tcp", Local: netip.MustParseAddr("198.18.0.1"), LPort: 40000, Remote: netip.MustParseAddr("198.18.0.2"), RPort: 443, DSCP: &ef},
		{Proto: "icmp", Remote: netip.MustParseAddr("2001:db8::2")},
	} {
		got, err := ParseExplainQuery(q.values())
		if err != nil || !reflect.DeepEqual(got, q) {
			t.Errorf("%+v: read back %+v, %v", q, got, err)
		}
	}
	for raw, want := range map[string]string{
		"":                                    "say what to explain",
		"pid=0":                               "parameter pid",
		"pid=42&bogus=1":                      "unknown parameter",
		"exe=curl":                            "absolute path",
		"proto=sctp":                          "want tcp, udp or icmp",
		"remote=198.18.0.2/24":                "parameter remote",
		"local=198.18.0.1&remote=2001:db8::1": "another address family",
		"proto=icmp&rport=5":                  "ICMP has no ports",
		"rport=70000":                         "parameter rport",
		"dscp=64&pid=1":                       "parameter dscp",
		"pid=1&pid=2":                         "more than once",
	} {
		v, _ := url.ParseQuery(raw)
		if _, err := ParseExplainQuery(v); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want an error with %q", raw, err, want)
		}
	}
}
