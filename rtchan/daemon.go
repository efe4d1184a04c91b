package rtchan

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/hostqos/hostqos/api"
)

// Host-wide admission (docs/rtchan.md): a UDPHost admits its channels
// against its own only; two processes could together over-commit a link.
// With UseDaemon it first asks hostqosd, which runs the same D_order test
// (Params.Admit) over every channel on the link, of every process, and
// holds the channel for this process until Close or until the process
// exits; the host's socket is then bound to DaemonClass. When no daemon runs (its socket is absent or refuses), the host
// admits locally only, as before.

// DaemonClass is the class the host's socket is bound to once hostqosd
// admitted a channel: voice, the highest strict priority of the default
// classes (EF). An ordinary user needs the admin to open it to them
// (user_allowed), or the channel is released and Create fails.
const DaemonClass = "voice"

// hostAdmission is the daemon a UDPHost asks.
type hostAdmission struct {
	client *api.Client
	link   string
	mu     sync.Mutex
	ids    map[ChannelID]uint64 // local channel → the daemon's
	bound  bool                 // the socket is a qsocket in DaemonClass
}

// bind makes the host's socket a qsocket in DaemonClass (once): every
// channel's datagrams leave in that class's HTB leaf with its mark.
func (a *hostAdmission) bind(conn *net.UDPConn) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.bound {
		return nil
	}
	raw, err := conn.SyscallConn()
	if err != nil {
		return fmt.Errorf("bind channel socket to class %s: %w", DaemonClass, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var aerr error
	if err := raw.Control(func(fd uintptr) {
		_, aerr = a.client.QSockets().Attach(ctx, int(fd), api.QSockParams{Class: DaemonClass})
	}); err != nil {
		aerr = err
	}
	if aerr != nil {
		return fmt.Errorf("bind channel socket to class %s: %w", DaemonClass, aerr)
	}
	a.bound = true
	return nil
}

// UseDaemon makes every later real-time Create ask hostqosd (at socket;
// "" means $HOSTQOS_SOCKET or the default) for admission on the managed
// link first; a refusal names the failing bound. Best-effort channels are
// not admitted and do not ask.
func (h *UDPHost) UseDaemon(socket, link string) {
	h.host = &hostAdmission{client: api.NewClient(socket), link: link, ids: map[ChannelID]uint64{}}
}

// admit asks the daemon; 0 without an error means no daemon runs.
func (a *hostAdmission) admit(spec Spec) (uint64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ch, err := a.client.RTChannels().Admit(ctx, api.RTChannelRequest{Name: spec.Name, Link: a.link, MessageBytes: spec.Mmax, Period: spec.MinInterval(), Burst: spec.Bmax, Delay: spec.Delay})
	if errors.Is(err, api.ErrDaemonDown) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("admit channel %q host-wide: %w", spec.Name, err)
	}
	return ch.ID, nil
}

func (a *hostAdmission) release(id uint64) error {
	if id == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.client.RTChannels().Close(ctx, id); err != nil {
		return fmt.Errorf("release host-wide channel %d: %w", id, err)
	}
	return nil
}

func (a *hostAdmission) keep(local ChannelID, id uint64) {
	a.mu.Lock()
	a.ids[local] = id
	a.mu.Unlock()
}

func (a *hostAdmission) forget(local ChannelID) uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	id := a.ids[local]
	delete(a.ids, local)
	return id
}
