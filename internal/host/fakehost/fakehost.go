// Package fakehost is the kernel in memory, for unit tests of the engine
// and of what runs over it: FakeKernel is the engine's Kernel,
// FakeQSockKernel and FakeShieldKernel add its qsocket and shield
// capabilities. They record every call, keep what a real kernel would hold
// and fail on demand. The real kernel is package host; the engine's test
// files check at compile time that these fakes are what the engine asks
// (this package imports no engine, so that the engine's own tests can
// import it).
package fakehost

import (
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/hostqos/hostqos/internal/datapath"
	"github.com/hostqos/hostqos/internal/shaper"
)

// FakeKernel is the engine's Kernel in memory: it records every call,
// keeps what a real kernel would hold (rules, HTB trees, attachments,
// cgroups), and fails on demand.
type FakeKernel struct {
	mu sync.Mutex
	// Ifindexes are the interfaces that exist; LookupErrs fail a lookup
	// without saying whether the interface exists.
	Ifindexes  map[string]int
	LookupErrs map[string]error
	// Rules is the datapath policy applied last; Gen counts applies.
	Rules datapath.Policy
	Gen   uint32
	// Trees are the HTB plans on the links (by ifindex); Attached the
	// links with the classifier on.
	Trees    map[int]shaper.Plan
	Attached map[int]bool
	// Counters are the rule counters; FlowTable the flows (one without
	// a Gen was classified under the policy applied last); ClassCounters
	// the HTB class counters by ifindex.
	Counters      []datapath.Counters
	FlowTable     []datapath.Flow
	ClassCounters map[int][]shaper.ClassStats
	// RxUnmatched are the received counters of traffic no rule matched
	// (Stats: RxUnmatchedPackets, RxUnmatchedBytes, RxUnmatchedDrops).
	RxUnmatched datapath.Counters
	// EgressPackets are packets the classifier saw besides those of the
	// rules' Counters (Stats().Packets is 10 more than both): a test that
	// moves class counters alone moves it too.
	EgressPackets uint64
	// ResvCounters, BindingList and Refusals are what the reservation
	// readers return (Refusals: every refusal so far, Seq 1, 2, ...).
	ResvCounters map[uint16]datapath.ResvCounters
	BindingList  []datapath.Binding
	Refusals     []datapath.Refusal
	// Cgroups are the cgroups that exist and the processes in them; Procs
	// the cgroup of each process.
	Root    string
	Cgroups map[string]bool
	Procs   map[int]string
	Tagged  int
	// Calls are the operations done, "op arg", in order.
	Calls []string
	// MTUs are the interfaces' MTUs by ifindex (1500 when absent).
	MTUs map[int]int
	// SendBuffers are the sockets' SO_SNDBUF as getsockopt reads them
	// (doubled), by cookie; a cookie without one is a socket that is gone
	// (SetSendBuffer).
	SendBuffers map[uint64]int

	fail  map[string]failure
	memos map[fakeTrackID]*fakeTracked // TrackFlows's
}

type fakeTracked struct {
	f datapath.Flow
	m datapath.FlowMemo
}

// fakeTrackID identifies a flow of FlowTable for TrackFlows.
type fakeTrackID struct {
	key   datapath.FlowKey
	first uint64
}

type failure struct {
	nth int // fail the nth call from now (1: the next one)
	err error
}

// NewFakeKernel is an empty fake kernel whose cgroup2 root is root (a
// directory, for what compile resolves from the file system).
func NewFakeKernel(root string) *FakeKernel {
	return &FakeKernel{
		Ifindexes: map[string]int{}, LookupErrs: map[string]error{},
		Trees: map[int]shaper.Plan{}, Attached: map[int]bool{}, ClassCounters: map[int][]shaper.ClassStats{},
		Root: root, Cgroups: map[string]bool{}, Procs: map[int]string{}, fail: map[string]failure{},
	}
}

// FailNth makes the nth call (1: the next) of operation op (the method's
// name, e.g. "AttachLink") from now on fail with err.
func (f *FakeKernel) FailNth(op string, n int, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail[op] = failure{nth: n, err: err}
}

// Lock and Unlock hold the fake's lock, for a test that changes the
// fake's fields while an engine may be reading them.
func (f *FakeKernel) Lock()   { f.mu.Lock() }
func (f *FakeKernel) Unlock() { f.mu.Unlock() }

// call records a call and returns the failure planned for it.
func (f *FakeKernel) call(op string, arg any) error {
	f.Calls = append(f.Calls, fmt.Sprintf("%s %v", op, arg))
	fl, ok := f.fail[op]
	if !ok {
		return nil
	}
	fl.nth--
	if fl.nth > 0 {
		f.fail[op] = fl
		return nil
	}
	delete(f.fail, op)
	return fl.err
}

// CallsOf returns the recorded calls of op.
func (f *FakeKernel) CallsOf(op string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, c := range f.Calls {
		if len(c) > len(op) && c[:len(op)+1] == op+" " {
			out = append(out, c)
		}
	}
	return out
}

// Snapshot is what the fake kernel holds, for comparing before and after.
type Snapshot struct {
	Rules    datapath.Policy
	Trees    map[int]shaper.Plan
	Attached []int
	Cgroups  []string
}

// Snapshot copies what the fake kernel holds.
func (f *FakeKernel) Snapshot() Snapshot {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := Snapshot{Rules: f.Rules, Trees: maps.Clone(f.Trees)}
	for i, on := range f.Attached {
		if on {
			s.Attached = append(s.Attached, i)
		}
	}
	slices.Sort(s.Attached)
	for c := range f.Cgroups {
		s.Cgroups = append(s.Cgroups, c)
	}
	slices.Sort(s.Cgroups)
	return s
}

func (f *FakeKernel) ApplyRules(p datapath.Policy) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("ApplyRules", len(p.Rules)); err != nil {
		return err
	}
	f.Rules = p
	f.Gen++
	return nil
}

func (f *FakeKernel) Shape(plan shaper.Plan, _ *shaper.Plan) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("Shape", plan.Link.Ifindex); err != nil {
		return err
	}
	f.Trees[plan.Link.Ifindex] = plan
	return nil
}

func (f *FakeKernel) Unshape(ifindex int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("Unshape", ifindex); err != nil {
		return err
	}
	delete(f.Trees, ifindex)
	return nil
}

func (f *FakeKernel) Shaped(ifindex int) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("Shaped", ifindex); err != nil {
		return false, err
	}
	_, ok := f.Trees[ifindex]
	return ok, nil
}

func (f *FakeKernel) ClassStats(ifindex int) ([]shaper.ClassStats, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("ClassStats", ifindex); err != nil {
		return nil, err
	}
	return f.ClassCounters[ifindex], nil
}

func (f *FakeKernel) AttachLink(ifindex int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("AttachLink", ifindex); err != nil {
		return err
	}
	f.Attached[ifindex] = true
	return nil
}

func (f *FakeKernel) DetachLink(ifindex int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("DetachLink", ifindex); err != nil {
		return err
	}
	delete(f.Attached, ifindex)
	return nil
}

func (f *FakeKernel) LinkAttached(ifindex int) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("LinkAttached", ifindex); err != nil {
		return false, err
	}
	return f.Attached[ifindex], nil
}

func (f *FakeKernel) LookupLink(name string) (int, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("LookupLink", name); err != nil {
		return 0, false, err
	}
	if err := f.LookupErrs[name]; err != nil {
		return 0, false, err
	}
	i, ok := f.Ifindexes[name]
	return i, !ok, nil
}

func (f *FakeKernel) RuleCounters() ([]datapath.Counters, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("RuleCounters", ""); err != nil {
		return nil, err
	}
	return slices.Clone(f.Counters), nil
}

func (f *FakeKernel) RuleCounter(slot int) (datapath.Counters, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("RuleCounter", fmt.Sprint(slot)); err != nil {
		return datapath.Counters{}, err
	}
	if slot < len(f.Counters) {
		return f.Counters[slot], nil
	}
	return datapath.Counters{}, nil
}

// flowsLocked copies FlowTable, giving the flows without a generation
// the current one.
func (f *FakeKernel) flowsLocked() []datapath.Flow {
	flows := slices.Clone(f.FlowTable)
	for i := range flows {
		if flows[i].Gen == 0 {
			flows[i].Gen = f.Gen
		}
	}
	return flows
}

func (f *FakeKernel) Flows(fn func(datapath.Flow) bool) error {
	f.mu.Lock()
	flows := f.flowsLocked()
	err := f.call("Flows", "")
	f.mu.Unlock()
	if err != nil {
		return err
	}
	for _, fl := range flows {
		if !fn(fl) {
			break
		}
	}
	return nil
}

// TrackFlows walks FlowTable with a memo per flow (by key and first-seen
// time), then reports the tracked flows no longer in it.
func (f *FakeKernel) TrackFlows(fn func(datapath.Flow, *datapath.FlowMemo) bool, gone func(datapath.Flow, datapath.FlowMemo)) error {
	f.mu.Lock()
	flows := f.flowsLocked()
	err := f.call("TrackFlows", "")
	if f.memos == nil {
		f.memos = map[fakeTrackID]*fakeTracked{}
	}
	memos := f.memos
	f.mu.Unlock()
	if err != nil {
		return err
	}
	here := map[fakeTrackID]bool{}
	for _, fl := range flows {
		id := fakeTrackID{fl.Key, fl.FirstSeenNS}
		here[id] = true
		t := memos[id]
		if t == nil {
			t = &fakeTracked{}
			memos[id] = t
		}
		t.f = fl
		if !fn(fl, &t.m) {
			return nil
		}
	}
	for id, t := range memos {
		if here[id] {
			continue
		}
		delete(memos, id)
		if t.m.Seen {
			g := t.f
			g.Counters, g.LastSeenNS = t.m.Counters, t.m.LastSeenNS
			gone(g, t.m)
		}
	}
	return nil
}

// LinkInLevels reads nothing: the fake has no ingress budgets.
func (f *FakeKernel) LinkInLevels(ifindex int) ([]datapath.InLevel, error) { return nil, nil }

func (f *FakeKernel) Stats() (datapath.Stats, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("Stats", ""); err != nil {
		return datapath.Stats{}, err
	}
	// As the classifiers count: every packet a rule counts is one they
	// saw.
	var tx, rx uint64
	for _, c := range f.Counters {
		tx, rx = tx+c.Packets, rx+c.RxPackets
	}
	return datapath.Stats{Packets: 10 + f.EgressPackets + tx, RxPackets: rx + f.RxUnmatched.RxPackets, Classified: 5, RxUnmatchedPackets: f.RxUnmatched.RxPackets,
		RxUnmatchedBytes: f.RxUnmatched.RxBytes, RxUnmatchedDrops: f.RxUnmatched.RxDrops}, nil
}

func (f *FakeKernel) Generation() uint32 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.Gen
}

func (f *FakeKernel) TagExistingSockets() (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("TagExistingSockets", ""); err != nil {
		return 0, err
	}
	return f.Tagged, nil
}

func (f *FakeKernel) CgroupRoot() string { return f.Root }

func (f *FakeKernel) CreateCgroup(path string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("CreateCgroup", path); err != nil {
		return err
	}
	f.Cgroups[path] = true
	return nil
}

func (f *FakeKernel) RemoveCgroup(path string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("RemoveCgroup", path); err != nil {
		return err
	}
	delete(f.Cgroups, path)
	for pid, cg := range f.Procs {
		if cg == path {
			delete(f.Procs, pid) // as if the processes had ended
		}
	}
	return nil
}

func (f *FakeKernel) CgroupOf(pid int) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("CgroupOf", pid); err != nil {
		return "", err
	}
	if cg, ok := f.Procs[pid]; ok {
		return cg, nil
	}
	return "/user.slice", nil
}

func (f *FakeKernel) MovePID(path string, pid int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("MovePID", fmt.Sprintf("%d→%s", pid, path)); err != nil {
		return err
	}
	f.Procs[pid] = path
	return nil
}

func (f *FakeKernel) Populated(path string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("Populated", path); err != nil {
		return false, err
	}
	for _, cg := range f.Procs {
		if cg == path {
			return true, nil
		}
	}
	return false, nil
}
