package engine

import (
	"maps"
	"slices"

	"github.com/hostqos/hostqos/internal/datapath"
)

func (f *FakeKernel) ReservationCounters() (map[uint16]datapath.ResvCounters, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("ReservationCounters", ""); err != nil {
		return nil, err
	}
	out := maps.Clone(f.ResvCounters)
	if out == nil {
		out = map[uint16]datapath.ResvCounters{}
	}
	return out, nil
}

func (f *FakeKernel) Bindings() ([]datapath.Binding, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("Bindings", ""); err != nil {
		return nil, err
	}
	return slices.Clone(f.BindingList), nil
}

func (f *FakeKernel) SessionRefusals(since uint64) ([]datapath.Refusal, uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("SessionRefusals", since); err != nil {
		return nil, since, err
	}
	var out []datapath.Refusal
	last := since
	for _, r := range f.Refusals {
		if r.Seq > since {
			out = append(out, r)
		}
		last = max(last, r.Seq)
	}
	return out, last, nil
}
