package engine

import "github.com/hostqos/hostqos/internal/policy"

// What front doors outside the engine (the RSVP front door,
// internal/rsvpfront) read of it beside the policy objects.

// RSVPSettings are the config file's [rsvp] table as read at New.
func (e *Engine) RSVPSettings() policy.RSVP {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.base.RSVP
}

// ContainerSettings is the config file's [containers] table (read when
// the daemon starts).
func (e *Engine) ContainerSettings() policy.ContainerSettings {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.base.Containers
}

// KubernetesSettings is the config file's [kubernetes] table (read when
// the daemon starts).
func (e *Engine) KubernetesSettings() policy.KubernetesSettings {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.base.Kubernetes
}

// WebSettings is the config file's [web] table, as the engine last read
// it.
func (e *Engine) WebSettings() policy.WebSettings {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.base.Web
}

// ManagedIfindexes are the interfaces of the managed links set up now.
func (e *Engine) ManagedIfindexes() []int {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]int, 0, len(e.links))
	for _, i := range e.links {
		out = append(out, i)
	}
	return out
}

// LinkOfIfindex is the managed link set up on ifindex, if any.
func (e *Engine) LinkOfIfindex(ifindex int) (string, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for name, i := range e.links {
		if i == ifindex {
			return name, true
		}
	}
	return "", false
}
