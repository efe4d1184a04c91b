package engine

import "github.com/hostqos/hostqos/api"

// Kinds of the events of quotas, schedules, apps and links.
const (
	EventQuotaReached = "quota.reached"
	EventQuotaReset   = "quota.reset"
	EventScheduleOn   = "schedule.on"
	EventScheduleOff  = "schedule.off"
)

// publish hands events to the event stream and the log.
func (e *Engine) publish(evs ...api.Event) {
	for _, ev := range evs {
		e.Publish(ev)
		e.log.Info("event", "kind", ev.Kind, "subject", ev.Subject, "message", ev.Message)
	}
}
