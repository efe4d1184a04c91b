package main

import (
	"context"
	"fmt"
	"io"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/policy"
)

// classFlags is the flag table of class add and class set.
func classFlags() fieldFlags {
	return fieldFlags{
		{"dscp", "dscp", "DSCP mark: a name (EF, AF41, CS1 …) or 0-63", dscpValue().noClear()},
		{"priority", "priority", fmt.Sprintf("scheduling priority 0 (first) … %d (last)", policy.MaxPriority),
			intValue(0, policy.MaxPriority, fmt.Sprintf("want 0 (first) … %d (last)", policy.MaxPriority)).noClear()},
		{"minbw", "minbw", "guaranteed rate on every shaped link, e.g. 2mbit (\"0\" to clear)", rateValue().zeroClears()},
		{"maxbw", "maxbw", "ceiling on every shaped link, e.g. 50mbit (\"0\" to clear)", rateValue().zeroClears()},
		{"user-allowed", "user_allowed", "true: ordinary users may run their programs in this class", boolValue().noClear()},
	}
}

func newClassCmd(f *factory) *cobra.Command {
	class := &cobra.Command{
		Use:   "class",
		Short: "Manage service classes (DSCP mark, priority, guaranteed share, ceiling)",
		Long: `A class is a named service level: the DSCP mark its packets leave with, its
scheduling priority, and optionally a guaranteed rate (minbw) and a ceiling
(maxbw) on every shaped link. The defaults follow DiffServ, each mark asking
the network for what its priority gives on the host: voice (EF, 0),
interactive (AF41, 1), default (CS0, 2), bulk (LE, 4), scavenger (LE, 7).
Traffic no rule matches goes to class default without being re-marked.`,
	}

	list := getCmd(f, "list", "List classes", cobra.NoArgs,
		func(ctx context.Context, c apiClient, _ []string) ([]api.ClassInfo, error) {
			return c.Classes().List(ctx)
		},
		printClasses)
	show := getCmd(f, "show NAME", "Show one class", cobra.ExactArgs(1),
		func(ctx context.Context, c apiClient, a []string) (api.ClassInfo, error) {
			return c.Classes().Get(ctx, a[0])
		},
		func(w io.Writer, c api.ClassInfo) { printClasses(w, []api.ClassInfo{c}) })
	rm := removeCmd(f, "class", "Remove a class (rules using it must go first; class default cannot be removed)",
		func(ctx context.Context, c apiClient, name string) error { return c.Classes().Remove(ctx, name) })
	class.AddCommand(list, show, newClassAddCmd(f), newClassSetCmd(f), rm)
	return class
}

// classChange is class add (add) or class set.
func classChange(add bool) objectChange {
	c := objectChange{kind: "class", add: add, table: classFlags, temp: "change",
		to: func(c apiClient) changeAPI { return c.Classes() }}
	if !add {
		c.check = someField("nothing to change: give at least one of --dscp, --priority, --minbw, --maxbw, --user-allowed")
		return c
	}
	c.check = func(p api.Fields) error {
		if _, ok := p["dscp"]; !ok {
			return usagef("flag --dscp is required for a new class (e.g. --dscp AF21)")
		}
		if _, ok := p["priority"]; !ok {
			p["priority"] = 3
		}
		return nil
	}
	return c
}

func newClassAddCmd(f *factory) *cobra.Command {
	return changeCmd(f, &cobra.Command{
		Use:     "add NAME --dscp D [--priority N] [--minbw RATE] [--maxbw RATE]",
		Short:   "Add a class",
		Example: "  hostqos class add backup --dscp LE --priority 6 --maxbw 50mbit",
	}, classChange(true))
}

func newClassSetCmd(f *factory) *cobra.Command {
	return changeCmd(f, &cobra.Command{
		Use:     "set NAME [--dscp D] [--priority N] [--minbw RATE] [--maxbw RATE]",
		Short:   "Change a class; only the flags given change",
		Example: "  hostqos class set voice --minbw 2mbit",
	}, classChange(false))
}

func printClasses(w io.Writer, cs []api.ClassInfo) {
	var rows [][]string
	for _, ci := range cs {
		c := ci.Class
		minbw, maxbw := "-", "-"
		if c.MinBW > 0 {
			minbw = c.MinBW.String()
		}
		if c.MaxBW > 0 {
			maxbw = c.MaxBW.String()
		}
		rows = append(rows, []string{c.Name, c.DSCP.String(), strconv.Itoa(c.Priority), minbw, maxbw,
			strconv.FormatBool(c.UserAllowed), ci.Source})
	}
	table(w, []string{"CLASS", "DSCP", "PRIO", "MINBW", "MAXBW", "USERS", "SOURCE"}, rows)
}
