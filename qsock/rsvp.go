package qsock

import (
	"context"

	"github.com/hostqos/hostqos/api"
)

// RSVP, RAPI-like (docs/rsvp.md): an application names a session, says it
// sends (a Tspec) or asks a reservation for it (a flowspec), and learns
// what the network granted from the rsvp.* events of the daemon's event
// stream (or RSVPGet). The C library has the same calls (rsvp_session,
// rsvp_sender, rsvp_reserve, rsvp_remove). Root or group hostqos only;
// errors are *Error with an errno as the other calls'.

// RSVPSession creates session name toward dest ("ADDR:PORT", IPv6
// "[ADDR]:PORT") for proto "udp" or "tcp".
func RSVPSession(name, dest, proto string) error {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	_, err := client().RSVP().AddSession(ctx, api.RSVPSessionRequest{Name: name, Dest: dest, Proto: proto})
	return wrap("rsvp_session", err)
}

// RSVPSender makes this host a sender of session name from source port
// port (0: any) within t (r, b, p, m, M in bytes/s and bytes): its Path
// messages carry t toward the receiver.
func RSVPSender(name string, port uint16, t api.Tspec) error {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	_, err := client().RSVP().Sender(ctx, name, api.RSVPSenderRequest{Port: port, Tspec: t})
	return wrap("rsvp_sender", err)
}

// RSVPReserve asks, as the receiver of session name, for service
// "guaranteed" (fs with R and S) or "controlled-load", style "ff" or "se"
// ("" = ff), with a ResvConf when confirm is set.
func RSVPReserve(name, service string, fs api.Tspec, style string, confirm bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	_, err := client().RSVP().Reserve(ctx, name, api.RSVPReserveRequest{Service: service, Flowspec: fs, Style: style, Confirm: confirm})
	return wrap("rsvp_reserve", err)
}

// RSVPGet returns session name with the path and reservation states
// signalling holds for it and its last upcall.
func RSVPGet(name string) (api.RSVPSession, error) {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	s, err := client().RSVP().Get(ctx, name)
	return s, wrap("rsvp_get", err)
}

// RSVPRemove tears session name down (PathTear, ResvTear) and forgets it.
func RSVPRemove(name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	return wrap("rsvp_remove", client().RSVP().Remove(ctx, name))
}
