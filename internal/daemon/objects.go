package daemon

import (
	"fmt"
	"net/http"

	"github.com/hostqos/hostqos/internal/policy"
)

// objKind describes a kind of named policy object (class, rule) for the
// generic add/set/remove handlers: how to find it in a policy, which
// overlay map holds it, and its blank value (with "unset" sentinels, since
// DSCP 0 is a real mark).
type objKind[T any] struct {
	name      string
	find      func(*policy.Policy, string) (T, bool)
	layer     func(*overlay) map[string]*T
	blank     func() T
	nameOf    func(*T) *string
	canRemove func(temp *overlay, name string) error
	// prepare fills what the input left unset (a class's DSCP and
	// priority), as the config file does; may be nil.
	prepare func(*T)
}

var classKind = objKind[policy.Class]{
	name:    "class",
	find:    (*policy.Policy).Class,
	layer:   func(o *overlay) map[string]*policy.Class { return o.Classes },
	blank:   func() policy.Class { return policy.Class{DSCP: policy.NoDSCP, Priority: policy.NoPriority} },
	nameOf:  func(c *policy.Class) *string { return &c.Name },
	prepare: (*policy.Class).FillDefaults,
}

var ruleKind = objKind[policy.Rule]{
	name:   "rule",
	find:   (*policy.Policy).Rule,
	layer:  func(o *overlay) map[string]*policy.Rule { return o.Rules },
	blank:  newRule,
	nameOf: func(r *policy.Rule) *string { return &r.Name },
	canRemove: func(temp *overlay, name string) error {
		for _, run := range temp.Runs {
			if run.Rule == name {
				return &badRequest{fmt.Errorf("rule %q belongs to a running `hostqos run` (pid %d); it goes away when the program ends", name, run.PID)}
			}
		}
		return nil
	},
}

func newRule() policy.Rule { return policy.Rule{DSCP: policy.NoDSCP, DSCPIn: policy.NoDSCP} }

// handleAdd creates an object; an existing name is a conflict.
func handleAdd[T any](d *Daemon, k objKind[T]) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		obj := k.blank()
		if err := decode(r, &obj); err != nil {
			writeErr(w, err)
			return
		}
		if k.prepare != nil {
			k.prepare(&obj)
		}
		name := *k.nameOf(&obj)
		tmp := temporary(r)
		err := d.changeFor(r, "api", func(persist, temp *overlay, eff *policy.Policy) error {
			if _, ok := k.find(eff, name); ok && name != "" {
				return &conflict{what: k.name, name: name}
			}
			ov := persist
			if tmp {
				ov = temp
			}
			k.layer(ov)[name] = &obj
			return nil
		})
		if err != nil {
			writeErr(w, err)
			return
		}
		writeJSON(w, http.StatusCreated, obj)
	}
}

// handleSet changes the fields given in the body (a JSON patch over the
// object). A change to an object from the config file is kept as an
// override; one of a temporary object stays temporary.
func handleSet[T any](d *Daemon, k objKind[T]) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("name")
		body, err := readBody(r)
		if err != nil {
			writeErr(w, err)
			return
		}
		tmp := temporary(r)
		var out T
		err = d.changeFor(r, "api", func(persist, temp *overlay, eff *policy.Policy) error {
			cur, ok := k.find(eff, name)
			if !ok {
				return &notFoundError{what: k.name, name: name}
			}
			n := k.blank()
			if err := patchJSON(cur, body, &n); err != nil {
				return err
			}
			*k.nameOf(&n) = name
			if k.prepare != nil {
				k.prepare(&n)
			}
			ov := persist
			if _, inTemp := k.layer(temp)[name]; tmp || inTemp {
				ov = temp
			}
			k.layer(ov)[name] = &n
			out = n
			return nil
		})
		if err != nil {
			writeErr(w, err)
			return
		}
		writeJSON(w, http.StatusOK, out)
	}
}

// handleRemove deletes an object from the overlays and, when the config
// file defines it, hides it with a tombstone.
func handleRemove[T any](d *Daemon, k objKind[T]) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("name")
		err := d.changeFor(r, "api", func(persist, temp *overlay, eff *policy.Policy) error {
			if _, ok := k.find(eff, name); !ok {
				return &notFoundError{what: k.name, name: name}
			}
			if k.canRemove != nil {
				if err := k.canRemove(temp, name); err != nil {
					return err
				}
			}
			delete(k.layer(temp), name)
			if _, inBase := k.find(d.base, name); inBase {
				k.layer(persist)[name] = nil
			} else {
				delete(k.layer(persist), name)
			}
			return nil
		})
		if err != nil {
			writeErr(w, err)
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"removed": name})
	}
}
