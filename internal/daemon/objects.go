package daemon

import (
	"context"
	"net/http"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/engine"
	"github.com/hostqos/hostqos/internal/policy"
)

// The routes of the API's named objects: links, classes, rules,
// reservations, drop-list entries and protected clients. Every kind is
// served by the same handlers (objectRoutes); what differs between kinds
// is data: its routes, the engine's operations on it and how a change is
// answered (objectRoutesOf holds that table).

// change is one change request, as the engine's operations take it.
type change struct {
	ctx context.Context
	who peer
	// key is the object the path names ("" for an add).
	key string
	// temporary: ?temporary=1, not persisted; force: ?force=1 (see
	// engine.LinkChange).
	temporary, force bool
}

func changeOf(r *http.Request, key string) change {
	return change{ctx: r.Context(), who: *callerOf(r), key: key, temporary: temporary(r), force: force(r)}
}

// link is the change's options as a link change takes them.
func (c change) link() engine.LinkChange {
	return engine.LinkChange{Temporary: c.temporary, Force: c.force}
}

// answerWith is what a successful change answers with.
type answerWith int

const (
	// answerResult: what the engine's operation returned.
	answerResult answerWith = iota
	// answerObject: the object as listed after the change.
	answerObject
	// answerList: the whole listing after the change.
	answerList
)

// objectRoutes serves one kind of named object, T as a request adds it and
// Info as a listing shows it, on the routes the kind has: list, show, add,
// put (replace whole), patch (change the fields given) and remove. A route
// left "" is not served; an operation of a route that is served is not nil.
type objectRoutes[T, Info any] struct {
	list, show, add, put, patch, remove string // api.Route*
	// key is the path wildcard that names one object.
	key string
	// open: ordinary users may send changes and the engine decides what
	// they may do; otherwise only privileged callers, refused before the
	// body is read (mutating).
	open bool
	// large: the listing grows with what callers add, so an ordinary
	// user's listing takes one of the places of large answers.
	large bool
	// created is the status of the answer to an add.
	created int
	answer  answerWith
	// find lists the objects the caller may see; key, if not "", picks
	// one (a *engine.NotFoundError if there is none).
	find func(who peer, key string) ([]Info, error)
	// changed, if not nil, is find for the answer of a change (answerObject):
	// the object from the engine's state, without the kernel reads a
	// listing makes.
	changed func(key string) ([]Info, error)
	// blank is what an add's or put's body is decoded over (the kind's
	// "unset" sentinels); nil: the zero T.
	blank func() T
	// nameOf is the key of the object an add names (for answerObject).
	nameOf func(T) string

	addObj    func(c change, obj T) (any, error)
	putObj    func(c change, obj T) (any, error)
	patchObj  func(c change, patch []byte) (any, error)
	removeObj func(c change) error
}

// register serves o's routes on mux; la bounds large listings.
func (o *objectRoutes[T, Info]) register(mux *http.ServeMux, la *largeAnswers) {
	serve := func(route string, h http.HandlerFunc) {
		if route != "" {
			mux.HandleFunc(route, h)
		}
	}
	change := mutating
	if o.open {
		change = func(h http.HandlerFunc) http.HandlerFunc { return h }
	}
	list := o.handleGet
	if o.large {
		list = la.bound(list)
	}
	serve(o.list, list)
	serve(o.show, o.handleGet)
	serve(o.add, change(o.handleAdd))
	serve(o.put, change(o.handlePut))
	serve(o.patch, change(o.handlePatch))
	serve(o.remove, change(o.handleRemove))
}

// handleGet answers a listing, or one object when the path names one.
func (o *objectRoutes[T, Info]) handleGet(w http.ResponseWriter, r *http.Request) {
	o.writeFound(w, r, http.StatusOK, r.PathValue(o.key))
}

// writeFound answers with code and the listing the caller may see, or with
// object key when it is not "". Never under the engine's lock: the client
// may not read.
func (o *objectRoutes[T, Info]) writeFound(w http.ResponseWriter, r *http.Request, code int, key string) {
	out, err := o.find(*callerOf(r), key)
	if err != nil {
		writeErr(w, err)
		return
	}
	if key != "" {
		writeJSON(w, code, out[0])
		return
	}
	writeJSON(w, code, out)
}

// decodeObj decodes the request's body over the kind's blank object.
func (o *objectRoutes[T, Info]) decodeObj(r *http.Request) (T, error) {
	var obj T
	if o.blank != nil {
		obj = o.blank()
	}
	err := decode(r, &obj)
	return obj, err
}

func (o *objectRoutes[T, Info]) handleAdd(w http.ResponseWriter, r *http.Request) {
	obj, err := o.decodeObj(r)
	if err != nil {
		writeErr(w, err)
		return
	}
	res, err := o.addObj(changeOf(r, ""), obj)
	key := ""
	if o.nameOf != nil {
		key = o.nameOf(obj)
	}
	o.answerChange(w, r, o.created, key, res, err)
}

func (o *objectRoutes[T, Info]) handlePut(w http.ResponseWriter, r *http.Request) {
	obj, err := o.decodeObj(r)
	if err != nil {
		writeErr(w, err)
		return
	}
	key := r.PathValue(o.key)
	res, err := o.putObj(changeOf(r, key), obj)
	o.answerChange(w, r, http.StatusOK, key, res, err)
}

func (o *objectRoutes[T, Info]) handlePatch(w http.ResponseWriter, r *http.Request) {
	body, err := readBody(r)
	if err != nil {
		writeErr(w, err)
		return
	}
	key := r.PathValue(o.key)
	res, err := o.patchObj(changeOf(r, key), body)
	o.answerChange(w, r, http.StatusOK, key, res, err)
}

func (o *objectRoutes[T, Info]) handleRemove(w http.ResponseWriter, r *http.Request) {
	key := r.PathValue(o.key)
	if err := o.removeObj(changeOf(r, key)); err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"removed": key})
}

// answerChange answers a change of object key whose operation returned
// res and err.
func (o *objectRoutes[T, Info]) answerChange(w http.ResponseWriter, r *http.Request, code int, key string, res any, err error) {
	if err != nil {
		writeErr(w, err)
		return
	}
	switch o.answer {
	case answerResult:
		writeJSON(w, code, res)
	case answerObject:
		if o.changed != nil {
			out, err := o.changed(key)
			if err != nil {
				writeErr(w, err)
				return
			}
			writeJSON(w, code, out[0])
			return
		}
		o.writeFound(w, r, code, key)
	case answerList:
		o.writeFound(w, r, code, "")
	}
}

// router is an objectRoutes of any kind.
type router interface {
	register(mux *http.ServeMux, la *largeAnswers)
}

// objectRoutesOf is the table of the API's named objects over the engine
// e: for each kind its routes, its engine operations and its answers.
func objectRoutesOf(e *engine.Engine) []router {
	return []router{
		&objectRoutes[policy.Link, api.LinkStatus]{
			list: api.RouteLinks, put: api.RouteSetLink, patch: api.RoutePatchLink, remove: api.RouteRemoveLink,
			key: "name", answer: answerList,
			find:   func(peer, string) ([]api.LinkStatus, error) { return e.Links(), nil },
			putObj: func(c change, l policy.Link) (any, error) { return nil, e.SetLink(c.ctx, c.who, c.key, l, c.link()) },
			patchObj: func(c change, patch []byte) (any, error) {
				return e.PatchLink(c.ctx, c.who, c.key, patch, c.link())
			},
			removeObj: func(c change) error { return e.RemoveLink(c.ctx, c.who, c.key) },
		},
		&objectRoutes[policy.Class, api.ClassInfo]{
			list: api.RouteClasses, show: api.RouteClass, add: api.RouteAddClass, patch: api.RouteSetClass, remove: api.RouteRemoveClass,
			key: "name", created: http.StatusCreated,
			find:   func(_ peer, name string) ([]api.ClassInfo, error) { return e.Classes(name) },
			blank:  func() policy.Class { return policy.NewClass("") },
			addObj: func(c change, cl policy.Class) (any, error) { return e.AddClass(c.ctx, c.who, cl, c.temporary) },
			patchObj: func(c change, patch []byte) (any, error) {
				return e.SetClass(c.ctx, c.who, c.key, patch, c.temporary)
			},
			removeObj: func(c change) error { return e.RemoveClass(c.ctx, c.who, c.key) },
		},
		&objectRoutes[policy.Rule, api.RuleInfo]{
			list: api.RouteRules, show: api.RouteRule, add: api.RouteAddRule, patch: api.RouteSetRule, remove: api.RouteRemoveRule,
			key: "name", large: true, created: http.StatusCreated,
			find:   e.Rules,
			blank:  func() policy.Rule { return policy.NewRule("") },
			addObj: func(c change, ru policy.Rule) (any, error) { return e.AddRule(c.ctx, c.who, ru, c.temporary) },
			patchObj: func(c change, patch []byte) (any, error) {
				return e.SetRule(c.ctx, c.who, c.key, patch, c.temporary)
			},
			removeObj: func(c change) error { return e.RemoveRule(c.ctx, c.who, c.key) },
		},
		// A reservation's change answers with the reservation after it:
		// its admission figures (its counters and sockets: a listing).
		&objectRoutes[policy.Reservation, api.ReservationInfo]{
			list: api.RouteReservations, show: api.RouteReservation, add: api.RouteAddReservation,
			patch: api.RouteSetReservation, remove: api.RouteRemoveReservation,
			key: "name", large: true, created: http.StatusCreated, answer: answerObject,
			find:    e.Reservations,
			changed: e.ReservationAdmitted,
			blank:   func() policy.Reservation { return policy.NewReservation("") },
			nameOf:  func(r policy.Reservation) string { return r.Name },
			addObj: func(c change, r policy.Reservation) (any, error) {
				return e.AddReservation(c.ctx, c.who, r, c.temporary)
			},
			patchObj: func(c change, patch []byte) (any, error) {
				return e.SetReservation(c.ctx, c.who, c.key, patch, c.temporary)
			},
			removeObj: func(c change) error { return e.RemoveReservation(c.ctx, c.who, c.key) },
		},
		// The XDP shield (docs/ddos.md): an add replaces an entry of the
		// same prefix or client, so it answers 200.
		&objectRoutes[api.BlockRequest, api.BlockInfo]{
			list: api.RouteBlocks, add: api.RouteAddBlock, remove: api.RouteRemoveBlock,
			key: "prefix", large: true, created: http.StatusOK,
			find:      func(peer, string) ([]api.BlockInfo, error) { return e.Blocks() },
			addObj:    func(c change, req api.BlockRequest) (any, error) { return e.AddBlock(c.ctx, c.who, req) },
			removeObj: func(c change) error { return e.RemoveBlock(c.ctx, c.who, c.key) },
		},
		// Ordinary users may protect clients of their own servers: the
		// engine decides.
		&objectRoutes[api.ProtectRequest, api.ProtectedInfo]{
			list: api.RouteProtected, add: api.RouteAddProtected, remove: api.RouteRemoveProtected,
			key: "client", open: true, large: true, created: http.StatusOK,
			find:      func(who peer, _ string) ([]api.ProtectedInfo, error) { return e.Protected(who) },
			addObj:    func(c change, req api.ProtectRequest) (any, error) { return e.Protect(c.ctx, c.who, req) },
			removeObj: func(c change) error { return e.Unprotect(c.ctx, c.who, c.key) },
		},
	}
}
