package derive

import (
	"fmt"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/hostqos/hostqos/internal/datapath"
	"github.com/hostqos/hostqos/internal/policy"
	"github.com/hostqos/hostqos/internal/shaper"
)

// Compile turns an expansion (of in) into what the kernel must hold: the
// runtime view of its rules, their datapath rules (in evaluation order)
// and the reservations they name, the shaper's inputs, and the plan of
// every managed link.
func Compile(in Input, x *Expansion) (*Desired, error) {
	p, view := runtimeView(&in, x.Policy)
	d := &Desired{Resolved: map[string][]string{}, View: view, QSchedRate: in.QSchedRate}
	planContainers(in.Containers, d)
	if err := compileRules(&in, x, p, d); err != nil {
		return nil, err
	}
	if err := planLinks(&in, p, d); err != nil {
		return nil, err
	}
	return d, nil
}

// compileRules fills d's datapath rules and reservations and the shaper's
// classes, rules and ACK leaves. An admin cgroup or unit rule also matches
// the cgroup of a run whose process it contained (see runsInside).
func compileRules(in *Input, x *Expansion, p *policy.Policy, d *Desired) error {
	runRule := map[string]bool{}
	for _, run := range in.Runs {
		runRule[run.Rule] = true
	}
	classIdx := map[string]int{}
	classByName := map[string]policy.Class{}
	for _, cl := range p.Classes {
		idx, ok := in.Slots.Classes[cl.Name]
		if !ok {
			return fmt.Errorf("compile class %q: no index assigned", cl.Name)
		}
		if idx < 0 || idx >= shaper.ClassIndexes {
			return fmt.Errorf("compile class %q: index %d out of range 0..%d", cl.Name, idx, shaper.ClassIndexes-1)
		}
		classIdx[cl.Name] = idx
		classByName[cl.Name] = cl
		d.Classes = append(d.Classes, shaper.ClassSpec{
			Name: cl.Name, Index: idx, Priority: cl.Priority,
			MinBW: uint64(cl.MinBW), MaxBW: uint64(cl.MaxBW),
			Default: cl.Name == policy.DefaultClassName,
		})
	}
	def := classByName[policy.DefaultClassName]
	defLeaf := shaper.ClassLeafID(classIdx[policy.DefaultClassName])
	d.Datapath.Rules = make([]datapath.Rule, 0, len(p.Rules))
	if _, ok := classByName[policy.DefaultClassName]; ok {
		d.Datapath.InPrioNone = inPrio(def.Priority)
	}
	for _, ri := range p.RuleOrder() {
		r := p.Rules[ri]
		slot, ok := in.Slots.Rules[r.Name]
		if !ok {
			return fmt.Errorf("compile rule %q: no slot assigned", r.Name)
		}
		if slot < 0 || slot >= datapath.MaxRules {
			return fmt.Errorf("compile rule %q: slot %d out of range 0..%d", r.Name, slot, datapath.MaxRules-1)
		}
		className := r.EffectiveClass()
		cl, ok := classByName[className]
		if !ok {
			return fmt.Errorf("compile rule %q: class %q does not exist", r.Name, className)
		}
		dr := datapath.Rule{
			Slot:         uint16(slot),
			DSCPIn:       int8(r.DSCPIn),
			DSCP:         -1,
			ServiceClass: uint8(classIdx[className]),
		}
		var inherit []Run
		if !runRule[r.Name] && !r.UserRun {
			inherit = in.Runs
		}
		var nothing bool
		var err error
		if uid := x.attached[r.Name].pod; uid != "" {
			nothing = resolvePod(in.Resolver, &dr, r, uid, in.Containers, d)
		} else if nothing, err = resolveApp(in.Resolver, &dr, r, inherit, d, in.Containers); err != nil {
			return err
		}
		if nothing {
			// Its app selector resolves to no file or cgroup: it matches
			// nothing until one exists, so the datapath does not hold it
			// (no identity or cgroup id stands for "none": 0 is what a
			// socket without an executable or cgroup carries).
			continue
		}
		switch r.Proto {
		case "tcp":
			dr.Proto = unix.IPPROTO_TCP
		case "udp":
			dr.Proto = unix.IPPROTO_UDP
		case "icmp":
			dr.Proto = unix.IPPROTO_ICMP
		}
		dr.Local, dr.Remote = r.Local, r.Remote
		dr.LPortFrom, dr.LPortTo = r.LPort.From, r.LPort.To
		dr.RPortFrom, dr.RPortTo = r.RPort.From, r.RPort.To
		var spec *shaper.RuleSpec
		switch r.Action {
		case policy.ActionDrop:
			dr.ActionCode = datapath.ActDrop
		case policy.ActionObserve:
			dr.ActionCode = datapath.ActObserve
		default:
			dr.ActionCode = datapath.ActPass
			dr.DSCP = int8(cl.DSCP)
			if r.DSCP != policy.NoDSCP {
				dr.DSCP = int8(r.DSCP)
			}
			if r.MinBW > 0 || r.MaxBW > 0 {
				dr.ClassID = shaper.RuleClassID(uint16(slot))
				spec = &shaper.RuleSpec{
					Slot: uint16(slot), Class: classIdx[className],
					MinBW: uint64(r.MinBW), MaxBW: uint64(r.MaxBW),
				}
			} else {
				dr.ClassID = shaper.ClassLeafID(classIdx[className])
			}
			if r.Police > 0 {
				dr.PoliceRate, dr.PoliceBurst = uint64(r.Police), uint32(r.PoliceBurst())
			}
			dr.MaxBWIn = uint64(r.MaxBWIn)
			if r.MaxBWIn > 0 {
				dr.AckClassID = shaper.AckClassID(uint16(slot))
				d.Acks = append(d.Acks, shaper.AckSpec{Slot: uint16(slot), Rate: shaper.AckRate(uint64(r.MaxBWIn))})
			}
		}
		dr.InPrio = inPrio(cl.Priority)
		if a, ok := x.attached[r.Name]; ok && dr.ActionCode == datapath.ActPass {
			if err := attachReservation(in, a, r, &dr, spec, d, def, defLeaf); err != nil {
				return err
			}
		}
		if spec != nil {
			d.Rules = append(d.Rules, *spec)
		}
		d.Datapath.Rules = append(d.Datapath.Rules, dr)
	}
	return nil
}

// attachReservation names the reservation (or session group) of a rule in
// its datapath rule, completes it (id, demotion class, the HTB queue of
// guaranteed service, per-session leaves) and adds it to d.
func attachReservation(in *Input, a attachment, r policy.Rule, dr *datapath.Rule, spec *shaper.RuleSpec, d *Desired, def policy.Class, defLeaf uint32) error {
	if a.link != "" {
		if d.RuleLink == nil {
			d.RuleLink = map[uint16]string{}
		}
		d.RuleLink[dr.Slot] = a.link
	}
	rv := a.resv
	if rv == nil || (rv.sessionGroup && r.Police != 0) {
		return nil
	}
	n, ok := in.Slots.Resv[rv.key]
	if !ok {
		return fmt.Errorf("compile %s: no reservation id assigned", rv.key)
	}
	res := rv.r
	res.ID = uint16(n + 1)
	switch res.Service {
	case datapath.ServiceGuaranteed:
		if spec != nil {
			_, spec.QueueLimit = datapath.FlowControl(res.Bucket, res.MinUnit, res.MaxSessions)
		}
	case datapath.ServiceControlledLoad:
		res.DemoteClassID, res.DemoteDSCP = defLeaf, int8(def.DSCP)
	}
	if spec != nil && rv.sessions > 0 && rv.sessions <= shaper.MaxSessionLeaves && (rv.sessionMinBW > 0 || rv.max > 0) &&
		int(res.ID) <= shaper.MaxSessionGroups {
		// Every session gets an HTB leaf of its own under the rule's
		// class: guaranteed its share (per_session_minbw, or an equal
		// part of the rule's guarantee if that is more), capped at
		// per_session_maxbw, so one greedy session cannot take what the
		// others were admitted with. The datapath gives a socket a free
		// leaf when it takes a session (at connect) and back when it gives
		// the session up (close).
		spec.Sessions, spec.SessionGroup = rv.sessions, res.ID
		spec.SessionMinBW, spec.SessionMaxBW = uint64(rv.sessionMinBW), uint64(rv.max)
		res.SessionClassID = shaper.SessionClassID(res.ID, 0)
		// Traffic without a session: the class's general leaf (the
		// rule's own class is the sessions' parent).
		dr.ClassID = shaper.ClassLeafID(int(dr.ServiceClass))
	}
	if spec != nil && rv.shape && spec.Sessions == 0 && int(res.ID) <= shaper.MaxTspecShapes && res.Rate*8 >= shaper.MinRate {
		// Shaped: the leaf holds what leaves to the Tspec itself (r, b,
		// p, M), not to R with a short burst.
		spec.Tspec = &shaper.TspecShape{ID: res.ID, Rate: res.Rate * 8, Peak: res.Peak * 8,
			Bucket: uint32(min(res.Bucket, 1<<30)), MaxUnit: res.MaxUnit}
	}
	dr.Reservation = res.ID
	d.Datapath.Reservations = append(d.Datapath.Reservations, res)
	return nil
}

// inPrio is a class priority as a level of a link's ingress budget.
func inPrio(p int) uint8 { return uint8(min(max(p, 0), 7)) }

// resolveApp fills the app selectors of dr from r. The cgroup and unit
// selectors also match the cgroups of the runs (of those given) that were
// started inside the cgroups they name. nothing reports a selector that
// resolves to no file or cgroup: the rule matches nothing now.
func resolveApp(res Resolver, dr *datapath.Rule, r policy.Rule, runs []Run, d *Desired, cs []Container) (nothing bool, err error) {
	var notes []string
	defer func() {
		if len(notes) > 0 {
			d.Resolved[r.Name] = notes
		}
	}()
	if r.Exe != "" {
		ex, err := res.Exe(r.Exe)
		if err != nil {
			return false, fmt.Errorf("compile rule %q: %w", r.Name, err)
		}
		ids := ex.IDs
		for i, u := range ex.Unresolved {
			if i == maxUnresolvedNotes {
				more := len(ex.Unresolved) - i
				notes = append(notes, fmt.Sprintf("exe: %d more file(s) with no kernel identity", more))
				d.Warnings = append(d.Warnings, fmt.Sprintf("rule %q: %d more file(s) of exe %s cannot be resolved to the identity the kernel gives them", r.Name, more, r.Exe))
				break
			}
			notes = append(notes, "exe: "+u+": no kernel identity")
			d.Warnings = append(d.Warnings, fmt.Sprintf("rule %q: exe %s cannot be resolved to the identity the kernel gives it; the rule does not match it", r.Name, u))
		}
		switch {
		case len(ids) == 0 && len(ex.Unresolved) == 0 && ex.NotFiles > 0:
			notes = append(notes, fmt.Sprintf("exe: no file; %d directories or other non-files left out", ex.NotFiles))
			d.Warnings = append(d.Warnings, fmt.Sprintf("rule %q: exe %s matches %d directories or other non-files and no file; a process's executable is a file: name the files (e.g. DIR/*/NAME)", r.Name, r.Exe, ex.NotFiles))
		case len(ids) == 0 && len(ex.Unresolved) == 0:
			notes = append(notes, "exe: no such file yet")
			d.Warnings = append(d.Warnings, fmt.Sprintf("rule %q: exe %s matches no file; the rule matches nothing until it exists", r.Name, r.Exe))
		case len(ids) == 0:
		case ex.NotFiles > 0:
			notes = append(notes, fmt.Sprintf("exe: %d file(s); %d directories or other non-files left out", len(ids), ex.NotFiles))
		default:
			notes = append(notes, fmt.Sprintf("exe: %d file(s)", len(ids)))
		}
		if ex.Shared != "" {
			notes = append(notes, "exe: "+ex.Shared+" is on a file system whose inode numbers repeat across subvolumes or layers (btrfs, overlayfs): a file with the same inode number in another subvolume or layer of it matches too")
		}
		dr.Exes = ids
		nothing = len(ids) == 0
	}
	if r.Comm != "" {
		dr.Comm = r.Comm
	}
	if r.User != "" {
		uid, err := res.User(r.User)
		if err != nil {
			return false, fmt.Errorf("compile rule %q: resolve user %q: %w", r.Name, r.User, err)
		}
		dr.UID = &uid
	}
	var cgPaths []string
	if r.Cgroup != "" {
		cgPaths = append(cgPaths, r.Cgroup)
	}
	if r.Unit != "" {
		found, err := res.Unit(r.Unit)
		if err != nil {
			return false, fmt.Errorf("compile rule %q: %w", r.Name, err)
		}
		if len(found) == 0 {
			notes = append(notes, "unit: not running")
			d.Warnings = append(d.Warnings, fmt.Sprintf("rule %q: unit %s has no cgroup (not running?); the rule matches nothing until it starts", r.Name, r.Unit))
		} else {
			notes = append(notes, "unit: "+strings.Join(found, ","))
		}
		if r.Cgroup != "" && len(found) > 0 {
			// Both given: the unit must lie inside the cgroup.
			var inside []string
			for _, f := range found {
				if f == r.Cgroup || strings.HasPrefix(f, strings.TrimSuffix(r.Cgroup, "/")+"/") {
					inside = append(inside, f)
				}
			}
			found = inside
		}
		cgPaths = found
	}
	inside := runsInside(cgPaths, runs)
	if len(inside) > 0 {
		notes = append(notes, "also the runs started inside") // no count: it would tell ordinary users of others' runs
	}
	nInside := len(inside)
	cgPaths = append(cgPaths, inside...)
	for i, p := range cgPaths {
		ref, err := res.Cgroup(p)
		if err != nil && i >= len(cgPaths)-nInside {
			continue // a run that just ended
		}
		if err != nil {
			notes = append(notes, "cgroup "+p+": missing")
			d.Warnings = append(d.Warnings, fmt.Sprintf("rule %q: cgroup %s does not exist; the rule matches nothing until it does", r.Name, p))
			continue
		}
		dr.Cgroups = append(dr.Cgroups, ref)
	}
	if (r.Cgroup != "" || r.Unit != "") && len(dr.Cgroups) == 0 {
		nothing = true
	}
	if r.HasContainerSelector() && resolveContainers(res, dr, r, cs, d, &notes) {
		nothing = true
	}
	return nothing, nil
}

// runsInside returns the cgroups of the runs whose process was moved out
// of one of paths (its origin is one of them or below one), and of the
// runs started inside those in turn: a run does not take its process out
// of an admin's cgroup or unit rule (an ordinary user's rule comes after
// the admin rules, so the admin rule claims the run's traffic first).
func runsInside(paths []string, runs []Run) []string {
	if len(paths) == 0 || len(runs) == 0 {
		return nil
	}
	under := func(p, dir string) bool {
		p, dir = cleanCgroup(p), cleanCgroup(dir)
		return p == dir || dir == "/" || strings.HasPrefix(p, dir+"/")
	}
	dirs := append([]string(nil), paths...)
	taken := make([]bool, len(runs))
	var out []string
	for added := true; added; {
		added = false
		for i, run := range runs {
			if taken[i] || run.Origin == "" {
				continue
			}
			for _, d := range dirs {
				if under(run.Origin, d) {
					taken[i], added = true, true
					out = append(out, run.Cgroup)
					dirs = append(dirs, run.Cgroup)
					break
				}
			}
		}
	}
	return out
}

// cleanCgroup is a cgroup path without trailing slashes ("/" for the root).
func cleanCgroup(p string) string {
	p = strings.TrimRight(p, "/")
	if p == "" {
		return "/"
	}
	return p
}
