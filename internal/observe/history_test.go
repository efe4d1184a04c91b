package observe

import (
	"testing"

	"github.com/hostqos/hostqos/internal/history"
)

func TestParseNetDev(t *testing.T) {
	data := []byte(`Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo:    1000      10    0    0    0     0          0         0     1000      10    0    0    0     0       0          0
  eth0: 123456    789    1    2    0     0          0         0   654321     987    0    3    0     0       0          0
`)
	got := parseNetDev(data)["eth0"]
	want := history.Counters{BytesIn: 123456, PacketsIn: 789, DropsIn: 2, BytesOut: 654321, PacketsOut: 987, DropsOut: 3}
	if got != want {
		t.Errorf("eth0 = %+v, want %+v", got, want)
	}
	if unitOf("/system.slice/nginx.service/worker") != "nginx.service" || unitOf("/user.slice") != "" {
		t.Error("unitOf")
	}
}
