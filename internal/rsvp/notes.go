package rsvp

import (
	"log/slog"
	"sync"
	"time"
)

// noteEvery is how often one reason is logged at most.
const noteEvery = time.Minute

// noteLog logs what a remote party can make happen over and over (a
// refused message, a failed answer) at most once per reason every
// noteEvery, with how many happened since the last line for that reason:
// a flood costs a counter each, not a log line each. The reasons are a
// fixed set of constants, so it stays small. Safe for concurrent use.
type noteLog struct {
	mu   sync.Mutex
	last map[string]time.Time
	n    map[string]uint64
}

// note counts one occurrence of reason and, when the reason's last line is
// noteEvery old, logs msg to log (nil: nowhere) with the reason, the count
// and the attributes attrs makes (called only then: a refusal that is not
// logged formats nothing).
func (l *noteLog) note(log *slog.Logger, now time.Time, msg, reason string, attrs func() []any) {
	if log == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.last == nil {
		l.last, l.n = map[string]time.Time{}, map[string]uint64{}
	}
	l.n[reason]++
	if last, ok := l.last[reason]; ok && now.Sub(last) < noteEvery {
		return
	}
	log.Warn(msg, append([]any{"reason", reason, "count", l.n[reason], "per", noteEvery.String()}, attrs()...)...)
	l.last[reason], l.n[reason] = now, 0
}
