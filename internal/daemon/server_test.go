package daemon

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/hostqos/hostqos/internal/policy"
)

// stuckWriter is a client that does not read: the first Write blocks until
// release is closed.
type stuckWriter struct {
	h       http.Header
	writing chan struct{}
	release chan struct{}
}

func (w *stuckWriter) Header() http.Header { return w.h }
func (w *stuckWriter) WriteHeader(int)     {}
func (w *stuckWriter) Write(p []byte) (int, error) {
	select {
	case w.writing <- struct{}{}:
	default:
	}
	<-w.release
	return len(p), nil
}

// TestNoWriteUnderLock: while a reading handler is stuck writing to a
// client that does not read, the daemon's lock is free, so root's status
// and changes go on.
func TestNoWriteUnderLock(t *testing.T) {
	p := &policy.Policy{Links: []policy.Link{{Name: "eth9"}}, Classes: policy.DefaultClasses(), Rules: []policy.Rule{rule("a")}}
	d := &Daemon{eff: merged{Policy: p, Sources: map[string]string{}}, links: map[string]int{},
		temp: newOverlay(), slots: newSlotTable()}
	d.temp.Runs["r1"] = &runState{ID: "r1", Cmd: "sleep 1000"}
	for path, h := range map[string]http.HandlerFunc{
		"/v1/links": d.handleLinks, "/v1/classes": d.handleClasses,
		"/v1/rules": d.handleRules, "/v1/runs": d.handleRuns,
	} {
		w := &stuckWriter{h: http.Header{}, writing: make(chan struct{}, 1), release: make(chan struct{})}
		done := make(chan struct{})
		go func() {
			defer close(done)
			h(w, httptest.NewRequest(http.MethodGet, path, nil))
		}()
		select {
		case <-w.writing:
		case <-time.After(5 * time.Second):
			t.Fatalf("GET %s: never wrote", path)
		}
		if d.mu.TryLock() {
			d.mu.Unlock()
		} else {
			t.Errorf("GET %s holds the daemon lock while writing to the client", path)
		}
		close(w.release)
		<-done
	}
}
