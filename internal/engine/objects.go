package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/hostqos/hostqos/internal/store"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/policy"
)

// objKind describes a kind of named policy object (class, rule) for the
// generic add/set/remove changes: how to find it in a policy, which
// overlay map holds it, and its blank value (with "unset" sentinels, since
// DSCP 0 is a real mark).
type objKind[T any] struct {
	name      string
	find      func(*policy.Policy, string) (T, bool)
	layer     func(*store.Overlay) map[string]*T
	blank     func() T
	nameOf    func(*T) *string
	canRemove func(temp *store.Overlay, name string) error
	// prepare fills what the input left unset (a class's DSCP and
	// priority), as the config file does; may be nil.
	prepare func(*T)
	// admit is the kind's admission beyond the policy's, run under the
	// engine's lock on the object as it would be stored (a reservation's
	// M against the links' MTUs); may be nil.
	admit func(e *Engine, obj T) error
}

var classKind = objKind[policy.Class]{
	name:    "class",
	find:    (*policy.Policy).Class,
	layer:   func(o *store.Overlay) map[string]*policy.Class { return o.Classes },
	blank:   func() policy.Class { return policy.NewClass("") },
	nameOf:  func(c *policy.Class) *string { return &c.Name },
	prepare: (*policy.Class).FillDefaults,
}

var ruleKind = objKind[policy.Rule]{
	name:   "rule",
	find:   (*policy.Policy).Rule,
	layer:  func(o *store.Overlay) map[string]*policy.Rule { return o.Rules },
	blank:  func() policy.Rule { return policy.NewRule("") },
	nameOf: func(r *policy.Rule) *string { return &r.Name },
	canRemove: func(temp *store.Overlay, name string) error {
		for _, run := range temp.Runs {
			if run.Rule == name {
				return &BadRequestError{fmt.Errorf("rule %q belongs to a running `hostqos run` (pid %d); it goes away when the program ends", name, run.PID)}
			}
		}
		return nil
	},
}

// AddClass adds a class (temporary: until the daemon stops); an existing
// name is a *ConflictError. It returns the class as added.
func (e *Engine) AddClass(ctx context.Context, who Caller, c policy.Class, temporary bool) (policy.Class, error) {
	return add(ctx, e, who, classKind, c, temporary)
}

// SetClass changes the fields of class name given in patch (a JSON object).
func (e *Engine) SetClass(ctx context.Context, who Caller, name string, patch []byte, temporary bool) (policy.Class, error) {
	return set(ctx, e, who, classKind, name, patch, temporary)
}

// RemoveClass removes a class.
func (e *Engine) RemoveClass(ctx context.Context, who Caller, name string) error {
	return remove(ctx, e, who, classKind, name)
}

// AddRule adds a rule (temporary: until the daemon stops); an existing name
// is a *ConflictError.
func (e *Engine) AddRule(ctx context.Context, who Caller, r policy.Rule, temporary bool) (policy.Rule, error) {
	return add(ctx, e, who, ruleKind, r, temporary)
}

// SetRule changes the fields of rule name given in patch (a JSON object).
func (e *Engine) SetRule(ctx context.Context, who Caller, name string, patch []byte, temporary bool) (policy.Rule, error) {
	if err := e.refusePodRule(name); err != nil {
		return policy.Rule{}, err
	}
	return set(ctx, e, who, ruleKind, name, patch, temporary)
}

// RemoveRule removes a rule; the rule of a run goes with its run only, a
// Kubernetes pod's with the pod's annotations.
func (e *Engine) RemoveRule(ctx context.Context, who Caller, name string) error {
	if err := e.refusePodRule(name); err != nil {
		return err
	}
	return remove(ctx, e, who, ruleKind, name)
}

// add creates an object; an existing name is a conflict.
func add[T any](ctx context.Context, e *Engine, who Caller, k objKind[T], obj T, tmp bool) (T, error) {
	if err := who.MayChange(); err != nil {
		return obj, err
	}
	if k.prepare != nil {
		k.prepare(&obj)
	}
	name := *k.nameOf(&obj)
	err := e.change(ctx, "api", func(persist, temp *store.Overlay, eff *policy.Policy) error {
		if _, ok := k.find(eff, name); ok && name != "" {
			return &ConflictError{What: k.name, Name: name}
		}
		ov := persist
		if tmp {
			ov = temp
		}
		k.layer(ov)[name] = &obj
		return nil
	})
	if err == nil {
		e.publishChange(k.name, "added", name, nil)
	}
	return obj, err
}

// set changes the fields given in patch (a JSON object over the object). A
// change to an object from the config file is kept as an override; one of a
// temporary object stays temporary.
func set[T any](ctx context.Context, e *Engine, who Caller, k objKind[T], name string, patch []byte, tmp bool) (T, error) {
	var out T
	if err := who.MayChange(); err != nil {
		return out, err
	}
	err := e.change(ctx, "api", func(persist, temp *store.Overlay, eff *policy.Policy) error {
		cur, ok := k.find(eff, name)
		if !ok {
			return &NotFoundError{What: k.name, Name: name}
		}
		n := k.blank()
		if err := PatchJSON(cur, patch, &n); err != nil {
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
	if err == nil {
		e.publishChange(k.name, "modified", name, nil)
	}
	return out, err
}

// put adds obj, or replaces the object of its name whole (an upsert, for
// in-process front doors that own their objects); created says which.
// Validation and admission are add's and set's, in one change: a refusal
// changes nothing. A replaced object keeps its layer as with set (one from
// the config file is kept as an override; a temporary one stays
// temporary); a new one goes to the temporary overlay when tmp.
func put[T any](ctx context.Context, e *Engine, who Caller, k objKind[T], obj T, tmp bool) (out T, created bool, err error) {
	if err := who.MayChange(); err != nil {
		return obj, false, err
	}
	if k.prepare != nil {
		k.prepare(&obj)
	}
	name := *k.nameOf(&obj)
	err = e.change(ctx, "api", func(persist, temp *store.Overlay, eff *policy.Policy) error {
		_, exists := k.find(eff, name)
		if k.admit != nil {
			if err := k.admit(e, obj); err != nil {
				return err
			}
		}
		ov := persist
		if _, inTemp := k.layer(temp)[name]; tmp || inTemp {
			ov = temp
		}
		k.layer(ov)[name] = &obj
		created = !exists
		return nil
	})
	if err != nil {
		return obj, false, err
	}
	return obj, created, nil
}

// remove deletes an object from the overlays and, when the config file
// defines it, hides it with a tombstone.
func remove[T any](ctx context.Context, e *Engine, who Caller, k objKind[T], name string) error {
	if err := who.MayChange(); err != nil {
		return err
	}
	err := e.change(ctx, "api", func(persist, temp *store.Overlay, eff *policy.Policy) error {
		if _, ok := k.find(eff, name); !ok {
			return &NotFoundError{What: k.name, Name: name}
		}
		if k.canRemove != nil {
			if err := k.canRemove(temp, name); err != nil {
				return err
			}
		}
		delete(k.layer(temp), name)
		if _, inBase := k.find(e.base, name); inBase {
			k.layer(persist)[name] = nil
		} else {
			delete(k.layer(persist), name)
		}
		return nil
	})
	if err == nil {
		e.publishChange(k.name, "removed", name, nil)
	}
	return err
}

// RemoveLink stops managing a link.
func (e *Engine) RemoveLink(ctx context.Context, who Caller, name string) error {
	if err := who.MayChange(); err != nil {
		return err
	}
	err := e.change(ctx, "api", func(persist, temp *store.Overlay, eff *policy.Policy) error {
		if !hasLink(eff, name) {
			return &NotFoundError{What: "link", Name: name}
		}
		delete(temp.Links, name)
		persist.Links[name] = nil
		if !hasLink(e.base, name) {
			delete(persist.Links, name)
		}
		return nil
	})
	if err == nil {
		e.publishChange("link", "removed", name, nil)
	}
	return err
}

// pathOf is the path of the object name under an api.Route* pattern.
func pathOf(route, name string) string {
	_, p, _ := strings.Cut(route, " ")
	if i := strings.Index(p, "{"); i >= 0 {
		p = p[:i] + name
	}
	return p
}

func hasLink(p *policy.Policy, name string) bool {
	_, ok := p.Link(name)
	return ok
}

// Classes lists the classes with where each came from; name, if not "",
// picks one (a *NotFoundError if there is none).
func (e *Engine) Classes(name string) ([]api.ClassInfo, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []api.ClassInfo
	for _, c := range e.eff.Policy.Classes {
		if name != "" && c.Name != name {
			continue
		}
		out = append(out, api.ClassInfo{Class: c, Source: e.eff.Sources["class/"+c.Name]})
	}
	if name != "" && len(out) == 0 {
		return nil, &NotFoundError{What: "class", Name: name}
	}
	return out, nil
}

// Rules lists the rules the caller may see, in evaluation order, with
// their source, slot and what their app selectors resolved to; name, if
// not "", picks one (a *NotFoundError if there is none the caller sees).
func (e *Engine) Rules(who Caller, name string) ([]api.RuleInfo, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	hidden := e.hiddenRulesLocked(who)
	var out []api.RuleInfo
	p := e.eff.Policy
	if len(e.pods) > 0 {
		// The pods' rules in their place in the evaluation order.
		q := *p
		q.Rules = append(append(make([]policy.Rule, 0, len(p.Rules)+len(e.pods)), p.Rules...), e.podRulesLocked()...)
		p = &q
	}
	for _, ru := range p.OrderedRules() {
		if (name != "" && ru.Name != name) || hidden[ru.Name] {
			continue
		}
		ri := api.RuleInfo{Rule: ru, Source: e.eff.Sources["rule/"+ru.Name], Slot: -1}
		if _, ok := e.podOfRuleLocked(ru.Name); ok {
			ri.Source = PodSource
		}
		if s, ok := e.slots.Rules[ru.Name]; ok {
			ri.Slot = s
		}
		if e.desired != nil {
			ri.Resolved = e.desired.Resolved[ru.Name]
		}
		e.quotaStatusLocked(ru, &ri)
		out = append(out, ri)
	}
	if name != "" && len(out) == 0 {
		return nil, &NotFoundError{What: "rule", Name: name}
	}
	return out, nil
}

// Decode decodes a request body strictly, as one JSON object (see
// policy.DecodeJSONObject): unknown fields, values of the wrong kind and
// anything but an object are field errors (source "api") naming the field.
// A value with a Check method (api.RunRequest) is then checked. Other
// failures are a *BadRequestError about the body.
func Decode(b []byte, v any) error {
	kind := "request"
	switch v.(type) {
	case *api.RunRequest:
		kind = "run"
	case *policy.Link:
		kind = "link"
	}
	if err := policy.CheckJSONObject(b, kind); err != nil {
		return fromAPI(err)
	}
	var err error
	if _, ok := v.(json.Unmarshaler); ok {
		err = json.Unmarshal(b, v) // the type decodes itself strictly
	} else {
		err = policy.DecodeJSONObject(b, v, kind, nil)
	}
	if err != nil {
		return fromAPI(err)
	}
	if c, ok := v.(interface{ Check() error }); ok {
		return fromAPI(c.Check())
	}
	return nil
}

// fromAPI marks the FieldErrors in err as coming from the API and returns
// err; other errors become a *BadRequestError about the body.
func fromAPI(err error) error {
	if err == nil {
		return nil
	}
	if fes := policy.AsErrors(err); fes != nil {
		for _, fe := range fes {
			if fe.Source == "" {
				fe.Source = "api"
			}
		}
		return fes
	}
	var br *BadRequestError
	if errors.As(err, &br) {
		return err
	}
	return &BadRequestError{fmt.Errorf("decode request body: %w", err)}
}

// PatchJSON lays the JSON object in patch over cur (any struct) into out,
// decoding the result as strictly as Decode.
func PatchJSON(cur any, patch []byte, out any) error {
	base, err := json.Marshal(cur)
	if err != nil {
		return err
	}
	m := map[string]json.RawMessage{}
	if err := json.Unmarshal(base, &m); err != nil {
		return err
	}
	if err := policy.CheckJSONObject(patch, "change"); err != nil {
		return fromAPI(err)
	}
	pm := map[string]json.RawMessage{}
	if err := json.Unmarshal(patch, &pm); err != nil {
		return &BadRequestError{fmt.Errorf("decode request body: %w", err)}
	}
	for k, v := range pm {
		if k == "name" {
			return &BadRequestError{errors.New("decode request body: the name cannot be changed; remove and add instead")}
		}
		if string(v) == "null" {
			delete(m, k)
			continue
		}
		m[k] = v
	}
	merged, err := json.Marshal(m)
	if err != nil {
		return err
	}
	return Decode(merged, out)
}
