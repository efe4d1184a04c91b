package main

import (
	"context"
	"io"
	"sort"
	"strings"

	"github.com/spf13/cobra"

	"github.com/hostqos/hostqos/api"
)

// hostqos container: the containers hostqosd found (docs/containers.md).

const noContainerHint = `No containers found. hostqosd finds Docker, Podman and containerd containers
whose network reaches this host's namespace (by a veth, or sharing it), and the
named network namespaces [containers] netns lists; see docs/containers.md.`

func newContainerCmd(f *factory) *cobra.Command {
	c := &cobra.Command{Use: "container", Short: "The containers hostqosd found, and the rules that select them"}
	list := getCmd(f, "list", "List the containers found on the host: runtime, name, image, veths and the rules that select each (root or group hostqos)", cobra.NoArgs,
		func(ctx context.Context, c apiClient, _ []string) ([]api.Container, error) {
			return c.Containers(ctx)
		},
		orHint(noContainerHint, printContainers))
	list.Example = "  hostqos container list\n  hostqos container list -o json\n  hostqos rule add db --container db --minbw 20mbit"
	c.AddCommand(list)
	return c
}

func printContainers(w io.Writer, cs []api.Container) {
	var rows [][]string
	for _, c := range cs {
		net := strings.Join(c.Veths, ",")
		switch {
		case c.HostNetwork:
			net = "host"
		case net == "":
			net = "-"
		}
		if !c.Seen {
			net += " (not told apart)"
		}
		id := c.ID
		if len(id) > 12 {
			id = id[:12]
		}
		rules := strings.Join(c.Rules, ",")
		if rules == "" {
			rules = "-"
		}
		rows = append(rows, []string{c.Runtime, c.Name, id, orDash(c.Image), labelList(c.Labels), net, rules})
	}
	table(w, []string{"RUNTIME", "NAME", "ID", "IMAGE", "LABELS", "NETWORK", "RULES"}, rows)
}

// labelList is labels as k=v,… in key order, "-" for none; long lists
// are cut (-o json has them all).
func labelList(ls map[string]string) string {
	if len(ls) == 0 {
		return "-"
	}
	keys := make([]string, 0, len(ls))
	for k := range ls {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for i, k := range keys {
		if i == 3 {
			parts = append(parts, "…")
			break
		}
		parts = append(parts, k+"="+ls[k])
	}
	return strings.Join(parts, ",")
}
