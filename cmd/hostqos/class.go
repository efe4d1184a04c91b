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

// classFlags are the property flags of class add/set.
type classFlags struct {
	dscp, priority, minbw, maxbw string
	userAllowed                  string
	temp                         bool
}

func (f *classFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.dscp, "dscp", "", "DSCP mark: a name (EF, AF41, CS1 …) or 0-63")
	cmd.Flags().StringVar(&f.priority, "priority", "", "scheduling priority 0 (first) … 7 (last)")
	cmd.Flags().StringVar(&f.minbw, "minbw", "", "guaranteed rate on every shaped link, e.g. 2mbit (\"0\" to clear)")
	cmd.Flags().StringVar(&f.maxbw, "maxbw", "", "ceiling on every shaped link, e.g. 50mbit (\"0\" to clear)")
	cmd.Flags().StringVar(&f.userAllowed, "user-allowed", "", "true: ordinary users may run their programs in this class")
	cmd.Flags().BoolVar(&f.temp, "temporary", false, "do not persist: forget the change when the daemon stops (a crash keeps it)")
}

// patch turns the flags that were given into a JSON patch, checking each.
func (f *classFlags) patch(cmd *cobra.Command) (api.Fields, error) {
	p := api.Fields{}
	if cmd.Flags().Changed("dscp") {
		d, err := policy.ParseDSCP(f.dscp)
		if err != nil {
			return nil, fmt.Errorf("flag --dscp = %q: %w", f.dscp, err)
		}
		p["dscp"] = d
	}
	if cmd.Flags().Changed("priority") {
		n, err := strconv.Atoi(f.priority)
		if err != nil || n < 0 || n > 7 {
			return nil, fmt.Errorf("flag --priority = %q: want 0 (first) … 7 (last)", f.priority)
		}
		p["priority"] = n
	}
	for _, x := range []struct {
		name, val string
	}{{"minbw", f.minbw}, {"maxbw", f.maxbw}} {
		if !cmd.Flags().Changed(x.name) {
			continue
		}
		if x.val == "0" || x.val == "" {
			p[x.name] = nil
			continue
		}
		r, err := policy.ParseRate(x.val)
		if err != nil {
			return nil, fmt.Errorf("flag --%s = %q: %w", x.name, x.val, err)
		}
		p[x.name] = r
	}
	if cmd.Flags().Changed("user-allowed") {
		b, err := strconv.ParseBool(f.userAllowed)
		if err != nil {
			return nil, fmt.Errorf("flag --user-allowed = %q: want true or false", f.userAllowed)
		}
		p["user_allowed"] = b
	}
	return p, nil
}

func newClassCmd(f *factory) *cobra.Command {
	class := &cobra.Command{
		Use:   "class",
		Short: "Manage service classes (DSCP mark, priority, guaranteed share, ceiling)",
		Long: `A class is a named service level: the DSCP mark its packets leave with, its
scheduling priority, and optionally a guaranteed rate (minbw) and a ceiling
(maxbw) on every shaped link. The defaults follow DiffServ: voice (EF, 0),
interactive (AF41, 1), default (CS0, 2), bulk (AF11, 4), scavenger (CS1, 7).
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

// classChangeOptions are those of class add and class set.
type classChangeOptions struct {
	io     ioStreams
	client func() apiClient
	flags  classFlags
	name   string
}

func newClassAddCmd(f *factory) *cobra.Command {
	o := &classChangeOptions{io: f.io, client: f.client}
	add := &cobra.Command{
		Use:     "add NAME --dscp D [--priority N] [--minbw RATE] [--maxbw RATE]",
		Short:   "Add a class",
		Example: "  hostqos class add backup --dscp CS1 --priority 6 --maxbw 50mbit",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.name = args[0]
			p, err := o.flags.patch(cmd)
			if err != nil {
				return err
			}
			if _, ok := p["dscp"]; !ok {
				return fmt.Errorf("flag --dscp is required for a new class (e.g. --dscp AF21)")
			}
			if _, ok := p["priority"]; !ok {
				p["priority"] = 3
			}
			return sendChange(o.io.Out, o.client().Classes(), "class", o.name, true, o.flags.temp, p)
		},
	}
	o.flags.register(add)
	return add
}

func newClassSetCmd(f *factory) *cobra.Command {
	o := &classChangeOptions{io: f.io, client: f.client}
	set := &cobra.Command{
		Use:     "set NAME [--dscp D] [--priority N] [--minbw RATE] [--maxbw RATE]",
		Short:   "Change a class; only the flags given change",
		Example: "  hostqos class set voice --minbw 2mbit",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.name = args[0]
			p, err := o.flags.patch(cmd)
			if err != nil {
				return err
			}
			if len(p) == 0 {
				return fmt.Errorf("nothing to change: give at least one of --dscp, --priority, --minbw, --maxbw, --user-allowed")
			}
			return sendChange(o.io.Out, o.client().Classes(), "class", o.name, false, o.flags.temp, p)
		},
	}
	o.flags.register(set)
	return set
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
