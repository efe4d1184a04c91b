package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"reflect"
	"strings"

	"golang.org/x/term"

	"github.com/hostqos/hostqos/api"
)

// Empty views (docs/cli.md, "Conventions", "Empty views"): a table with
// nothing to show says why and what to do instead of printing a bare
// header; with -o json an empty view stays data (an empty list, [] and not
// null).

// fallbackIface is the interface the hints name when this host's default
// route is unknown.
const fallbackIface = "eth0"

// iface is the interface the hints suggest managing: the default route's,
// else fallbackIface.
func (f *factory) iface() string {
	if f.uplink != nil {
		if s := f.uplink(); s != "" {
			return s
		}
	}
	return fallbackIface
}

// defaultRouteIface is the interface of this namespace's IPv4 default
// route ("" if there is none or /proc/net/route cannot be read).
func defaultRouteIface() string {
	fl, err := os.Open("/proc/net/route")
	if err != nil {
		return ""
	}
	defer fl.Close()
	sc := bufio.NewScanner(io.LimitReader(fl, 1<<20))
	for sc.Scan() {
		// Iface Destination Gateway Flags …; the default route has
		// destination and mask 0.
		f := strings.Fields(sc.Text())
		if len(f) >= 8 && f[1] == "00000000" && f[7] == "00000000" {
			return f[0]
		}
	}
	return ""
}

// noLinkHint is what every traffic view says while no link is managed.
func noLinkHint(iface string) string {
	return fmt.Sprintf("no managed link: hostqos counts and shapes traffic only on managed links; "+
		"add one with `hostqos link set %s --egress-rate 19mbit` (a little below the uplink's rate; docs/concepts.md#managed-links)", iface)
}

// linksHint says why no traffic can show: no managed link, or none
// attached; "" when some managed link is attached.
func linksHint(ls []api.LinkStatus, iface string) string {
	if len(ls) == 0 {
		return noLinkHint(iface)
	}
	var down []string
	for _, l := range ls {
		if l.Attached {
			return ""
		}
		why := "not attached"
		if l.Error != "" {
			why += ": " + l.Error
		}
		down = append(down, l.Name+" ("+why+")")
	}
	return fmt.Sprintf("no managed link is attached: %s; nothing is counted until one is (see hostqos status)", strings.Join(down, ", "))
}

// linkNames lists the managed links for a hint: "eth0", "eth0, wlan0".
func linkNames(ls []api.LinkStatus) string {
	names := make([]string, len(ls))
	for i, l := range ls {
		names[i] = l.Name
	}
	return strings.Join(names, ", ")
}

// trafficHint asks the daemon for the managed links when a traffic view
// came back empty and says why: no link, no attached link, or else what
// the view names (nothing: "", to say nothing more). A failure to ask is
// no reason to fail the view: the hint is then left out.
func trafficHint(c apiClient, iface string, otherwise func(ls []api.LinkStatus) string) string {
	cx, cancel := apiCtx()
	defer cancel()
	ls, err := c.Links().List(cx)
	if err != nil {
		return ""
	}
	if h := linksHint(ls, iface); h != "" {
		return h
	}
	if otherwise == nil {
		return ""
	}
	return otherwise(ls)
}

// noFlowsHint is what the flow and app views say when the managed links
// carried nothing.
func noFlowsHint(ls []api.LinkStatus) string {
	return fmt.Sprintf("no flow on the managed links (%s) now: flows show once traffic crosses them (an ordinary user sees only their own processes' flows)", linkNames(ls))
}

// printHint writes a hint line, if there is one.
func printHint(w io.Writer, hint string) {
	if hint != "" {
		fmt.Fprintln(w, hint)
	}
}

// orHint prints a list with print, or hint when the list is empty.
func orHint[T any](hint string, print func(io.Writer, []T)) func(io.Writer, []T) {
	return func(w io.Writer, xs []T) {
		if len(xs) == 0 {
			fmt.Fprintln(w, hint)
			return
		}
		print(w, xs)
	}
}

// jsonValue is v as -o json prints it: a nil list is an empty one.
func jsonValue(v any) any {
	if rv := reflect.ValueOf(v); rv.Kind() == reflect.Slice && rv.IsNil() {
		return []any{}
	}
	return v
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// Hints of the lists whose emptiness needs no more data.
const (
	noRuleHint = "no rule: all traffic is in class default; add one with " +
		"`hostqos rule add calls --exe '/opt/zoom/*' --class voice` (docs/cli.md#hostqos-rule)"
	noResvHint = "no reservation: ask for one with `hostqos resv add rtp --service guaranteed --proto udp --rport 5004 " +
		"--rate 2mbit --burst 16KiB` on a link with --egress-rate (docs/reservations.md)"
	noQSockHint = "no qsocket open: applications register sockets through libhostqos, the Go package qsock or the Python " +
		"module hostqos (docs/qsockets.md); an ordinary user sees only their own"
	noBlockHint   = "no prefix blocked: block one with `hostqos block add 203.0.113.0/24` (docs/ddos.md)"
	noProtectHint = "no protected client: protect one with `hostqos protect add 198.51.100.20 --port 443` " +
		"(docs/ddos.md); an ordinary user sees only their own"
	noRTChanHint = "no real-time channel admitted: programs open them with `hostqos rtchan open` or " +
		"rtchan.UDPHost.UseDaemon (docs/rtchan.md)"
	noRSVPSessionHint = "no RSVP session: register one with `hostqos rsvp session add rtp --dest 198.18.2.2:5004 --proto udp` " +
		"on the sender and on the receiver (docs/rsvp.md)"
)

// historyHint says why a history answer has nothing: no managed link, or
// nothing recorded in the range.
func historyHint(c apiClient, iface string, h api.History, name string) string {
	return trafficHint(c, iface, func(ls []api.LinkStatus) string {
		what := "nothing recorded"
		if h.Kind == api.HistoryFlows {
			what = "no flow ended"
		}
		if name != "" {
			what += fmt.Sprintf(" for %q", name)
		}
		span := fmt.Sprintf("%s … %s", h.Since.Local().Format("2006-01-02 15:04:05"), h.Until.Local().Format("2006-01-02 15:04:05"))
		if h.Kind == api.HistoryFlows {
			return fmt.Sprintf("%s in %s: flows that are still open show in hostqos stat flows; widen the range with --since, e.g. --since 7d", what, span)
		}
		return fmt.Sprintf("%s in %s: history keeps what crossed the managed links (%s) while hostqosd ran; widen the range with --since, e.g. --since 7d", what, span, linkNames(ls))
	})
}
