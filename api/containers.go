package api

import "context"

// Container is a container hostqosd found on the host
// (docs/containers.md): its runtime (docker, podman, containerd, or netns
// for a named network namespace declared a container), id, name, image and
// labels; where its traffic is seen (the host-side ends of its veths, or
// the host's own network); and the rules that select it.
type Container struct {
	Runtime     string            `json:"runtime"`
	ID          string            `json:"id"`
	Name        string            `json:"name"`
	Image       string            `json:"image,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Cgroup      string            `json:"cgroup,omitempty"`
	HostNetwork bool              `json:"host_network,omitempty"`
	// Veths are the host-side interfaces its traffic is classified at.
	Veths []string `json:"veths,omitempty"`
	// Rules are the rules whose container selectors match it, in policy
	// order (the first whose other selectors match a flow wins).
	Rules []string `json:"rules,omitempty"`
	// Seen says whether its traffic can be told from the host's: false
	// for a container on the host's network without a cgroup of its own.
	Seen bool `json:"seen"`
}

// Containers lists the containers the daemon found, sorted by runtime and
// name. Only root and the hostqos group may list them.
func (c *Client) Containers(ctx context.Context) ([]Container, error) {
	var out []Container
	err := c.call(ctx, RouteContainers, nil, nil, &out, nil)
	return out, err
}
