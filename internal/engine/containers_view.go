package engine

import (
	"cmp"
	"slices"
	"strconv"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/derive"
)

// ContainerList is what `hostqos container list` shows: every container
// found, with the rules whose container selectors match it (and its
// Kubernetes pod's rule). Containers are
// the host's business (names, images and labels say what runs on it): only
// root and the hostqos group may list them.
func (e *Engine) ContainerList(who Caller) ([]api.Container, error) {
	if !who.Privileged {
		return nil, &ForbiddenError{Why: "listing the host's containers needs root or membership of group hostqos"}
	}
	e.mu.Lock()
	cs := slices.Clone(e.containers)
	rules := slices.Clone(e.eff.Policy.Rules)
	podRule := make(map[string]string, len(e.pods)) // pod UID -> its rule
	for k, p := range e.pods {
		podRule[p.UID] = derive.PodPrefix + k
	}
	e.mu.Unlock()
	out := make([]api.Container, 0, len(cs))
	for _, c := range cs {
		a := api.Container{Runtime: c.Runtime, ID: c.ID, Name: c.Name, Image: c.Image, Labels: c.Labels,
			Cgroup: c.Cgroup, HostNetwork: c.HostNetwork, Seen: c.Seen()}
		for i, v := range c.Veths {
			name := ""
			if i < len(c.VethNames) {
				name = c.VethNames[i]
			}
			a.Veths = append(a.Veths, cmp.Or(name, "#"+strconv.Itoa(v)))
		}
		for _, r := range rules {
			if r.HasContainerSelector() && r.ContainerSelector().Matches(c.ID, c.Name, c.Image, c.Labels) {
				a.Rules = append(a.Rules, r.Name)
			}
		}
		if r, ok := podRule[c.PodUID]; ok && c.PodUID != "" {
			a.Rules = append(a.Rules, r)
		}
		out = append(out, a)
	}
	slices.SortFunc(out, func(a, b api.Container) int {
		return cmp.Or(cmp.Compare(a.Runtime, b.Runtime), cmp.Compare(a.Name, b.Name), cmp.Compare(a.ID, b.ID))
	})
	return out, nil
}
