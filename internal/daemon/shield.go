package daemon

import (
	"net/http"

	"github.com/hostqos/hostqos/api"
)

// The XDP shield's routes (docs/ddos.md): thin, over the engine.
func (d *Daemon) shieldRoutes(mux *http.ServeMux) {
	mux.HandleFunc(api.RouteBlocks, d.large.bound(d.handleBlocks))
	mux.HandleFunc(api.RouteAddBlock, mutating(d.handleAddBlock))
	mux.HandleFunc(api.RouteRemoveBlock, mutating(d.handleRemoveBlock))
	mux.HandleFunc(api.RouteProtected, d.large.bound(d.handleProtected))
	// Ordinary users may protect clients of their own servers: the
	// engine decides.
	mux.HandleFunc(api.RouteAddProtected, d.handleProtect)
	mux.HandleFunc(api.RouteRemoveProtected, d.handleUnprotect)
}

func (d *Daemon) handleBlocks(w http.ResponseWriter, r *http.Request) {
	out, err := d.eng.Blocks()
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

func (d *Daemon) handleAddBlock(w http.ResponseWriter, r *http.Request) {
	var req api.BlockRequest
	if err := decode(r, &req); err != nil {
		writeErr(w, err)
		return
	}
	out, err := d.eng.AddBlock(r.Context(), *callerOf(r), req)
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

func (d *Daemon) handleRemoveBlock(w http.ResponseWriter, r *http.Request) {
	p := r.PathValue("prefix")
	if err := d.eng.RemoveBlock(r.Context(), *callerOf(r), p); err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"removed": p})
}

func (d *Daemon) handleProtected(w http.ResponseWriter, r *http.Request) {
	out, err := d.eng.Protected(*callerOf(r))
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

func (d *Daemon) handleProtect(w http.ResponseWriter, r *http.Request) {
	var req api.ProtectRequest
	if err := decode(r, &req); err != nil {
		writeErr(w, err)
		return
	}
	out, err := d.eng.Protect(r.Context(), *callerOf(r), req)
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

func (d *Daemon) handleUnprotect(w http.ResponseWriter, r *http.Request) {
	c := r.PathValue("client")
	if err := d.eng.Unprotect(r.Context(), *callerOf(r), c); err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"removed": c})
}
