package daemon

import (
	"context"
	"net/http"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/engine"
	"github.com/hostqos/hostqos/internal/web"
)

// The local web view (docs/web.md): with [web] listen (or --web-listen)
// the daemon serves internal/web's page over TCP. Its requests go through
// the API's own handler as the user of the login token (asCaller), so the
// API's authorization applies to them unchanged.

// webListen is where the web view listens: the flag, else the config
// file's [web] listen ("": no web view).
func (d *Daemon) webListen() string {
	if d.cfg.WebListen != "" {
		return d.cfg.WebListen
	}
	return d.eng.WebSettings().Listen
}

// startWeb starts the web view when one is configured, over api (the
// routes of the API socket).
func (d *Daemon) startWeb(api http.Handler) error {
	addr := d.webListen()
	if addr == "" {
		return nil
	}
	s, err := web.Start(web.Config{Listen: addr, API: api, As: asCaller, Logger: d.cfg.Logger.With("component", "web")})
	if err != nil {
		return err
	}
	d.mu.Lock()
	d.web = s
	d.mu.Unlock()
	return nil
}

// stopWeb ends the web view (a no-op without one).
func (d *Daemon) stopWeb() {
	d.mu.Lock()
	s := d.web
	d.web = nil
	d.mu.Unlock()
	s.Close()
}

// asCaller is r as a request of c to the API handler: what callerOf
// reads. The request has no connection of its own (connOf is nil), so the
// routes that act on the caller's process are not passed by the view.
func asCaller(r *http.Request, c engine.Caller) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), credKey{}, &c))
}

// handleWebToken answers POST /v1/web/token: a fresh login of the web
// view for the caller's user.
func (d *Daemon) handleWebToken(w http.ResponseWriter, r *http.Request) {
	d.mu.Lock()
	s := d.web
	d.mu.Unlock()
	if s == nil {
		writeJSON(w, http.StatusConflict, api.ErrorBody{Error: `the web view is off: set [web] listen = "127.0.0.1:9465" in the config file (or start hostqosd with --web-listen) and restart hostqosd`})
		return
	}
	login, err := s.Issue(*callerOf(r))
	if err != nil {
		writeErr(w, err)
		return
	}
	d.log.Info("web login issued", "uid", login.UID, "expires", login.Expires)
	writeJSON(w, http.StatusOK, login)
}
