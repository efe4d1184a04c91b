package engine

import "github.com/hostqos/hostqos/api"

// fillReservationStatus adds what the kernel reports of each reservation
// (counters, bound sockets); a Kernel that cannot say leaves them empty.
func (e *Engine) fillReservationStatus(k Kernel, who Caller, out []api.ReservationInfo) {}
