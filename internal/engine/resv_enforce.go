package engine

import (
	"fmt"

	"github.com/hostqos/hostqos/internal/policy"
)

// Reservations on links that cannot enforce them. A guaranteed or
// controlled-load reservation is enforced by a shaped link's HTB tree
// (policy.Unenforced). One added or changed when no link it is admitted
// on is shaped is refused, from every front door (API, config file,
// RSVP). The shaping of a link that holds reservations can still be
// taken away by force (checkShapingKept): the reservations admitted
// before stay, reported as not enforced (resv show, reservation.broken)
// until a link is shaped again; changing one of them then is refused like
// adding it.

// checkEnforceable refuses the reservations of next that are new or
// changed since prev and that nothing in next can enforce.
func checkEnforceable(prev, next *policy.Policy, source string) error {
	var errs policy.Errors
	for _, r := range next.Reservations {
		why := next.Unenforced(r)
		if why == "" {
			continue
		}
		if was, ok := prev.Reservation(r.Name); ok && was == r {
			continue // admitted before the shaping was taken away
		}
		field, value := "service", string(r.Service)
		if r.Link != "" {
			field, value = "link", r.Link
		}
		errs = append(errs, &policy.FieldError{Source: source, Object: fmt.Sprintf("reservation %q", policy.Clip(r.Name)),
			Field: field, Value: value,
			Reason: "cannot be enforced: " + why,
			Fix:    "give the link an egress_rate (hostqos link set LINK --egress-rate RATE), or use service best-effort to count the traffic only"})
	}
	if len(errs) > 0 {
		return &policy.AdmissionError{Errors: errs}
	}
	return nil
}
