package daemon

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/hostqos/hostqos/api"
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
	d := newTestDaemon(t, t.TempDir())
	h := d.routes()
	for _, route := range []string{api.RouteLinks, api.RouteClasses, api.RouteRules, api.RouteRuns} {
		w := &stuckWriter{h: http.Header{}, writing: make(chan struct{}, 1), release: make(chan struct{})}
		done := make(chan struct{})
		go func() {
			defer close(done)
			h.ServeHTTP(w, httptest.NewRequest(routeMethod(route), routePath(route), nil))
		}()
		select {
		case <-w.writing:
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: never wrote", route)
		}
		free := make(chan struct{})
		go func() { d.eng.Counts(); close(free) }() // takes the engine's lock
		select {
		case <-free:
		case <-time.After(5 * time.Second):
			t.Errorf("%s holds the engine's lock while writing to the client", route)
		}
		close(w.release)
		<-done
	}
}
