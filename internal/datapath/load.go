package datapath

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/hostqos/hostqos/internal/datapath/pin"
)

// Loading the programs. The kernel's verifier takes most of a daemon's
// start (about 0.7 s for each TC classifier on our 2-core machines, 3.5 s
// for the whole object), and it verifies the programs of a privileged
// loader concurrently. So Open creates the maps first, then has the
// programs verified several at a time (one per CPU Go may use), the largest
// first. The classifier variants for links without an Ethernet header
// (tunnels, tun devices) are verified when the first such link is attached
// (loadL3), and the classifiers of containers' veths when the first
// container is found (loadVeth), not at start: most hosts have none.

// loadObjects creates (or, with opts.Maps.PinPath, adopts) every map of
// spec and its global variables, then loads the programs for which eager
// returns true: with reuse, the ones a previous start pinned in d.progDir
// if they are still right (see reusePrograms), else verified afresh and
// pinned there for the next start. The programs see the collection's maps.
func (d *Datapath) loadObjects(spec *ebpf.CollectionSpec, opts ebpf.CollectionOptions, eager func(string) bool, reuse bool) (*ebpf.Collection, error) {
	data := *spec
	data.Programs = nil
	coll, err := ebpf.NewCollectionWithOptions(&data, opts)
	if err != nil {
		return nil, err
	}
	var names []string
	for name, p := range spec.Programs {
		if eager(name) && p.Type != ebpf.UnspecifiedProgram {
			names = append(names, name)
		}
	}
	var progs map[string]*ebpf.Program
	if reuse {
		if progs, err = reusePrograms(spec, d.progDir, names, coll.Maps); err != nil {
			d.log.Info("verifying the BPF programs again", "err", err)
		}
	}
	if progs == nil {
		if progs, err = loadPrograms(spec, names, coll.Maps, opts.Programs); err != nil {
			coll.Close()
			return nil, err
		}
		if err := d.pinPrograms(progs, true); err != nil {
			d.log.Warn("the next start verifies the BPF programs again", "err", err)
		}
	}
	coll.Programs = progs
	return coll, nil
}

// loadPrograms loads the named programs of spec, several at a time, with
// their map references resolved to maps (which must hold every map of
// spec). On error it closes what it loaded and returns the first error.
func loadPrograms(spec *ebpf.CollectionSpec, names []string, maps map[string]*ebpf.Map, popts ebpf.ProgramOptions) (map[string]*ebpf.Program, error) {
	// Longest first: the verifier's time grows with a program's size, and
	// starting the long ones first evens the workers out.
	slices.SortFunc(names, func(a, b string) int {
		return cmp.Or(cmp.Compare(len(spec.Programs[b].Instructions), len(spec.Programs[a].Instructions)), cmp.Compare(a, b))
	})
	next := make(chan string, len(names))
	for _, n := range names {
		next <- n
	}
	close(next)
	type result struct {
		name string
		prog *ebpf.Program
		err  error
	}
	results := make(chan result, len(names))
	var failed atomic.Bool
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), len(names)) {
		wg.Go(func() {
			for name := range next {
				if failed.Load() { // no point verifying the rest
					continue
				}
				p, err := loadProgram(spec, name, maps, popts)
				if err != nil {
					failed.Store(true)
				}
				results <- result{name, p, err}
			}
		})
	}
	wg.Wait()
	close(results)
	progs := make(map[string]*ebpf.Program, len(names))
	var first error
	for r := range results {
		if r.err != nil {
			// A verifier's rejection explains more than a program
			// cancelled or refused for want of memory beside it.
			var ve *ebpf.VerifierError
			if first == nil || (errors.As(r.err, &ve) && !errors.As(first, &ve)) {
				first = r.err
			}
			continue
		}
		progs[r.name] = r.prog
	}
	if first != nil {
		for _, p := range progs {
			p.Close()
		}
		return nil, first
	}
	return progs, nil
}

// loadProgram loads one program of spec with its maps replaced by maps
// (cloned for the load, so the caller keeps its own). The collection
// loader does the map fixups, CO-RE relocations and BTF as for a whole
// collection.
func loadProgram(spec *ebpf.CollectionSpec, name string, maps map[string]*ebpf.Map, popts ebpf.ProgramOptions) (*ebpf.Program, error) {
	one := &ebpf.CollectionSpec{
		Maps:      spec.Maps,
		Programs:  map[string]*ebpf.ProgramSpec{name: spec.Programs[name]},
		Types:     spec.Types,
		ByteOrder: spec.ByteOrder,
	}
	c, err := ebpf.NewCollectionWithOptions(one, ebpf.CollectionOptions{MapReplacements: maps, Programs: popts})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	p := c.Programs[name]
	delete(c.Programs, name)
	return p, nil
}

// assignPrograms sets each *ebpf.Program field of the struct to points to
// (tagged `ebpf:"name"`, as bpf2go writes them) to the program of that
// name in progs, taking it out of progs; fields without one stay nil.
func assignPrograms(to any, progs map[string]*ebpf.Program) {
	v := reflect.ValueOf(to).Elem()
	for i := range v.NumField() {
		name := v.Type().Field(i).Tag.Get("ebpf")
		if p, ok := progs[name]; ok && v.Field(i).Type() == reflect.TypeFor[*ebpf.Program]() {
			v.Field(i).Set(reflect.ValueOf(p))
			delete(progs, name)
		}
	}
}

// lazyLoader keeps what loading a program after Open needs: the object's
// spec and clones of every map its programs use. Guarded by mu.
type lazyLoader struct {
	mu   sync.Mutex
	spec *ebpf.CollectionSpec
	maps map[string]*ebpf.Map
}

func newLazyLoader(spec *ebpf.CollectionSpec, maps map[string]*ebpf.Map) (*lazyLoader, error) {
	l := &lazyLoader{spec: spec, maps: make(map[string]*ebpf.Map, len(maps))}
	for name, m := range maps {
		c, err := m.Clone()
		if err != nil {
			l.close()
			return nil, fmt.Errorf("keep map %s for later loads: %w", name, err)
		}
		l.maps[name] = c
	}
	return l, nil
}

func (l *lazyLoader) close() {
	for _, m := range l.maps {
		m.Close()
	}
	l.maps = nil
}

// lazyGroup is a set of programs Open leaves to be verified and loaded
// together on first use.
type lazyGroup struct {
	what  string   // what they are, for logs and errors
	names []string // their programs
}

var (
	// l3Programs: the classifier variants for links without an Ethernet
	// header (loadL3).
	l3Programs = lazyGroup{"the classifiers for links without an Ethernet header", []string{"hq_tc_egress_l3", "hq_tc_ingress_l3"}}
	// vethPrograms: the classifiers of containers' veths (loadVeth).
	vethPrograms = lazyGroup{"the classifiers of containers' veths", []string{"hq_veth_in", "hq_veth_out"}}
)

// lazyPrograms are the programs Open leaves to loadLazy.
var lazyPrograms = func() map[string]bool {
	m := map[string]bool{}
	for _, g := range []lazyGroup{l3Programs, vethPrograms} {
		for _, n := range g.names {
			m[n] = true
		}
	}
	return m
}()

// loadLazy verifies and loads the programs of g unless they are loaded
// (have reports whether they are, called with the loader's lock held).
func (d *Datapath) loadLazy(g lazyGroup, have func() bool) error {
	l := d.lazy
	if l == nil {
		return fmt.Errorf("load %s: datapath closed", g.what)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if have() {
		return nil
	}
	if l.maps == nil {
		return fmt.Errorf("load %s: datapath closed", g.what)
	}
	progs, err := reusePrograms(l.spec, d.progDir, g.names, l.maps)
	if err != nil {
		if progs, err = loadPrograms(l.spec, g.names, l.maps, ebpf.ProgramOptions{}); err != nil {
			return d.loadError(err)
		}
		if err := d.pinPrograms(progs, false); err != nil {
			d.log.Warn("the next start verifies the BPF programs again", "err", err)
		}
	}
	d.log.Info("loaded " + g.what)
	assignPrograms(&d.objs.hostqosPrograms, progs)
	return nil
}

// loadL3 verifies and loads the classifier variants for links without an
// Ethernet header on first use and returns them (egress, ingress).
func (d *Datapath) loadL3() (egress, ingress *ebpf.Program, err error) {
	err = d.loadLazy(l3Programs, func() bool { return d.objs.HqTcEgressL3 != nil && d.objs.HqTcIngressL3 != nil })
	if err != nil {
		return nil, nil, err
	}
	return d.objs.HqTcEgressL3, d.objs.HqTcIngressL3, nil
}

// loadVeth verifies and loads the classifiers of containers' veths on
// first use and returns them (in: the veth's ingress, what the container
// sends; out: its egress, what the container receives).
func (d *Datapath) loadVeth() (in, out *ebpf.Program, err error) {
	err = d.loadLazy(vethPrograms, func() bool { return d.objs.HqVethIn != nil && d.objs.HqVethOut != nil })
	if err != nil {
		return nil, nil, err
	}
	return d.objs.HqVethIn, d.objs.HqVethOut, nil
}

// loadError explains a failed program load; a verifier's rejection is
// logged with the verifier's log.
func (d *Datapath) loadError(err error) error {
	var ve *ebpf.VerifierError
	if errors.As(err, &ve) {
		d.log.Error("BPF verifier rejected a program", "log", fmt.Sprintf("%+v", ve))
		return fmt.Errorf("load BPF programs: %+v", ve)
	}
	return pin.Incompatible("", err)
}

// takeObjects moves the maps, variables and programs of coll into d.objs
// and keeps what loading the lazy programs later needs.
func (d *Datapath) takeObjects(spec *ebpf.CollectionSpec, coll *ebpf.Collection) error {
	lazy, err := newLazyLoader(spec, coll.Maps)
	if err != nil {
		return err
	}
	d.lazy = lazy
	if err := coll.Assign(&d.objs.hostqosMaps); err != nil {
		return fmt.Errorf("load BPF objects: %w", err)
	}
	if err := coll.Assign(&d.objs.hostqosVariables); err != nil {
		return fmt.Errorf("load BPF objects: %w", err)
	}
	assignPrograms(&d.objs.hostqosPrograms, coll.Programs)
	return nil
}

// Verified programs are pinned under <pin dir>/progs/<object id>/, where
// object id fingerprints what they were made from (objectID). A restarted
// daemon that adopts the pinned maps takes these programs instead of
// having the kernel verify the same code again (seconds); a different
// build, different load-time values or another kernel give another id, and
// the programs are verified and pinned afresh.
const progsDir = "progs"

// objectID fingerprints a BPF object as loaded: its ELF bytes, the values
// set in its variables before loading, and the running kernel.
func objectID(obj []byte, vals []any) string {
	h := sha256.New()
	h.Write(obj)
	var uts unix.Utsname
	if err := unix.Uname(&uts); err == nil {
		h.Write(uts.Release[:])
		h.Write(uts.Version[:])
	}
	for _, v := range vals {
		fmt.Fprintf(h, "|%T=%v", v, v)
	}
	return hex.EncodeToString(h.Sum(nil)[:12])
}

// reusePrograms opens the programs pinned in dir under names, provided
// each uses no map but the ones in maps (the adopted pinned maps, by
// kernel id) and per-program scratch and constants (maps spec does not
// pin, by name). Otherwise it returns an error saying why not.
func reusePrograms(spec *ebpf.CollectionSpec, dir string, names []string, maps map[string]*ebpf.Map) (_ map[string]*ebpf.Program, err error) {
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return nil, errors.New("no programs of this build pinned")
	}
	progs := make(map[string]*ebpf.Program, len(names))
	defer func() {
		if err != nil {
			for _, p := range progs {
				p.Close()
			}
		}
	}()
	ours := make(map[ebpf.MapID]bool, len(maps))
	for name, m := range maps {
		info, err := m.Info()
		if err != nil {
			return nil, fmt.Errorf("read map %s: %w", name, err)
		}
		if id, ok := info.ID(); ok {
			ours[id] = true
		}
	}
	private := map[string]bool{}
	for name, ms := range spec.Maps {
		if ms.Pinning == ebpf.PinNone && name != ".bss" {
			private[name] = true
		}
	}
	for _, name := range names {
		pin := filepath.Join(dir, name)
		p, err := ebpf.LoadPinnedProgram(pin, nil)
		if err != nil {
			return nil, fmt.Errorf("open pinned program %s: %w", pin, err)
		}
		progs[name] = p
		info, err := p.Info()
		if err != nil {
			return nil, fmt.Errorf("read pinned program %s: %w", pin, err)
		}
		ids, ok := info.MapIDs()
		if !ok {
			return nil, fmt.Errorf("read the maps of pinned program %s: not supported", pin)
		}
		for _, id := range ids {
			if ours[id] {
				continue
			}
			m, err := ebpf.NewMapFromID(id)
			if err != nil {
				return nil, fmt.Errorf("open map %d of pinned program %s: %w", id, pin, err)
			}
			mi, err := m.Info()
			m.Close()
			if err != nil {
				return nil, fmt.Errorf("read map %d of pinned program %s: %w", id, pin, err)
			}
			if !private[mi.Name] {
				return nil, fmt.Errorf("pinned program %s uses map %s (id %d), not the adopted one", pin, mi.Name, id)
			}
		}
	}
	return progs, nil
}

// pinPrograms pins progs in d.progDir; with fresh it first removes the
// programs earlier starts pinned (of any object id).
func (d *Datapath) pinPrograms(progs map[string]*ebpf.Program, fresh bool) error {
	if fresh {
		if err := os.RemoveAll(filepath.Join(d.dir, progsDir)); err != nil {
			return fmt.Errorf("remove pinned programs: %w", err)
		}
	}
	if err := os.MkdirAll(d.progDir, 0o700); err != nil {
		return fmt.Errorf("create program pin directory: %w", err)
	}
	for name, p := range progs {
		pin := filepath.Join(d.progDir, name)
		if err := p.Pin(pin); err != nil {
			return fmt.Errorf("pin program %s: %w", pin, err)
		}
	}
	return nil
}
