package policy

import (
	"fmt"
	"strings"
)

// Mutations used by the API. Each returns a NEW policy (a deep copy of p
// with the change) and leaves p untouched, so the caller can Validate and
// Admit the result and then swap it in, or drop it (all or nothing). They
// check only names (unknown → ErrNotFound, duplicate → ErrExists, as a
// *NameError); everything else is Validate's job.

func notFound(kind, name string) error {
	return &NameError{Kind: kind, Name: name, Err: ErrNotFound, Hint: "see hostqos " + kind + " list"}
}

func exists(kind, name string) error {
	return &NameError{Kind: kind, Name: name, Err: ErrExists, Hint: "choose another name or change the existing " + kind}
}

// AddRule appends r. It fails if a rule of that name exists.
func (p *Policy) AddRule(r Rule) (*Policy, error) {
	if _, ok := p.Rule(r.Name); ok {
		return nil, exists("rule", r.Name)
	}
	q := p.Clone()
	q.Rules = append(q.Rules, r)
	return q, nil
}

// SetRule applies fn to the named rule in a copy of p. fn may rename it.
func (p *Policy) SetRule(name string, fn func(*Rule)) (*Policy, error) {
	q := p.Clone()
	for i := range q.Rules {
		if q.Rules[i].Name == name {
			fn(&q.Rules[i])
			return q, nil
		}
	}
	return nil, notFound("rule", name)
}

// RemoveRule deletes the named rule.
func (p *Policy) RemoveRule(name string) (*Policy, error) {
	q := p.Clone()
	for i := range q.Rules {
		if q.Rules[i].Name == name {
			q.Rules = append(q.Rules[:i], q.Rules[i+1:]...)
			return q, nil
		}
	}
	return nil, notFound("rule", name)
}

// AddClass appends c, filling an unset DSCP or priority (NoDSCP,
// NoPriority) as Normalize does. It fails if a class of that name exists.
func (p *Policy) AddClass(c Class) (*Policy, error) {
	if _, ok := p.Class(c.Name); ok && c.Name != "" {
		return nil, exists("class", c.Name)
	}
	c.fillDefaults()
	q := p.Clone()
	q.Classes = append(q.Classes, c)
	return q, nil
}

// SetClass applies fn to the named class in a copy of p.
func (p *Policy) SetClass(name string, fn func(*Class)) (*Policy, error) {
	q := p.Clone()
	for i := range q.Classes {
		if q.Classes[i].Name == name {
			fn(&q.Classes[i])
			q.Classes[i].fillDefaults()
			return q, nil
		}
	}
	return nil, notFound("class", name)
}

// RemoveClass deletes the named class. Class default cannot be removed, and
// a class that rules use cannot be removed until they change.
func (p *Policy) RemoveClass(name string) (*Policy, error) {
	if name == DefaultClassName {
		return nil, &FieldError{Source: "api", Object: objectLabel("class", name, 0),
			Reason: "class default cannot be removed", Fix: "change it with hostqos class set instead"}
	}
	var users []string
	for _, r := range p.Rules {
		if r.Class == name {
			users = append(users, r.Name)
		}
	}
	if len(users) > 0 {
		return nil, &FieldError{Source: "api", Object: objectLabel("class", name, 0),
			Reason: fmt.Sprintf("in use by rule %s", strings.Join(users, ", ")), Fix: "move or remove those rules first"}
	}
	q := p.Clone()
	for i := range q.Classes {
		if q.Classes[i].Name == name {
			q.Classes = append(q.Classes[:i], q.Classes[i+1:]...)
			return q, nil
		}
	}
	return nil, notFound("class", name)
}

// AddLink appends l. It fails if the link is already managed.
func (p *Policy) AddLink(l Link) (*Policy, error) {
	if _, ok := p.Link(l.Name); ok {
		return nil, exists("link", l.Name)
	}
	q := p.Clone()
	q.Links = append(q.Links, l)
	return q, nil
}

// SetLink applies fn to the named link in a copy of p, adding the link
// (starting from Link{Name: name}) if it is not there yet: an upsert.
func (p *Policy) SetLink(name string, fn func(*Link)) (*Policy, error) {
	q := p.Clone()
	for i := range q.Links {
		if q.Links[i].Name == name {
			fn(&q.Links[i])
			return q, nil
		}
	}
	l := Link{Name: name}
	fn(&l)
	q.Links = append(q.Links, l)
	return q, nil
}

// RemoveLink stops managing the named link.
func (p *Policy) RemoveLink(name string) (*Policy, error) {
	q := p.Clone()
	for i := range q.Links {
		if q.Links[i].Name == name {
			q.Links = append(q.Links[:i], q.Links[i+1:]...)
			return q, nil
		}
	}
	return nil, notFound("link", name)
}
