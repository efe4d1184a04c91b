package fakehost

import (
	"golang.org/x/sys/unix"

	"github.com/hostqos/hostqos/internal/datapath"
)

// FakeQSockKernel is a FakeKernel with qsockets (the engine's
// QSockKernel, its Host.QSockets), in memory: Sockets are the descriptors
// the tests pass (what InspectSocket reads), Table the datapath's qsocket
// table. It fails on demand like the FakeKernel (op "AttachQSock",
// "ChangeQSock", "DetachQSock").
type FakeQSockKernel struct {
	*FakeKernel
	Sockets  map[int]*datapath.SocketInfo
	Table    map[uint32]datapath.QSock
	Counters map[uint32]datapath.QSockCounters
	// QScheds are the links' qsocket schedulers (SetQScheds), by ifindex.
	QScheds map[int]datapath.QSched
}

// NewFakeQSockKernel wraps a fake kernel.
func NewFakeQSockKernel(k *FakeKernel) *FakeQSockKernel {
	return &FakeQSockKernel{FakeKernel: k, Sockets: map[int]*datapath.SocketInfo{},
		Table: map[uint32]datapath.QSock{}, Counters: map[uint32]datapath.QSockCounters{}}
}

// Socket adds descriptor fd: an open UDP/IPv4 socket of owner in the
// datapath's namespace with cookie.
func (f *FakeQSockKernel) Socket(fd int, owner uint32, cookie uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.Sockets[fd] = &datapath.SocketInfo{Cookie: cookie, Owner: owner, Family: unix.AF_INET,
		Type: unix.SOCK_DGRAM, Protocol: unix.IPPROTO_UDP, SameNetns: true}
}

// CloseSocket is the socket's release: its entry is freed, as
// sock_release does.
func (f *FakeQSockKernel) CloseSocket(fd int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if si, ok := f.Sockets[fd]; ok && si.QSock != 0 {
		delete(f.Table, si.QSock)
	}
	delete(f.Sockets, fd)
}

func (f *FakeQSockKernel) InspectSocket(fd int) (datapath.SocketInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	si, ok := f.Sockets[fd]
	if !ok {
		return datapath.SocketInfo{}, unix.ENOTSOCK
	}
	return *si, nil
}

func (f *FakeQSockKernel) AttachQSock(fd int, id uint32, q datapath.QSock) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("AttachQSock", id); err != nil {
		return err
	}
	f.Table[id] = q
	f.Counters[id] = datapath.QSockCounters{Open: true, Cookie: q.Cookie}
	f.Sockets[fd].QSock, f.Sockets[fd].QCookie = id, q.Cookie
	return nil
}

func (f *FakeQSockKernel) ChangeQSock(id uint32, q datapath.QSock) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("ChangeQSock", id); err != nil {
		return err
	}
	f.Table[id] = q
	return nil
}

func (f *FakeQSockKernel) DetachQSock(fd int, id uint32, cookie uint64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("DetachQSock", id); err != nil {
		return err
	}
	delete(f.Table, id)
	if si, ok := f.Sockets[fd]; ok {
		si.QSock, si.QCookie = 0, 0
	}
	return nil
}

func (f *FakeQSockKernel) ReadQSock(id uint32) (datapath.QSockCounters, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.Counters[id], nil
}

func (f *FakeQSockKernel) QSocks() (map[uint32]datapath.QSock, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[uint32]datapath.QSock, len(f.Table))
	for id, q := range f.Table {
		out[id] = q
	}
	return out, nil
}

// SetQScheds records the links' qsocket schedulers (QScheds).
func (f *FakeQSockKernel) SetQScheds(ls map[int]datapath.QSched) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("SetQScheds", len(ls)); err != nil {
		return err
	}
	f.QScheds = ls
	return nil
}
