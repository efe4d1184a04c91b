package engine

import (
	"maps"
	"slices"

	"github.com/hostqos/hostqos/internal/policy"
	"github.com/hostqos/hostqos/internal/store"
)

// The zero-configuration start: while the policy manages no link, the
// engine manages the interfaces of the default routes (the kernel's
// DefaultRouteLinks) to count and mark their traffic — no rate, so no
// shaping — so that a fresh install shows traffic at once. Their source
// is "auto"; the first link the policy manages replaces them, and
// auto_links = "off" turns the choice off. Each sync chooses again (a
// default route that comes later is taken at the next one).

// SourceAuto is the source of a link the engine chose itself.
const SourceAuto = "auto"

// defaultRouter is the kernel's side of the choice.
type defaultRouter interface {
	DefaultRouteLinks() ([]string, error)
}

// withAutoLinksLocked is m with the automatic links: its own links but
// those chosen before, or, when it has none, the default routes'
// interfaces (base's settings allowing).
func (e *Engine) withAutoLinksLocked(m store.Merged, base *policy.Policy) store.Merged {
	var own []policy.Link
	for _, l := range m.Policy.Links {
		if m.Sources["link/"+l.Name] != SourceAuto {
			own = append(own, l)
		}
	}
	var names []string
	if len(own) == 0 && base != nil && base.Settings.AutoLinks != policy.AutoLinksOff {
		if dr, ok := e.k.(defaultRouter); ok && e.k != nil {
			var err error
			if names, err = dr.DefaultRouteLinks(); err != nil {
				e.log.Debug("find the default routes' interfaces", "err", err)
			}
		}
	}
	if len(own) == len(m.Policy.Links) && len(names) == 0 {
		e.autoChosen = nil
		return m
	}
	p := *m.Policy
	p.Links = own
	src := maps.Clone(m.Sources)
	for name, s := range src {
		if s == SourceAuto {
			delete(src, name)
		}
	}
	for _, n := range names {
		p.Links = append(p.Links, policy.Link{Name: n})
		src["link/"+n] = SourceAuto
	}
	if !slices.Equal(names, e.autoChosen) && len(names) > 0 {
		e.log.Info("no link managed: managing the default routes' interfaces to count and mark their traffic (auto_links)", "links", names)
	}
	e.autoChosen = names
	m.Policy, m.Sources = &p, src
	return m
}
