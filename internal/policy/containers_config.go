package policy

import (
	"fmt"
	"path"
	"strings"
)

// ContainerSettings is the config file's [containers] table: whether
// hostqosd looks for the containers on the host (docs/containers.md), and
// where. Read when the daemon starts, like Settings.
type ContainerSettings struct {
	// Disabled is enabled = false: hostqosd does not look for
	// containers (container selectors then match nothing and containers'
	// traffic is the host's). By default it does.
	Disabled bool
	// Netns are globs of /run/netns entries that are containers too
	// (plain network-namespace containers; none by default: a named
	// namespace is not necessarily a container).
	Netns []string
	// DockerSocket and PodmanSocket are the runtimes' API sockets, asked
	// for names, images and labels ("" = the runtime's default; "-" =
	// do not ask).
	DockerSocket, PodmanSocket string
	// Preload (with PreloadSet; unset: automatic) verifies the
	// container classifiers at start, in the background, rather than
	// when the first container is found (which would wait for the
	// verifier). Automatic: where containers are expected (the daemon
	// runs in the host's network namespace and a runtime is installed).
	PreloadSet, Preload bool
}

// containersKey is the config file's [containers] table.
const containersKey = "containers"

// containersKeys are the keys of the [containers] table.
var containersKeys = []string{"enabled", "netns", "docker_socket", "podman_socket", "preload"}

// MaxNetnsGlobs bounds [containers] netns.
const MaxNetnsGlobs = 64

// containers decodes the [containers] table of raw into p.Containers
// (the zero value, the defaults, when it is absent).
func (ld *loader) containers(raw map[string]any, p *Policy) {
	v, ok := raw[containersKey]
	if !ok {
		return
	}
	m, ok := v.(map[string]any)
	if !ok {
		ld.fail("", containersKey, ld.loc[keyLoc{"", -1, containersKey}], nil, "want a table", "write it as a [containers] section, with single brackets")
		return
	}
	line := func(k string) int { return ld.loc[keyLoc{containersKey, -1, k}] }
	for _, k := range sortedKeys(m) {
		switch v := m[k]; k {
		case "enabled":
			b, ok := v.(bool)
			if !ok {
				ld.fail(containersKey, k, line(k), v, "want true or false, got "+tomlType(v), "")
				continue
			}
			p.Containers.Disabled = !b
		case "preload":
			b, ok := v.(bool)
			if !ok {
				ld.fail(containersKey, k, line(k), v, "want true or false, got "+tomlType(v), "leave it out for the default (when hostqosd runs in the host's network namespace and a runtime is installed)")
				continue
			}
			p.Containers.PreloadSet, p.Containers.Preload = true, b
		case "netns":
			list, ok := v.([]any)
			if !ok {
				ld.fail(containersKey, k, line(k), v, "want a list of globs, got "+tomlType(v), `write e.g. netns = ["ctr-*"]`)
				continue
			}
			if len(list) > MaxNetnsGlobs {
				ld.fail(containersKey, k, line(k), nil, fmt.Sprintf("%d globs, at most %d", len(list), MaxNetnsGlobs), "")
				continue
			}
			for _, g := range list {
				s, ok := g.(string)
				if _, err := path.Match(s, ""); !ok || err != nil || s == "" || len(s) > MaxNameComponent || strings.Contains(s, "/") {
					ld.fail(containersKey, k, line(k), g, "not a glob of a /run/netns name", `write e.g. "ctr-*"`)
					continue
				}
				p.Containers.Netns = append(p.Containers.Netns, s)
			}
		case "docker_socket", "podman_socket":
			s, ok := v.(string)
			if !ok || (s != "-" && !strings.HasPrefix(s, "/")) || len(s) > MaxPathLen {
				ld.fail(containersKey, k, line(k), v, "want the absolute path of a Unix socket, or \"-\" not to ask the runtime", "")
				continue
			}
			if k == "docker_socket" {
				p.Containers.DockerSocket = s
			} else {
				p.Containers.PodmanSocket = s
			}
		default:
			ld.unknownKey(containersKey, k, line(k), containersKeys)
		}
	}
}
