package daemon

import (
	"net/http"

	"github.com/hostqos/hostqos/internal/policy"
)

// The reservation routes: thin, like the rules'. Changes answer with the
// reservation as listed after the change.

func (d *Daemon) handleReservations(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	out, err := d.eng.Reservations(*callerOf(r), name)
	if err != nil {
		writeErr(w, err)
		return
	}
	if name != "" {
		writeJSON(w, http.StatusOK, out[0])
		return
	}
	writeJSON(w, http.StatusOK, out)
}

func (d *Daemon) handleAddReservation(w http.ResponseWriter, r *http.Request) {
	resv := policy.NewReservation("")
	if err := decode(r, &resv); err != nil {
		writeErr(w, err)
		return
	}
	if _, err := d.eng.AddReservation(r.Context(), *callerOf(r), resv, temporary(r)); err != nil {
		writeErr(w, err)
		return
	}
	d.answerReservation(w, r, resv.Name, http.StatusCreated)
}

func (d *Daemon) handleSetReservation(w http.ResponseWriter, r *http.Request) {
	body, err := readBody(r)
	if err != nil {
		writeErr(w, err)
		return
	}
	name := r.PathValue("name")
	if _, err := d.eng.SetReservation(r.Context(), *callerOf(r), name, body, temporary(r)); err != nil {
		writeErr(w, err)
		return
	}
	d.answerReservation(w, r, name, http.StatusOK)
}

func (d *Daemon) handleRemoveReservation(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if err := d.eng.RemoveReservation(r.Context(), *callerOf(r), name); err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"removed": name})
}

// answerReservation answers a change with the reservation as it is now.
func (d *Daemon) answerReservation(w http.ResponseWriter, r *http.Request, name string, code int) {
	out, err := d.eng.Reservations(*callerOf(r), name)
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, code, out[0])
}
