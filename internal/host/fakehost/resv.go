package fakehost

import (
	"fmt"
	"maps"
	"slices"

	"github.com/hostqos/hostqos/internal/apps"
	"github.com/hostqos/hostqos/internal/datapath"
)

// The reservations' readers, and the send buffers of other processes'
// sockets.

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

// LinkMTU is the MTU of the fake interface (MTUs, else 1500).
func (f *FakeKernel) LinkMTU(ifindex int) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if m, ok := f.MTUs[ifindex]; ok {
		return m, nil
	}
	return 1500, nil
}

// SetSendBuffer sets SendBuffers[cookie] to 2 × size (the kernel's
// doubling) and returns what it was.
func (f *FakeKernel) SetSendBuffer(pid uint32, cookie uint64, size int) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("SetSendBuffer", fmt.Sprintf("%d %d", cookie, size)); err != nil {
		return 0, err
	}
	old, ok := f.SendBuffers[cookie]
	if !ok {
		return 0, apps.ErrSocketGone
	}
	f.SendBuffers[cookie] = 2 * size
	return old, nil
}

// BindOpenSockets records the call and the protocols it walks.
func (f *FakeKernel) BindOpenSockets(protos ...uint8) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.call("BindOpenSockets", fmt.Sprint(protos))
}
