package daemon

import (
	"fmt"
	"net/http"
	"time"

	"github.com/hostqos/hostqos/api"
)

// Large answers: a long list or a flow table is a snapshot taken under the
// engine's lock, then written element by element (writeList, writeStats)
// without it. The snapshot lives until its client has read the answer —
// for a client that reads nothing, until the write timeout (30 s) — so the
// answers to ordinary users are bounded together: at most
// maxUserLargeAnswers are under way at once, whatever route gave them; a
// further request waits up to largeAnswerWait for a place, then gets 503.
// Root and group hostqos are never held back (they may change the
// policy, so nothing is gained by bounding them).
//
// Any route whose answer grows with the policy, the flow table or users'
// activity takes a place: wrap its handler with d.large.bound (or
// d.large.boundIf for some requests of a route) where routes() registers
// it; a named object's listing is marked large in objectRoutesOf. History queries have their own places (handleHistory): they cost
// reads of the database, not memory.
const maxUserLargeAnswers = 2

// largeAnswerWait is how long a request waits for a place (also the wait
// of a history query).
var largeAnswerWait = 5 * time.Second

// largeAnswers holds the places of large answers to ordinary users; one
// per server, shared by every route that gives one.
type largeAnswers struct {
	places chan struct{}
}

func newLargeAnswers(n int) *largeAnswers {
	return &largeAnswers{places: make(chan struct{}, n)}
}

// bound wraps h, whose answer can be large: an ordinary user's request
// takes a place for as long as h runs (its answer is written by then).
func (la *largeAnswers) bound(h http.HandlerFunc) http.HandlerFunc { return la.boundIf(nil, h) }

// boundIf is bound for the requests large says ask for a large answer
// (nil: every request); the others pass at once.
func (la *largeAnswers) boundIf(large func(r *http.Request) bool, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if callerOf(r).Privileged || (large != nil && !large(r)) {
			h(w, r)
			return
		}
		release, ok := la.acquire(w, r)
		if !ok {
			return
		}
		defer release()
		h(w, r)
	}
}

// acquire waits up to largeAnswerWait for a place for r. It returns the
// function that gives the place back, or false when it answered 503 (or
// the client went away).
func (la *largeAnswers) acquire(w http.ResponseWriter, r *http.Request) (release func(), ok bool) {
	wait := time.NewTimer(largeAnswerWait)
	defer wait.Stop()
	select {
	case la.places <- struct{}{}:
		return func() { <-la.places }, true
	case <-wait.C:
		writeJSON(w, http.StatusServiceUnavailable, api.ErrorBody{Error: fmt.Sprintf(
			"busy: %d large answers (lists, statistics) to ordinary users are under way, the most at once; try again", cap(la.places))})
	case <-r.Context().Done():
	}
	return nil, false
}
