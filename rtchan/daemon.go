package rtchan

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/hostqos/hostqos/api"
)

// Host-wide admission (docs/rtchan.md): a UDPHost admits its channels
// against its own only; two processes could together over-commit a link.
// With UseDaemon it first asks hostqosd, which runs the same D_order test
// (Params.Admit) over every channel on the link, of every process, and
// holds the channel for this process until Close or until the process
// exits; the channel then sends on a socket of its own bound to
// DaemonClass naming the channel (its own leaf on the link). When no
// daemon runs (its socket is absent), the host admits locally only and
// every channel sends on the host's socket, as before.

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
}

// channelConn opens the socket channel id (the daemon's number) sends on:
// a UDP socket of its own beside conn (same network namespace, same local
// address, another port) bound as a qsocket to DaemonClass naming the
// channel, so that its datagrams leave in the channel's own leaf of the
// link's real-time class, at the rate the channel was admitted with.
func (a *hostAdmission) channelConn(conn *net.UDPConn, id uint64) (*net.UDPConn, error) {
	c, err := socketBeside(conn)
	if err != nil {
		return nil, fmt.Errorf("open the socket of channel %d: %w", id, err)
	}
	raw, err := c.SyscallConn()
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("bind the socket of channel %d to class %s: %w", id, DaemonClass, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var aerr error
	if err := raw.Control(func(fd uintptr) {
		_, aerr = a.client.QSockets().Attach(ctx, int(fd), api.QSockParams{Class: DaemonClass, RTChannel: id})
	}); err != nil {
		aerr = err
	}
	if aerr != nil {
		c.Close()
		return nil, fmt.Errorf("bind the socket of channel %d to class %s: %w", id, DaemonClass, aerr)
	}
	return c, nil
}

// UseDaemon makes every later real-time Create ask hostqosd (at socket;
// "" means $HOSTQOS_SOCKET or the default) for admission on the managed
// link first; a refusal names the failing bound. Best-effort channels are
// not admitted and do not ask.
func (h *UDPHost) UseDaemon(socket, link string) {
	h.host = &hostAdmission{client: api.NewClient(socket), link: link, ids: map[ChannelID]uint64{}}
}

// admit asks the daemon; 0 without an error means no daemon runs.
func (a *hostAdmission) admit(spec Spec, dest *net.UDPAddr) (uint64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ch, err := a.client.RTChannels().Admit(ctx, api.RTChannelRequest{Name: spec.Name, Link: a.link, Destination: receiver(dest), MessageBytes: spec.Mmax, Period: spec.MinInterval(), Burst: spec.Bmax, Delay: spec.Delay})
	if errors.Is(err, api.ErrDaemonDown) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("admit channel %q host-wide: %w", spec.Name, err)
	}
	return ch.ID, nil
}

// receiver is dest as the daemon takes it, ip:port ("" when unknown).
func receiver(dest *net.UDPAddr) string {
	if dest == nil {
		return ""
	}
	ap := dest.AddrPort()
	if !ap.Addr().IsValid() {
		return ""
	}
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()).String()
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
