package daemon

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"

	"github.com/hostqos/hostqos/internal/policy"
)

// overlay holds changes made through the API on top of the config file. A
// nil entry is a tombstone: the object of that name from the config file is
// removed.
type overlay struct {
	Links   map[string]*policy.Link  `json:"links,omitempty"`
	Classes map[string]*policy.Class `json:"classes,omitempty"`
	Rules   map[string]*policy.Rule  `json:"rules,omitempty"`
	Runs    map[string]*runState     `json:"runs,omitempty"`
}

// runState is an active `hostqos run`, kept in the temporary overlay so a
// restarted daemon keeps the program under its policy.
type runState struct {
	ID     string `json:"id"`
	PID    int    `json:"pid"`
	UID    uint32 `json:"uid"`
	Cgroup string `json:"cgroup"`
	Origin string `json:"origin"` // the cgroup the process came from
	Rule   string `json:"rule"`
	Cmd    string `json:"cmd,omitempty"`
	Since  int64  `json:"since_unix"`
}

func newOverlay() *overlay {
	return &overlay{
		Links:   map[string]*policy.Link{},
		Classes: map[string]*policy.Class{},
		Rules:   map[string]*policy.Rule{},
		Runs:    map[string]*runState{},
	}
}

// clone deep-copies the overlay so a change can be prepared and dropped.
func (o *overlay) clone() *overlay {
	n := newOverlay()
	for k, v := range o.Links {
		if v != nil {
			c := *v
			v = &c
		}
		n.Links[k] = v
	}
	for k, v := range o.Classes {
		if v != nil {
			c := *v
			v = &c
		}
		n.Classes[k] = v
	}
	for k, v := range o.Rules {
		if v != nil {
			c := *v
			v = &c
		}
		n.Rules[k] = v
	}
	for k, v := range o.Runs {
		c := *v
		n.Runs[k] = &c
	}
	return n
}

// Sources of objects, as shown by the API.
const (
	srcDefault = "default"
	srcConfig  = "config"
	srcAPI     = "api"
	srcTemp    = "temporary"
	srcRun     = "run"
)

// merged is the effective policy with where each object came from.
type merged struct {
	Policy  *policy.Policy
	Sources map[string]string // "rule/NAME", "class/NAME", "link/NAME" → source
}

// merge lays the persistent and temporary overlays over the config file's
// policy. The base must already contain the default classes.
func merge(base *policy.Policy, persist, temp *overlay) merged {
	m := merged{Policy: &policy.Policy{}, Sources: map[string]string{}}
	links := map[string]policy.Link{}
	var linkOrder []string
	classes := map[string]policy.Class{}
	var classOrder []string
	rules := map[string]policy.Rule{}
	var ruleOrder []string
	defaults := map[string]bool{}
	for _, c := range policy.DefaultClasses() {
		defaults[c.Name] = true
	}
	for _, l := range base.Links {
		links[l.Name] = l
		linkOrder = append(linkOrder, l.Name)
		m.Sources["link/"+l.Name] = srcConfig
	}
	for _, c := range base.Classes {
		classes[c.Name] = c
		classOrder = append(classOrder, c.Name)
		if defaults[c.Name] {
			m.Sources["class/"+c.Name] = srcDefault
		} else {
			m.Sources["class/"+c.Name] = srcConfig
		}
	}
	for _, r := range base.Rules {
		rules[r.Name] = r
		ruleOrder = append(ruleOrder, r.Name)
		m.Sources["rule/"+r.Name] = srcConfig
	}
	for _, ov := range []*overlay{persist, temp} {
		src := srcAPI
		if ov == temp {
			src = srcTemp
		}
		for _, name := range sortedKeys(ov.Links) {
			if v := ov.Links[name]; v == nil {
				delete(links, name)
			} else {
				if _, ok := links[name]; !ok {
					linkOrder = append(linkOrder, name)
				}
				links[name] = *v
				m.Sources["link/"+name] = src
			}
		}
		for _, name := range sortedKeys(ov.Classes) {
			if v := ov.Classes[name]; v == nil {
				delete(classes, name)
			} else {
				if _, ok := classes[name]; !ok {
					classOrder = append(classOrder, name)
				}
				classes[name] = *v
				m.Sources["class/"+name] = src
			}
		}
		for _, name := range sortedKeys(ov.Rules) {
			if v := ov.Rules[name]; v == nil {
				delete(rules, name)
			} else {
				if _, ok := rules[name]; !ok {
					ruleOrder = append(ruleOrder, name)
				}
				r := *v
				r.Temporary = ov == temp
				rules[name] = r
				m.Sources["rule/"+name] = src
			}
		}
	}
	for _, run := range temp.Runs {
		m.Sources["rule/"+run.Rule] = srcRun
	}
	for _, n := range linkOrder {
		if l, ok := links[n]; ok {
			m.Policy.Links = append(m.Policy.Links, l)
			delete(links, n)
		}
	}
	for _, n := range classOrder {
		if c, ok := classes[n]; ok {
			m.Policy.Classes = append(m.Policy.Classes, c)
			delete(classes, n)
		}
	}
	for _, n := range ruleOrder {
		if r, ok := rules[n]; ok {
			m.Policy.Rules = append(m.Policy.Rules, r)
			delete(rules, n)
		}
	}
	return m
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// slotTable gives every rule a stable slot in the datapath's counter array
// and every class a stable index, so counters survive restarts and edits.
// Baselines hold a slot's counter value when it was handed to its current
// owner, so a reused slot starts from zero.
type slotTable struct {
	Rules     map[string]int      `json:"rules"`
	Classes   map[string]int      `json:"classes"`
	Baselines map[int]baseCounter `json:"baselines,omitempty"`
}

type baseCounter struct {
	Packets uint64 `json:"packets"`
	Bytes   uint64 `json:"bytes"`
	Drops   uint64 `json:"drops"`
}

// MaxRules is the size of the datapath's rule tables.
const MaxRules = 4096

// maxClasses bounds service class indexes (HTB minors 0x10.. and 0x40..).
const maxClasses = 48

func newSlotTable() *slotTable {
	return &slotTable{Rules: map[string]int{}, Classes: map[string]int{}, Baselines: map[int]baseCounter{}}
}

func (s *slotTable) clone() *slotTable {
	n := newSlotTable()
	for k, v := range s.Rules {
		n.Rules[k] = v
	}
	for k, v := range s.Classes {
		n.Classes[k] = v
	}
	for k, v := range s.Baselines {
		n.Baselines[k] = v
	}
	return n
}

// assign gives slots to new rules and classes and frees those of vanished
// ones. current reads the counter of a slot (for the baseline of a reused
// slot); it may be nil.
func (s *slotTable) assign(p *policy.Policy, current func(slot int) baseCounter) error {
	keepR := map[string]bool{}
	for _, r := range p.Rules {
		keepR[r.Name] = true
	}
	for n := range s.Rules {
		if !keepR[n] {
			delete(s.Rules, n)
		}
	}
	used := map[int]bool{}
	for _, v := range s.Rules {
		used[v] = true
	}
	next := 0
	for _, r := range p.Rules {
		if _, ok := s.Rules[r.Name]; ok {
			continue
		}
		for next < MaxRules && used[next] {
			next++
		}
		if next >= MaxRules {
			return fmt.Errorf("assign rule slot for %q: all %d slots in use", r.Name, MaxRules)
		}
		s.Rules[r.Name] = next
		used[next] = true
		if current != nil {
			s.Baselines[next] = current(next)
		} else {
			delete(s.Baselines, next)
		}
	}
	keepC := map[string]bool{}
	for _, c := range p.Classes {
		keepC[c.Name] = true
	}
	for n := range s.Classes {
		if !keepC[n] {
			delete(s.Classes, n)
		}
	}
	usedC := map[int]bool{}
	for _, v := range s.Classes {
		usedC[v] = true
	}
	nextC := 0
	for _, c := range p.Classes {
		if _, ok := s.Classes[c.Name]; ok {
			continue
		}
		for nextC < maxClasses && usedC[nextC] {
			nextC++
		}
		if nextC >= maxClasses {
			return fmt.Errorf("assign class index for %q: at most %d classes", c.Name, maxClasses)
		}
		s.Classes[c.Name] = nextC
		usedC[nextC] = true
	}
	return nil
}

// persisted is the content of one state file.
type persisted struct {
	Version int        `json:"version"`
	Overlay *overlay   `json:"overlay"`
	Slots   *slotTable `json:"slots,omitempty"`
}

// readState reads a state file; a missing file is an empty state.
func readState(path string) (*overlay, *slotTable, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return newOverlay(), nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("read state %s: %w", path, err)
	}
	var p persisted
	if err := json.Unmarshal(data, &p); err != nil {
		return nil, nil, fmt.Errorf("parse state %s: %w (move it away to start from the config file alone)", path, err)
	}
	ov := newOverlay()
	if p.Overlay != nil {
		for k, v := range p.Overlay.Links {
			ov.Links[k] = v
		}
		for k, v := range p.Overlay.Classes {
			ov.Classes[k] = v
		}
		for k, v := range p.Overlay.Rules {
			ov.Rules[k] = v
		}
		for k, v := range p.Overlay.Runs {
			ov.Runs[k] = v
		}
	}
	return ov, p.Slots, nil
}

// writeState replaces a state file atomically: write a temporary file in
// the same directory, fsync it, rename it over the old one, fsync the dir.
func writeState(path string, ov *overlay, slots *slotTable) error {
	data, err := json.MarshalIndent(persisted{Version: 1, Overlay: ov, Slots: slots}, "", "  ")
	if err != nil {
		return fmt.Errorf("encode state: %w", err)
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create state dir %s: %w", dir, err)
	}
	f, err := os.CreateTemp(dir, ".state-*")
	if err != nil {
		return fmt.Errorf("write state %s: %w", path, err)
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	if _, err := f.Write(append(data, '\n')); err != nil {
		f.Close()
		return fmt.Errorf("write state %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("sync state %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write state %s: %w", path, err)
	}
	if err := os.Chmod(tmp, 0o644); err != nil {
		return fmt.Errorf("write state %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("replace state %s: %w", path, err)
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}
