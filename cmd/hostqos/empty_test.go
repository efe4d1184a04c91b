package main

import (
	"bytes"
	"context"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/policy"
)

// TestEmptyViewsSayWhatToDo: on a fresh install (the shipped config: no
// link, no rule) every view that would show nothing says why and what to
// do — manage a link — instead of a bare header or nothing at all.
func TestEmptyViewsSayWhatToDo(t *testing.T) {
	const noLink = "no managed link: hostqos counts and shapes traffic only on managed links; add one with `hostqos link set eth0 --egress-rate 19mbit`"
	fresh := api.Status{Counts: api.Counts{Classes: 5}, Daemon: api.DaemonStatus{Version: "1", Started: time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)}}
	out := t.TempDir()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"status"}, noLink},
		{[]string{"link", "list"}, noLink},
		{[]string{"stat"}, noLink},
		{[]string{"stat", "rules"}, noLink},
		{[]string{"stat", "classes"}, noLink},
		{[]string{"stat", "links"}, noLink},
		{[]string{"stat", "apps"}, noLink},
		{[]string{"stat", "flows"}, noLink},
		{[]string{"top"}, noLink}, // not on a terminal: stat apps
		{[]string{"stat", "history"}, noLink},
		{[]string{"stat", "history", "flows"}, noLink},
		{[]string{"plot", "--out", filepath.Join(out, "p.png")}, noLink},
		{[]string{"rule", "list"}, "no rule: all traffic is in class default; add one with `hostqos rule add"},
		{[]string{"resv", "list"}, "no reservation: ask for one with `hostqos resv add"},
		{[]string{"block", "list"}, "no prefix blocked: block one with `hostqos block add"},
		{[]string{"protect", "list"}, "no protected client: protect one with `hostqos protect add"},
	} {
		got, errOut, code := runFake(&fakeClient{status: fresh}, c.args...)
		if code != exitOK || !strings.Contains(got, c.want) {
			t.Errorf("hostqos %s: exit %d, %s%s\ndoes not say %q", strings.Join(c.args, " "), code, got, errOut, c.want)
		}
		if strings.Contains(got, "OUT RATE") || strings.Contains(got, "PREFIX  ") || strings.Contains(got, "RULE  ") {
			t.Errorf("hostqos %s prints an empty table:\n%s", strings.Join(c.args, " "), got)
		}
	}

	// The other lists, empty.
	for _, c := range []struct {
		print func(*bytes.Buffer)
		want  string
	}{
		{func(w *bytes.Buffer) { orHint(noQSockHint, printQSocks)(w, nil) }, "no qsocket open: applications register sockets through libhostqos"},
		{func(w *bytes.Buffer) { orHint(noRTChanHint, printRTChannels)(w, nil) }, "no real-time channel admitted"},
		{func(w *bytes.Buffer) { printRSVPStatus(w, api.RSVPStatus{Enabled: true}) }, "no RSVP session: register one with `hostqos rsvp session add"},
	} {
		var b bytes.Buffer
		c.print(&b)
		if !strings.Contains(b.String(), c.want) {
			t.Errorf("empty view:\n%s\ndoes not say %q", b.String(), c.want)
		}
	}
}

// TestEmptyViewsWithALink: with a managed link the traffic views say what
// is missing instead: flows (naming the link), rules; a link that is not
// attached is named with why. The hint names the default route's
// interface when there is one.
func TestEmptyViewsWithALink(t *testing.T) {
	eth0 := api.LinkStatus{Link: policy.Link{Name: "eth0"}, Attached: true}
	for _, c := range []struct {
		links []api.LinkStatus
		args  []string
		want  string
	}{
		{[]api.LinkStatus{eth0}, []string{"stat", "flows"}, "no flow on the managed links (eth0) now: flows show once traffic crosses them"},
		{[]api.LinkStatus{eth0}, []string{"stat", "apps"}, "no flow on the managed links (eth0) now"},
		{[]api.LinkStatus{eth0}, []string{"stat", "rules"}, "no rule: all traffic is in class default"},
		{[]api.LinkStatus{eth0}, []string{"stat", "history", "rules", "web"}, `nothing recorded for "web" in`},
		{[]api.LinkStatus{{Link: policy.Link{Name: "eth1"}, Error: "no such interface"}}, []string{"stat", "flows"},
			"no managed link is attached: eth1 (not attached: no such interface)"},
	} {
		got, errOut, code := runFake(&fakeClient{links: c.links}, c.args...)
		if code != exitOK || !strings.Contains(got, c.want) {
			t.Errorf("hostqos %s with links %v: exit %d, %s%s\ndoes not say %q", strings.Join(c.args, " "), c.links, code, got, errOut, c.want)
		}
	}
	// A view with traffic asks nothing more and says nothing more.
	fc := &fakeClient{stats: map[string]api.Stats{api.StatFlows: {Flows: []api.FlowStat{{Proto: "tcp", Counter: api.Counter{Bytes: 1, Packets: 1}}}}}}
	if got, _, _ := runFake(fc, "stat", "flows"); strings.Contains(got, "no ") || len(fc.calls) != 1 {
		t.Errorf("stat flows with a flow: calls %q\n%s", fc.calls, got)
	}

	var out bytes.Buffer
	f := newFactory(ioStreams{Out: &out, Err: &out})
	f.newClient = func() apiClient { return &fakeClient{} }
	f.uplink = func() string { return "wlp2s0" }
	root := newRootCmd(f)
	root.SetArgs([]string{"link", "list"})
	if err := execute(f, root); err != nil || !strings.Contains(out.String(), "`hostqos link set wlp2s0 --egress-rate 19mbit`") {
		t.Errorf("link list: %v\n%s\nwant the default route's interface in the hint", err, out.String())
	}
}

// TestEmptyJSONIsAList: -o json stays data: an empty list is [], not null
// and not a hint.
func TestEmptyJSONIsAList(t *testing.T) {
	for _, args := range [][]string{{"rule", "list"}, {"link", "list"}, {"resv", "list"}, {"block", "list"}} {
		got, _, code := runFake(&fakeClient{}, append(args, "-o", "json")...)
		if code != exitOK || got != "[]\n" {
			t.Errorf("hostqos %s -o json: exit %d, %q; want []", strings.Join(args, " "), code, got)
		}
	}
}

// TestTopEmpty: the full-screen top says why it shows no app: no managed
// link (the hint), or a filter that hides every app.
func TestTopEmpty(t *testing.T) {
	m := &topModel{sort: "rate", hint: noLinkHint("eth0")}
	m.update(nil, nil, time.Now())
	text := ""
	for _, l := range m.lines() {
		text += l.text + "\n"
	}
	text = strings.Join(strings.Fields(text), " ") // as wrapped for the screen
	if !strings.Contains(text, "no managed link: hostqos counts and shapes traffic only on managed") ||
		!strings.Contains(text, "`hostqos link set eth0 --egress-rate 19mbit`") {
		t.Errorf("top without a link:\n%s", text)
	}
	m = &topModel{sort: "rate", filter: "zoom"}
	m.update([]api.FlowStat{{PID: 7, Comm: "curl", Counter: api.Counter{RateBps: 1}}}, nil, time.Now())
	text = ""
	for _, l := range m.lines() {
		text += l.text + "\n"
	}
	if !strings.Contains(text, `no app matches the filter "zoom" (/ changes it)`) {
		t.Errorf("top with a filter that hides every app:\n%s", text)
	}
}

// TestEventsSaysItWaits: following events on a terminal first says that
// nothing shows until something happens (on standard error); piped, the
// stream has only events.
func TestEventsSaysItWaits(t *testing.T) {
	for _, tty := range []bool{true, false} {
		var out, errOut bytes.Buffer
		o := &eventsOptions{io: ioStreams{Out: &out, Err: &errOut}, since: -1, count: 1,
			client: func() apiClient { return &fakeClient{events: []api.Event{{Seq: 1, Kind: "rule.added"}}} },
			tty:    func(w io.Writer) bool { return tty && w == io.Writer(&errOut) }}
		if err := o.run(context.Background()); err != nil {
			t.Fatal(err)
		}
		said := strings.Contains(errOut.String(), "waiting for events (none is printed until something happens")
		if said != tty || !strings.Contains(out.String(), "rule.added") {
			t.Errorf("terminal %v: stderr %q, stdout %q", tty, errOut.String(), out.String())
		}
	}
}
