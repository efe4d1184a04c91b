package containers

import (
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"
)

// pendingFor is how long a container cgroup without a process, or a
// container without a veth into the daemon's namespace yet, is re-checked
// at a short period: a runtime makes the cgroup, then starts the process
// in it, then (Docker --network none, CNI) wires its network.
const pendingFor = 3 * time.Second

// scanner holds what the scans found and what they cache.
type scanner struct {
	cfg    Config
	log    *slog.Logger
	v2, v1 string // cgroup roots ("" = none)
	self   *selfNS
	// inspect reads a network namespace (selfNS.inspect; fixture tests
	// replace it), selfKey is the daemon's.
	inspect func(path string) (nsInfo, error)
	selfKey nsKey
	procNS  func(pid int) (nsKey, error)

	meta *metaSource
	ns   map[nsKey]*nsInfo // by network namespace, of the candidates
	bare map[string]int    // bare netns name -> a process in it (cache; -1 none found)

	cur       map[key]Container // published
	firstSeen map[key]time.Time // candidates, when first seen
	dirs      map[string]bool   // cgroup directories the last scan visited
	overflow  int               // containers not tracked by the last scan (MaxContainers)
	truncated bool
}

func newScanner(cfg Config, log *slog.Logger) (*scanner, error) {
	if err := checkGlobs(cfg.NetnsNames); err != nil {
		return nil, err
	}
	s := &scanner{cfg: cfg, log: log, meta: newMetaSource(cfg, log),
		ns: map[nsKey]*nsInfo{}, bare: map[string]int{}, cur: map[key]Container{},
		firstSeen: map[key]time.Time{}}
	s.v2 = cfg.CgroupRoot
	if s.v2 == "" {
		s.v2 = findCgroup2()
	} else if s.v2 == "-" {
		s.v2 = ""
	}
	s.v1 = findCgroupV1(cfg.CgroupV1)
	if s.v1 != "" && s.v1 == s.v2 {
		s.v1 = ""
	}
	if s.v2 == "" && s.v1 == "" {
		return nil, errNoCgroups
	}
	self, err := openSelf()
	if err != nil {
		return nil, err
	}
	s.self, s.selfKey, s.inspect = self, self.key, self.inspect
	s.procNS = func(pid int) (nsKey, error) {
		return statNS(filepath.Join(cfg.ProcRoot, strconv.Itoa(pid), "ns", "net"))
	}
	return s, nil
}

func (s *scanner) close() {
	if s.self != nil {
		s.self.close()
	}
}

// list is the published set, sorted, a copy.
func (s *scanner) list() []Container {
	out := make([]Container, 0, len(s.cur))
	for _, c := range s.cur {
		out = append(out, c.clone())
	}
	slices.SortFunc(out, compareContainers)
	return out
}

// scan looks again: cgroups, processes and network namespaces; the
// runtimes' metadata of new containers (of all when refresh). It reports
// whether the set changed and whether a new container is still settling
// (pending: scan again soon).
func (s *scanner) scan(refresh bool) (changed, pending bool) {
	now := time.Now()
	s.meta.beginScan()
	cands := map[key]candidate{}
	dirs := map[string]bool{}
	overflow := 0
	add := func(c candidate, rel string, v2 bool) {
		k := key{c.rt, c.id}
		old, ok := cands[k]
		if !ok && len(cands) >= maxCandidates {
			overflow++
			return
		}
		if v2 {
			c.v2 = rel
		} else if ok {
			return // the v2 one is kept
		}
		if ok && old.v2 != "" {
			return
		}
		cands[k] = c
	}
	truncated := false
	if s.v2 != "" {
		truncated = walk(s.v2, s.meta.containerdTask, func(c candidate, rel string) { add(c, rel, true) },
			func(d string) { dirs[d] = true }) || truncated
	}
	if s.v1 != "" {
		truncated = walk(s.v1, s.meta.containerdTask, func(c candidate, rel string) { add(c, rel, false) },
			func(d string) { dirs[d] = true }) || truncated
	}
	if truncated && !s.truncated {
		s.log.Warn("cgroup tree larger than the walk's bound: containers below it are not found",
			"max_dirs", maxCgroupDirs)
	}
	s.truncated = truncated
	s.dirs = dirs

	next := map[key]Container{}
	seenNS, runtimeNS := map[nsKey]bool{}, map[nsKey]bool{}
	noPID, elsewhere := map[key]bool{}, map[key]bool{}
	for k, c := range cands {
		if _, ok := s.firstSeen[k]; !ok {
			s.firstSeen[k] = now
		}
		pid := firstPID(c.dir)
		if pid <= 0 {
			noPID[k] = true
			continue
		}
		ctr, ok := s.containerAt(k, pid, seenNS, runtimeNS)
		if !ok {
			// Another namespace's, or not yet ours: a runtime's init
			// joins the cgroup before it enters the container's
			// namespace, which no event of ours announces when that
			// namespace and its veth exist already (Podman's
			// --network ns:). A link event re-checks it too.
			elsewhere[k] = true
			continue
		}
		if len(next) >= MaxContainers {
			overflow++
			continue
		}
		ctr.Cgroup = c.v2
		ctr.PodUID = PodUIDOf(c.dir)
		next[k] = ctr
	}
	s.scanBare(next, seenNS, runtimeNS, refresh)
	for k := range s.ns {
		if !seenNS[k] {
			delete(s.ns, k)
		}
	}

	keep := map[key]bool{}
	for k, c := range next {
		keep[k] = true
		if k.rt == Netns {
			continue
		}
		md := s.meta.get(k, refresh)
		c.Name, c.Image, c.Labels = md.name, md.image, md.labels
		next[k] = c
	}
	s.meta.forget(keep)
	// Settling: a new cgroup without a process yet, or whose process is
	// not in a namespace of ours yet, or a container published before
	// its runtime knew it.
	for k, t := range s.firstSeen {
		if _, stillCand := cands[k]; !stillCand {
			delete(s.firstSeen, k)
			continue
		}
		if now.Sub(t) >= pendingFor {
			continue
		}
		if _, published := next[k]; noPID[k] || elsewhere[k] || (published && s.meta.cache[k].guessed) {
			pending = true
		}
	}
	if overflow > 0 && overflow != s.overflow {
		s.log.Warn("more containers than tracked: the rest are not managed",
			"max_containers", MaxContainers, "not_tracked", overflow)
	}
	s.overflow = overflow

	changed = len(next) != len(s.cur)
	for k, c := range next {
		if old, ok := s.cur[k]; !ok || !old.equal(c) {
			changed = true
		}
	}
	s.cur = next
	return changed, pending
}

// containerAt is the kernel's facts of container k whose process is pid,
// if it belongs to the daemon's network namespace.
func (s *scanner) containerAt(k key, pid int, seenNS, runtimeNS map[nsKey]bool) (Container, bool) {
	if pid <= 0 {
		return Container{}, false
	}
	nk, err := s.procNS(pid)
	if err != nil {
		return Container{}, false // gone meanwhile
	}
	runtimeNS[nk] = true
	c := Container{Runtime: k.rt, ID: k.id, Name: ShortID(k.id), PID: pid}
	if nk == s.selfKey {
		c.HostNetwork = true
		return c, true
	}
	info := s.nsInfo(nk, filepath.Join(s.cfg.ProcRoot, strconv.Itoa(pid), "ns", "net"), seenNS)
	if info == nil || len(info.veths) == 0 {
		return Container{}, false
	}
	c.NetnsCookie, c.Veths = info.cookie, slices.Clone(info.veths)
	return c, true
}

// nsInfo is the cached inspection of network namespace nk (at path),
// refreshed when dirty.
func (s *scanner) nsInfo(nk nsKey, path string, seenNS map[nsKey]bool) *nsInfo {
	seenNS[nk] = true
	if info, ok := s.ns[nk]; ok && !info.dirty {
		return info
	}
	info, err := s.inspect(path)
	if err != nil {
		s.log.Debug("cannot inspect a container's network namespace", "path", path, "error", err)
		delete(s.ns, nk)
		return nil
	}
	s.ns[nk] = &info
	return &info
}

// scanBare adds the entries of NetnsDir matching NetnsNames that have a
// veth into the daemon's namespace and are not the namespace of a
// runtime's container found (runtimeNS).
func (s *scanner) scanBare(next map[key]Container, seenNS, runtimeNS map[nsKey]bool, refresh bool) {
	if len(s.cfg.NetnsNames) == 0 {
		return
	}
	entries, err := os.ReadDir(s.cfg.NetnsDir)
	if err != nil {
		return
	}
	seen := map[string]bool{}
	var byNS map[nsKey]int
	for _, e := range entries {
		name := e.Name()
		if !matchAny(s.cfg.NetnsNames, name) {
			continue
		}
		k := key{Netns, name}
		if _, ok := next[k]; !ok && len(next) >= MaxContainers {
			continue
		}
		path := filepath.Join(s.cfg.NetnsDir, name)
		nk, err := statNS(path)
		if err != nil || nk == s.selfKey || runtimeNS[nk] {
			continue // a runtime's container is the more precise name of it
		}
		info := s.nsInfo(nk, path, seenNS)
		if info == nil || len(info.veths) == 0 {
			continue
		}
		seen[name] = true
		// A process in it: the cached one while it stays there; else
		// from one walk of all processes for all such namespaces — for a
		// new one, and (an empty one) on refresh scans.
		pid, cached := s.bare[name]
		if pid > 0 {
			if pk, err := s.procNS(pid); err != nil || pk != nk {
				pid, cached = 0, false
			}
		}
		if !cached || (pid < 0 && refresh) {
			if byNS == nil {
				byNS = pidsByNetns(s.cfg.ProcRoot)
			}
			if pid = byNS[nk]; pid == 0 {
				pid = -1
			}
		}
		s.bare[name] = pid
		next[k] = Container{Runtime: Netns, ID: name, Name: name, PID: max(pid, 0),
			NetnsCookie: info.cookie, Veths: slices.Clone(info.veths)}
	}
	for name := range s.bare {
		if !seen[name] {
			delete(s.bare, name)
		}
	}
}

// linkChanged marks the network namespaces a change of link ifindex (its
// link-netnsid nsid, -1 none) in the daemon's namespace may concern.
func (s *scanner) linkChanged(ifindex, nsid int) {
	for _, info := range s.ns {
		if info.nsid < 0 || (nsid >= 0 && info.nsid == nsid) || slices.ContainsFunc(info.veths, func(v Veth) bool { return v.Ifindex == ifindex }) {
			info.dirty = true
		}
	}
}

func matchAny(globs []string, name string) bool {
	for _, g := range globs {
		if ok, _ := matchGlob(g, name); ok {
			return true
		}
	}
	return false
}

func matchGlob(pattern, name string) (bool, error) { return filepath.Match(pattern, name) }
