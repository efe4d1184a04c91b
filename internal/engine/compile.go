package engine

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/hostqos/hostqos/internal/cgroups"
	"github.com/hostqos/hostqos/internal/datapath"
	"github.com/hostqos/hostqos/internal/policy"
	"github.com/hostqos/hostqos/internal/shaper"
)

// compiled is a policy turned into what the kernel needs.
type compiled struct {
	Datapath datapath.Policy
	Classes  []shaper.ClassSpec
	Rules    []shaper.RuleSpec
	// Acks are the ACK leaves of the rules with a download limit (every
	// managed link gets them: see shaper.AckSpec).
	Acks     []shaper.AckSpec
	Resolved map[string][]string // rule name → what its app selectors resolved to
	// RuleLink is the one link whose HTB tree holds a rule slot's leaves
	// (a reservation admitted on one link); slots not in it: every link.
	RuleLink map[uint16]string
	Warnings []string
	// files identifies the exe selectors' files; one inotify instance
	// serves a whole compile (closing one waits for an RCU grace period,
	// which per exe rule made a 1,000-exe policy take seconds).
	files *datapath.FileIdentifier
}

// fileIdentifier returns the compile's file identifier, opened on first
// use; compile closes it.
func (c *compiled) fileIdentifier() (*datapath.FileIdentifier, error) {
	if c.files == nil {
		fi, err := datapath.NewFileIdentifier()
		if err != nil {
			return nil, err
		}
		c.files = fi
	}
	return c.files, nil
}

// never is an executable identity no file has: a rule whose app selector
// resolves to nothing gets it, so that it matches nothing rather than all.
var never = datapath.FileID{Dev: 0, Ino: 0}

// compile resolves app selectors against the running system and produces
// datapath rules (in evaluation order) and shaper inputs. runs are the
// runs going (merged.Runs): an admin cgroup or unit rule also matches the
// cgroup of a run whose process it contained (see runsInside).
func compile(p *policy.Policy, runs []runCgroup, slots *slotTable, cgRoot string) (*compiled, error) {
	c := &compiled{Resolved: map[string][]string{}}
	defer func() {
		if c.files != nil {
			c.files.Close()
			c.files = nil
		}
	}()
	runRule := map[string]bool{}
	for _, run := range runs {
		runRule[run.Rule] = true
	}
	classIdx := map[string]int{}
	classByName := map[string]policy.Class{}
	for _, cl := range p.Classes {
		idx, ok := slots.Classes[cl.Name]
		if !ok {
			return nil, fmt.Errorf("compile class %q: no index assigned", cl.Name)
		}
		if idx < 0 || idx >= maxClasses {
			return nil, fmt.Errorf("compile class %q: index %d out of range 0..%d", cl.Name, idx, maxClasses-1)
		}
		classIdx[cl.Name] = idx
		classByName[cl.Name] = cl
		c.Classes = append(c.Classes, shaper.ClassSpec{
			Name: cl.Name, Index: idx, Priority: cl.Priority,
			MinBW: uint64(cl.MinBW), MaxBW: uint64(cl.MaxBW),
			Default: cl.Name == policy.DefaultClassName,
		})
	}
	c.Datapath.Rules = make([]datapath.Rule, 0, len(p.Rules))
	if cl, ok := classByName[policy.DefaultClassName]; ok {
		c.Datapath.InPrioNone = inPrio(cl.Priority)
	}
	for _, ri := range p.RuleOrder() {
		r := p.Rules[ri]
		slot, ok := slots.Rules[r.Name]
		if !ok {
			return nil, fmt.Errorf("compile rule %q: no slot assigned", r.Name)
		}
		if slot < 0 || slot >= datapath.MaxRules {
			return nil, fmt.Errorf("compile rule %q: slot %d out of range 0..%d", r.Name, slot, datapath.MaxRules-1)
		}
		className := r.EffectiveClass()
		cl, ok := classByName[className]
		if !ok {
			return nil, fmt.Errorf("compile rule %q: class %q does not exist", r.Name, className)
		}
		dr := datapath.Rule{
			Slot:         uint16(slot),
			DSCPIn:       int8(r.DSCPIn),
			DSCP:         -1,
			ServiceClass: uint8(classIdx[className]),
		}
		var inherit []runCgroup
		if !runRule[r.Name] && !r.UserRun {
			inherit = runs
		}
		if err := resolveApp(&dr, r, cgRoot, inherit, c); err != nil {
			return nil, err
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
				c.Rules = append(c.Rules, shaper.RuleSpec{
					Slot: uint16(slot), Class: classIdx[className],
					MinBW: uint64(r.MinBW), MaxBW: uint64(r.MaxBW),
				})
			} else {
				dr.ClassID = shaper.ClassLeafID(classIdx[className])
			}
			if r.Police > 0 {
				dr.PoliceRate, dr.PoliceBurst = uint64(r.Police), uint32(r.PoliceBurst())
			}
			dr.MaxBWIn = uint64(r.MaxBWIn)
			if r.MaxBWIn > 0 {
				dr.AckClassID = shaper.AckClassID(uint16(slot))
				c.Acks = append(c.Acks, shaper.AckSpec{Slot: uint16(slot), Rate: shaper.AckRate(uint64(r.MaxBWIn))})
			}
		}
		dr.InPrio = inPrio(cl.Priority)
		c.Datapath.Rules = append(c.Datapath.Rules, dr)
	}
	return c, nil
}

// inPrio is a class priority as a level of a link's ingress budget.
func inPrio(p int) uint8 { return uint8(min(max(p, 0), 7)) }

// resolveApp fills the app selectors of dr from r. The cgroup and unit
// selectors also match the cgroups of the runs (of those given) that were
// started inside the cgroups they name.
func resolveApp(dr *datapath.Rule, r policy.Rule, cgRoot string, runs []runCgroup, c *compiled) error {
	var notes []string
	if r.Exe != "" {
		fi, err := c.fileIdentifier()
		if err != nil {
			return fmt.Errorf("compile rule %q: resolve exe %s: %w", r.Name, r.Exe, err)
		}
		ex, err := resolveExe(r.Exe, fi)
		if err != nil {
			return fmt.Errorf("compile rule %q: %w", r.Name, err)
		}
		ids := ex.IDs
		for i, u := range ex.Unresolved {
			if i == maxUnresolvedNotes {
				more := len(ex.Unresolved) - i
				notes = append(notes, fmt.Sprintf("exe: %d more file(s) with no kernel identity", more))
				c.Warnings = append(c.Warnings, fmt.Sprintf("rule %q: %d more file(s) of exe %s cannot be resolved to the identity the kernel gives them", r.Name, more, r.Exe))
				break
			}
			notes = append(notes, "exe: "+u+": no kernel identity")
			c.Warnings = append(c.Warnings, fmt.Sprintf("rule %q: exe %s cannot be resolved to the identity the kernel gives it; the rule does not match it", r.Name, u))
		}
		switch {
		case len(ids) == 0 && len(ex.Unresolved) == 0:
			ids = []datapath.FileID{never}
			notes = append(notes, "exe: no such file yet")
			c.Warnings = append(c.Warnings, fmt.Sprintf("rule %q: exe %s matches no file; the rule matches nothing until it exists", r.Name, r.Exe))
		case len(ids) == 0:
			ids = []datapath.FileID{never}
		default:
			notes = append(notes, fmt.Sprintf("exe: %d file(s)", len(ids)))
		}
		if ex.Shared != "" {
			notes = append(notes, "exe: "+ex.Shared+" is on a file system whose inode numbers repeat across subvolumes or layers (btrfs, overlayfs): a file with the same inode number in another subvolume or layer of it matches too")
		}
		dr.Exes = ids
	}
	if r.Comm != "" {
		dr.Comm = r.Comm
	}
	if r.User != "" {
		uid, err := policy.ResolveUser(r.User)
		if err != nil {
			return fmt.Errorf("compile rule %q: resolve user %q: %w", r.Name, r.User, err)
		}
		dr.UID = &uid
	}
	var cgPaths []string
	if r.Cgroup != "" {
		cgPaths = append(cgPaths, r.Cgroup)
	}
	if r.Unit != "" {
		found, err := cgroups.FindUnit(cgRoot, r.Unit, 6)
		if err != nil {
			return fmt.Errorf("compile rule %q: %w", r.Name, err)
		}
		if len(found) == 0 {
			notes = append(notes, "unit: not running")
			c.Warnings = append(c.Warnings, fmt.Sprintf("rule %q: unit %s has no cgroup (not running?); the rule matches nothing until it starts", r.Name, r.Unit))
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
		if len(found) == 0 {
			dr.Cgroups = []datapath.CgroupRef{{ID: 0, Level: 0}}
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
		ref, err := cgroups.Resolve(cgRoot, p)
		if err != nil && i >= len(cgPaths)-nInside {
			continue // a run that just ended
		}
		if err != nil {
			notes = append(notes, "cgroup "+p+": missing")
			c.Warnings = append(c.Warnings, fmt.Sprintf("rule %q: cgroup %s does not exist; the rule matches nothing until it does", r.Name, p))
			continue
		}
		dr.Cgroups = append(dr.Cgroups, datapath.CgroupRef{ID: ref.ID, Level: ref.Level})
	}
	if (r.Cgroup != "" || r.Unit != "") && len(dr.Cgroups) == 0 {
		dr.Cgroups = []datapath.CgroupRef{{ID: 0, Level: 0}}
	}
	if len(notes) > 0 {
		c.Resolved[r.Name] = notes
	}
	return nil
}

// runsInside returns the cgroups of the runs whose process was moved out
// of one of paths (its origin is one of them or below one), and of the
// runs started inside those in turn: a run does not take its process out
// of an admin's cgroup or unit rule (an ordinary user's rule comes after
// the admin rules, so the admin rule claims the run's traffic first).
func runsInside(paths []string, runs []runCgroup) []string {
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

// maxUnresolvedNotes bounds the files a rule's notes and warnings name one
// by one as having no kernel identity (a glob may match many).
const maxUnresolvedNotes = 5

// exeResolution is what an exe selector resolved to.
type exeResolution struct {
	IDs []datapath.FileID // kernel identities, sorted, without duplicates
	// Unresolved are files that exist but whose kernel identity could not
	// be read, each "path (reason)".
	Unresolved []string
	// Shared is a resolved file whose file system numbers inodes per
	// subvolume or layer (stat(2) reports another device than the
	// superblock's), so that its kernel identity is not unique; "" if none.
	Shared string
}

// resolveExe turns a path or glob into the file identities the kernel
// gives the files (datapath.FileIDOf), which the datapath compares with
// task->mm->exe_file. Symlinks are followed: the kernel knows a process by
// the file it executes. Missing files are skipped; a failure that says
// nothing about the file (out of file descriptors or inotify watches) is
// an error, so that a re-resolution keeps the last good rules.
func resolveExe(pattern string, fi *datapath.FileIdentifier) (exeResolution, error) {
	var res exeResolution
	paths := []string{pattern}
	if strings.ContainsAny(pattern, "*?[") {
		m, err := globStrict(pattern)
		if err != nil {
			return res, fmt.Errorf("expand exe glob %s: %w", pattern, err)
		}
		paths = m
	}
	if len(paths) == 0 {
		return res, nil
	}
	seen := map[datapath.FileID]bool{}
	for _, p := range paths {
		id, err := fi.FileID(p)
		if err != nil {
			switch {
			case errors.Is(err, fs.ErrNotExist), errors.Is(err, unix.ENOTDIR):
				continue // no such file (now): a warning, not a failed change
			case errors.Is(err, unix.ELOOP), errors.Is(err, unix.ENAMETOOLONG), errors.Is(err, fs.ErrPermission):
				// Facts about the path: reported as unresolvable below.
			default:
				// Anything else (out of descriptors, watches or memory, an
				// I/O error) says nothing about the file: fail, so that a
				// re-resolution keeps the rule's last identities.
				return res, fmt.Errorf("resolve exe %s: %w", p, err)
			}
			var pe *fs.PathError
			if errors.As(err, &pe) {
				err = pe.Err
			}
			res.Unresolved = append(res.Unresolved, fmt.Sprintf("%s (%v)", p, err))
			continue
		}
		var st unix.Stat_t
		if res.Shared == "" && unix.Stat(p, &st) == nil && datapath.KernelDev(st.Dev) != id.Dev {
			res.Shared = p
		}
		if !seen[id] {
			seen[id] = true
			res.IDs = append(res.IDs, id)
		}
	}
	sort.Slice(res.IDs, func(i, j int) bool {
		if res.IDs[i].Dev != res.IDs[j].Dev {
			return res.IDs[i].Dev < res.IDs[j].Dev
		}
		return res.IDs[i].Ino < res.IDs[j].Ino
	})
	return res, nil
}

// globStrict is filepath.Glob that fails on a directory it cannot read
// for a reason other than its absence or its permissions (out of file
// descriptors, an I/O error): filepath.Glob skips such a directory, and a
// glob that silently matched nothing would let a re-resolution unmark the
// rule's programs on an error that proves nothing.
func globStrict(pattern string) ([]string, error) {
	if _, err := filepath.Match(pattern, ""); err != nil {
		return nil, err // a malformed pattern
	}
	if !strings.ContainsAny(pattern, "*?[\\") {
		if _, err := os.Lstat(pattern); err != nil {
			if ignorableDirErr(err) {
				return nil, nil
			}
			return nil, err
		}
		return []string{pattern}, nil
	}
	dir, file := filepath.Split(pattern)
	dir = filepath.Clean(dir)
	dirs := []string{dir}
	if dir != pattern && strings.ContainsAny(dir, "*?[\\") {
		var err error
		if dirs, err = globStrict(dir); err != nil {
			return nil, err
		}
	}
	var out []string
	for _, d := range dirs {
		entries, err := os.ReadDir(d)
		if err != nil {
			if ignorableDirErr(err) {
				continue
			}
			return nil, err
		}
		for _, e := range entries {
			if ok, _ := filepath.Match(file, e.Name()); ok {
				out = append(out, filepath.Join(d, e.Name()))
			}
		}
	}
	sort.Strings(out)
	return out, nil
}

// ignorableDirErr is an error that a glob may take as "nothing here".
func ignorableDirErr(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, fs.ErrPermission)
}
