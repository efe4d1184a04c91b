package derive

import (
	"path/filepath"
	"reflect"
	"slices"
	"strings"
)

// Resolutions are what app selectors resolved to at a derive: exe
// selectors by pattern, unit selectors by unit. An engine that derives
// again only on events keeps them, to tell whether a selector no event
// covers resolves otherwise now (Moved).
type Resolutions struct {
	Exe  map[string]ExeResolution
	Unit map[string][]string
}

// Recorder is a Resolver that records what each exe and unit selector
// resolved to (failures are not recorded: the derive fails).
type Recorder struct {
	Resolver
	Got Resolutions
}

func (r *Recorder) Exe(pattern string) (ExeResolution, error) {
	res, err := r.Resolver.Exe(pattern)
	if err == nil {
		if r.Got.Exe == nil {
			r.Got.Exe = map[string]ExeResolution{}
		}
		r.Got.Exe[pattern] = res
	}
	return res, err
}

func (r *Recorder) Unit(unit string) ([]string, error) {
	cgs, err := r.Resolver.Unit(unit)
	if err == nil {
		if r.Got.Unit == nil {
			r.Got.Unit = map[string][]string{}
		}
		r.Got.Unit[unit] = cgs
	}
	return cgs, err
}

// Empty reports whether no selector was resolved.
func (rs Resolutions) Empty() bool { return len(rs.Exe) == 0 && len(rs.Unit) == 0 }

// Moved resolves each selector again with res and reports whether any
// resolves otherwise (or cannot be resolved now: a derive then says why).
func (rs Resolutions) Moved(res Resolver) bool {
	for pattern, was := range rs.Exe {
		now, err := res.Exe(pattern)
		if err != nil || !reflect.DeepEqual(now, was) {
			return true
		}
	}
	for unit, was := range rs.Unit {
		now, err := res.Unit(unit)
		if err != nil || !slices.Equal(now, was) {
			return true
		}
	}
	return false
}

// ExeWatchDir is the directory whose entries decide what an exe selector
// resolves to, when one directory does (no glob in its directory part):
// watching it for entries created, removed or renamed tells when the
// selector may resolve otherwise.
func ExeWatchDir(pattern string) (string, bool) {
	if pattern == "" {
		return "", false
	}
	dir := filepath.Dir(pattern)
	if strings.ContainsAny(dir, "*?[\\") {
		return "", false
	}
	return dir, true
}
