package host

import "github.com/hostqos/hostqos/internal/datapath"

// The qsockets' table in the datapath (engine.QSockKernel).

func (k *System) InspectSocket(fd int) (datapath.SocketInfo, error) {
	return k.DP.InspectSocket(fd)
}
func (k *System) AttachQSock(fd int, id uint32, q datapath.QSock) error {
	return k.DP.AttachQSock(fd, id, q)
}
func (k *System) ChangeQSock(id uint32, q datapath.QSock) error { return k.DP.ChangeQSock(id, q) }
func (k *System) DetachQSock(fd int, id uint32, cookie uint64) error {
	return k.DP.DetachQSock(fd, id, cookie)
}
func (k *System) ReadQSock(id uint32) (datapath.QSockCounters, error) {
	return k.DP.ReadQSock(id)
}
func (k *System) QSocks() (map[uint32]datapath.QSock, error) { return k.DP.QSocks() }
func (k *System) SetQScheds(ls map[int]datapath.QSched) error {
	return k.DP.SetQScheds(ls)
}
