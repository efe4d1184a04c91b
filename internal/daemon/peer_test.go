package daemon

import (
	"encoding/json"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/policy"
)

// TestPeerGroups: the groups of a socket's peer come from the connection
// (SO_PEERGROUPS), the same the peer process has.
func TestPeerGroups(t *testing.T) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fds[0])
	defer unix.Close(fds[1])
	got, err := peerGroups(fds[0])
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.Getgroups()
	if err != nil {
		t.Fatal(err)
	}
	g := make([]int, len(got))
	for i, x := range got {
		g[i] = int(x)
	}
	slices.Sort(g)
	slices.Sort(want)
	if !slices.Equal(g, want) {
		t.Errorf("peer groups %v, want the process's %v", g, want)
	}
}

// TestErrorAnswersAreBounded: an error answer carries at most 100 field
// errors, each text cut to 512 bytes, whatever the input made them.
func TestErrorAnswersAreBounded(t *testing.T) {
	long := strings.Repeat("9", 5000)
	var fes policy.Errors
	for i := 0; i < 300; i++ {
		fes = append(fes, &policy.FieldError{Source: "api", Object: `rule "r"`, Field: "dscp", Value: policy.Clip(long), Reason: "unknown DSCP " + long})
	}
	rec := httptest.NewRecorder()
	writeErr(rec, fes)
	if rec.Code != 400 {
		t.Errorf("status %d", rec.Code)
	}
	var body api.ErrorBody
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
		t.Fatal(err)
	}
	if len(body.Fields) != 100 {
		t.Errorf("%d field errors, want 100", len(body.Fields))
	}
	for _, fe := range body.Fields {
		if len(fe.Reason) > 600 || !strings.HasSuffix(fe.Reason, "(5013 bytes)") {
			t.Fatalf("reason of %d bytes: %.80s…", len(fe.Reason), fe.Reason)
		}
	}
	if rec.Body.Len() > 100*1024 {
		t.Errorf("answer of %d bytes", rec.Body.Len())
	}
}
