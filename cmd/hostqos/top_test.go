package main

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gdamore/tcell/v2"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/policy"
)

func topFlows() []api.FlowStat {
	c := func(rate float64, bytes uint64) api.Counter { return api.Counter{RateBps: rate, Bytes: bytes} }
	return []api.FlowStat{
		{Proto: "tcp", Local: "198.18.0.1:40000", Remote: "198.18.0.2:443", PID: 10, Comm: "zoom", Exe: "/opt/zoom/zoom", Rule: "zoom", Counter: c(1e6, 100)},
		{Proto: "udp", Local: "198.18.0.1:40001", Remote: "198.18.0.2:9000", PID: 10, Comm: "zoom", Exe: "/opt/zoom/zoom", Rule: "zoom", Counter: c(2e6, 50)},
		{Proto: "tcp", Local: "198.18.0.1:40002", Remote: "198.18.0.2:22", PID: 20, Comm: "restic", UID: 1000, Rule: "backup", Counter: c(5e6, 10), In: c(7e6, 5)},
		{Proto: "tcp", Local: "198.18.0.1:40003", Remote: "198.18.0.2:80", PID: 0, Counter: c(9e6, 1)}, // forwarded: no app
	}
}

// TestTopModel: flows grouped into apps with their rates and the class and
// limit of the rule deciding them; sorted and filtered; keys make the
// rule change top documents (top-<name>, exe or comm selector, precedence
// above the app's rules) only after a y.
func TestTopModel(t *testing.T) {
	m := &topModel{sort: "rate"}
	m.update(topFlows(), testRules(), time.Now())
	if len(m.apps) != 2 || m.apps[0].Comm != "restic" || m.apps[1].RateBps != 3e6 || len(m.apps[1].Flows) != 2 {
		t.Fatalf("apps by rate: %+v", m.apps)
	}
	if c, l := m.classLimit(m.apps[0]); c != "default" || l != "max 20mbit" {
		t.Errorf("restic (rule backup): class %s, limit %s", c, l)
	}
	if ls := m.lines(); !strings.Contains(ls[2].text, "5.00mbit/s   7.00mbit/s") || !strings.Contains(ls[2].text, "10B/5B") {
		t.Errorf("restic's row lacks its OUT and IN rates and bytes: %q", ls[2].text)
	}
	m.sort = "bytes"
	m.sortApps()
	if m.apps[0].Comm != "zoom" {
		t.Errorf("by bytes: first %s", m.apps[0].Comm)
	}
	m.filter = "resti"
	m.update(topFlows(), testRules(), time.Now())
	if len(m.apps) != 1 || m.apps[0].PID != 20 {
		t.Fatalf("filter resti: %+v", m.apps)
	}
	m.filter = ""
	m.update(topFlows(), testRules(), time.Now())

	// Select zoom (second by bytes is restic; zoom is first), unfold it.
	m.sel, m.selKey = 0, "pid 10"
	key := func(k tcell.Key, r rune) {
		m.key(tcell.NewEventKey(k, r, tcell.ModNone), []string{"voice", "bulk"}, nil)
	}
	var applied []topChange
	act := func(c topChange) { applied = append(applied, c) }
	press := func(s string) {
		for _, r := range s {
			m.key(tcell.NewEventKey(tcell.KeyRune, r, tcell.ModNone), []string{"voice", "bulk"}, act)
		}
	}
	enter := func() { m.key(tcell.NewEventKey(tcell.KeyEnter, 0, tcell.ModNone), []string{"voice", "bulk"}, act) }
	key(tcell.KeyEnter, 0)
	if ls := m.lines(); len(ls) != 2+2+2 || !strings.Contains(ls[3].text, "198.18.0.2:") {
		t.Errorf("zoom unfolded: %d lines: %+v", len(ls), ls)
	}
	press("c")
	m.key(tcell.NewEventKey(tcell.KeyTab, 0, tcell.ModNone), []string{"voice", "bulk"}, act)
	m.key(tcell.NewEventKey(tcell.KeyTab, 0, tcell.ModNone), []string{"voice", "bulk"}, act)
	enter()
	if m.prompt == nil || !m.prompt.confirm || len(applied) != 0 {
		t.Fatalf("after the class: prompt %+v, applied %v", m.prompt, applied)
	}
	if !strings.Contains(m.prompt.label, "add rule top-zoom") || !strings.Contains(m.prompt.label, "class=bulk") ||
		!strings.Contains(m.prompt.label, "exe=/opt/zoom/zoom") || !strings.Contains(m.prompt.label, "precedence=11") {
		t.Errorf("confirmation: %s", m.prompt.label)
	}
	press("n")
	if len(applied) != 0 || m.prompt != nil {
		t.Fatal("n applied the change")
	}
	press("c")
	press("bulk")
	enter()
	press("y")
	if len(applied) != 1 || !applied[0].Add || applied[0].Fields["class"] != "bulk" || applied[0].Fields["precedence"] != 11 ||
		applied[0].Fields["exe"] != "/opt/zoom/zoom" {
		t.Fatalf("applied %+v", applied)
	}

	// Once top-zoom exists, a limit sets it; an app without exe is selected by comm.
	rules := append(testRules(), api.RuleInfo{Rule: policy.Rule{Name: "top-zoom", Exe: "/opt/zoom/zoom", Class: "bulk", Precedence: 11}})
	m.update(topFlows(), rules, time.Now())
	ch, err := m.change(m.apps[0], "limit", "5mbit")
	if err != nil || ch.Add || ch.Rule != "top-zoom" || ch.Fields["maxbw"] != policy.Rate(5e6) {
		t.Errorf("limit on an existing rule: %+v %v", ch, err)
	}
	if _, err := m.change(m.apps[0], "limit", "fast"); err == nil {
		t.Error("limit fast accepted")
	}
	restic := m.apps[1]
	ch, _ = m.change(restic, "block", "")
	if !ch.Add || ch.Rule != "top-restic" || ch.Fields["comm"] != "restic" || ch.Fields["action"] != policy.ActionDrop || ch.Fields["precedence"] != 1 {
		t.Errorf("block restic: %+v", ch)
	}
	// A class change keeps the limit and mark of the rule deciding the app
	// (backup: maxbw 20mbit, dscp 10), not its guarantee.
	ch, _ = m.change(restic, "class", "bulk")
	if ch.Fields["maxbw"] != policy.Rate(20e6) || ch.Fields["dscp"] != policy.DSCP(10) || ch.Fields["class"] != "bulk" || ch.Fields["minbw"] != nil {
		t.Errorf("class of restic: %+v", ch)
	}
	ch, _ = m.change(restic, "limit", "")
	if _, has := ch.Fields["maxbw"]; has {
		t.Errorf("clearing the limit of restic keeps one: %+v", ch)
	}
	if _, err := m.change(restic, "undo", ""); err == nil {
		t.Error("undo without a top rule accepted")
	}
	press("q")
	if !m.quit {
		t.Error("q does not quit")
	}
}

// TestTopDropsExitedApps: a process that exited leaves its flows in the
// flow table; top drops its row once nothing of it flows (after a daemon
// restart such rows showed "-" for the executable and stayed).
func TestTopDropsExitedApps(t *testing.T) {
	flows := topFlows()
	gone := api.FlowStat{Proto: "udp", Local: "198.18.0.1:40009", Remote: "198.18.0.2:53", PID: 30, Comm: "dig", Exited: true, Counter: api.Counter{Bytes: 300}}
	leaving := api.FlowStat{Proto: "tcp", Local: "198.18.0.1:40010", Remote: "198.18.0.2:80", PID: 31, Comm: "wget", Exited: true,
		In: api.Counter{RateBps: 1e6, Bytes: 5000}} // its child still receives on the socket
	m := &topModel{sort: "name"}
	m.update(append(flows, gone, leaving), testRules(), time.Now())
	var names []string
	for _, a := range m.apps {
		names = append(names, a.Comm)
	}
	if strings.Join(names, " ") != "restic wget zoom" {
		t.Errorf("apps %q, want restic, wget (exited, still receiving) and zoom, not dig (exited, idle)", names)
	}
}

// TestTopPromptShowsInputErrors: a value the prompt refuses (2mbits at the
// limit prompt) keeps the prompt, with why, until it is edited.
func TestTopPromptShowsInputErrors(t *testing.T) {
	m := &topModel{sort: "rate"}
	m.update(topFlows(), testRules(), time.Now())
	var applied []topChange
	key := func(k tcell.Key, r rune) {
		m.key(tcell.NewEventKey(k, r, tcell.ModNone), nil, func(c topChange) { applied = append(applied, c) })
	}
	for _, r := range "l2mbits" {
		key(tcell.KeyRune, r)
	}
	key(tcell.KeyEnter, 0)
	if m.prompt == nil || m.prompt.confirm {
		t.Fatalf("2mbits: prompt %+v", m.prompt)
	}
	if b := m.prompt.bottom(); !strings.Contains(b, `2mbits_   ✗ unknown rate unit "mbits"; write 2mbit`) {
		t.Errorf("bottom line %q does not say why 2mbits was refused", b)
	}
	key(tcell.KeyBackspace2, 0)
	if b := m.prompt.bottom(); strings.Contains(b, "✗") || !strings.HasSuffix(b, "2mbit_") {
		t.Errorf("after an edit the error stays: %q", b)
	}
	key(tcell.KeyBackspace2, 0)
	key(tcell.KeyBackspace2, 0)
	for _, r := range "ps" {
		key(tcell.KeyRune, r)
	}
	key(tcell.KeyEnter, 0)
	if b := m.prompt.bottom(); !strings.Contains(b, "2mbps is ambiguous") || len(applied) != 0 {
		t.Errorf("2mbps: %q, applied %v", b, applied)
	}
}

// TestTopPlainWhenPiped: with standard output not a terminal, top prints
// the apps table of `stat apps` once.
func TestTopPlainWhenPiped(t *testing.T) {
	c := &fakeClient{stats: map[string]api.Stats{api.StatApps: {Apps: []api.AppStat{{PID: 7, Comm: "curl", Flows: 1, Counter: api.Counter{RateBps: 8e6}}}}}}
	out, errOut, code := runFake(c, "top")
	if code != 0 || !strings.Contains(out, "curl") || !strings.Contains(out, "PID") {
		t.Fatalf("top | cat: code %d, out %q, err %q", code, out, errOut)
	}
	if _, _, code := runFake(c, "top", "--sort", "speed"); code == 0 {
		t.Error("--sort speed accepted")
	}
}

// refusingClient is a fakeClient whose daemon refuses rule changes, as it
// does for a user without the right to change policy.
type refusingClient struct{ *fakeClient }

func (c refusingClient) Rules() api.RulesAPI { return refusingRules{fakeRules{c.fakeClient}} }

type refusingRules struct{ fakeRules }

var errRefused = errors.New("hostqosd POST /v1/rules: changing policy needs root or group hostqos")

func (refusingRules) AddFields(context.Context, string, api.Fields, ...api.ChangeOption) error {
	return errRefused
}

// TestTopScreenShowsRefusal: on a (simulated) terminal, top draws the app,
// and a confirmed change the daemon refuses shows the refusal on the
// bottom line; q ends it.
func TestTopScreenShowsRefusal(t *testing.T) {
	fc := &fakeClient{rules: testRules(), stats: map[string]api.Stats{api.StatFlows: {Flows: topFlows()}}}
	scr := tcell.NewSimulationScreen("UTF-8")
	if err := scr.Init(); err != nil {
		t.Fatal(err)
	}
	defer scr.Fini()
	scr.SetSize(200, 20)
	var mu sync.Mutex
	shown := ""
	m := &topModel{sort: "rate", drawn: func() {
		// In the loop's goroutine, right after it drew.
		cells, w, _ := scr.GetContents()
		var b strings.Builder
		for i, c := range cells {
			if i > 0 && i%w == 0 {
				b.WriteByte('\n')
			}
			b.Write(c.Bytes)
		}
		mu.Lock()
		shown = b.String()
		mu.Unlock()
	}}
	done := make(chan error, 1)
	go func() { done <- m.loop(scr, refusingClient{fc}, time.Hour) }()
	text := func() string {
		mu.Lock()
		defer mu.Unlock()
		return shown
	}
	wait := func(what string) {
		t.Helper()
		for range 200 {
			if strings.Contains(text(), what) {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Fatalf("screen never shows %q:\n%s", what, text())
	}
	wait("restic")
	scr.InjectKey(tcell.KeyRune, 'b', tcell.ModNone)
	wait("add rule top-restic action=drop comm=restic precedence=1? [y/N]")
	scr.InjectKey(tcell.KeyRune, 'y', tcell.ModNone)
	wait("refused: " + errRefused.Error())
	scr.InjectKey(tcell.KeyRune, 'q', tcell.ModNone)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("q does not end top")
	}
}

// TestTopContainers: a container is one row, whichever of its processes
// sent (runtime/name, its image in the EXE column, no pid), and unfolds to
// its flows; top's actions on it make a rule selecting the container by
// name (top-ctr-<name>), not an executable of it.
func TestTopContainers(t *testing.T) {
	c := func(rate float64, bytes uint64) api.Counter { return api.Counter{RateBps: rate, Bytes: bytes} }
	db := func(local string, pid uint32, rate float64) api.FlowStat {
		return api.FlowStat{Proto: "tcp", Local: local, Remote: "198.18.0.9:5432", PID: pid, Comm: "postgres", Exe: "/usr/lib/postgresql/bin/postgres",
			Container: "db", Runtime: "docker", Image: "docker.io/library/postgres:16", Counter: c(rate, 10)}
	}
	flows := append(topFlows(),
		db("198.19.0.2:40000", 501, 8e6), // a socket made in the container
		db("198.19.0.2:40001", 0, 6e6),   // classified at its veth: no process known
		api.FlowStat{Proto: "udp", Local: "198.19.0.3:53", Remote: "198.18.0.9:53", Container: "?", Counter: c(1, 1)}, // a container gone
	)
	m := &topModel{sort: "rate"}
	m.update(flows, testRules(), time.Now())
	var ctr topApp
	for _, a := range m.apps {
		if a.Container == "db" {
			ctr = a
		}
		if a.PID == 501 {
			t.Errorf("a process of the container has a row of its own: %+v", a)
		}
	}
	if len(ctr.Flows) != 2 || ctr.RateBps != 14e6 {
		t.Fatalf("container db: %+v (apps %+v)", ctr, m.apps)
	}
	if m.apps[0].Container != "db" {
		t.Errorf("by rate the container (14 mbit/s) is not first: %+v", m.apps[0])
	}
	m.sel, m.selKey = 0, m.apps[0].key()
	m.toggle()
	ls := m.lines()
	row := ls[2].text
	if !strings.HasPrefix(row, "-       - docker/db") || !strings.Contains(row, "docker.io/library/postgres:16") || strings.Contains(row, "501") {
		t.Errorf("container row %q: want no pid, docker/db, its image", row)
	}
	if !strings.Contains(ls[3].text, "198.19.0.2:4000") || !strings.Contains(ls[4].text, "198.19.0.2:4000") {
		t.Errorf("container db unfolded does not show its two flows: %q", ls[3].text+" | "+ls[4].text)
	}
	// The selection stays on the container across a refresh.
	m.update(flows, testRules(), time.Now())
	if m.apps[m.sel].Container != "db" {
		t.Errorf("after a refresh the selection moved to %+v", m.apps[m.sel])
	}
	m.filter = "postgres:16"
	m.update(flows, testRules(), time.Now())
	if len(m.apps) != 1 || m.apps[0].Container != "db" {
		t.Errorf("filter by image: %+v", m.apps)
	}
	m.filter = ""
	m.update(flows, testRules(), time.Now())

	var applied []topChange
	act := func(c topChange) { applied = append(applied, c) }
	for _, r := range "l5mbit" {
		m.key(tcell.NewEventKey(tcell.KeyRune, r, tcell.ModNone), nil, act)
	}
	m.key(tcell.NewEventKey(tcell.KeyEnter, 0, tcell.ModNone), nil, act)
	if m.prompt == nil || !strings.Contains(m.prompt.label, "add rule top-ctr-db container=db maxbw=5mbit precedence=1?") {
		t.Errorf("confirmation of a limit on container db: %+v", m.prompt)
	}
	m.key(tcell.NewEventKey(tcell.KeyRune, 'y', tcell.ModNone), nil, act)
	if len(applied) != 1 {
		t.Fatalf("limit 5mbit on the container: applied %+v, prompt %+v, status %q", applied, m.prompt, m.status)
	}
	ch := applied[0]
	if !ch.Add || ch.Rule != "top-ctr-db" || ch.Fields["container"] != "db" || ch.Fields["maxbw"] != policy.Rate(5e6) {
		t.Errorf("limit on container db: %+v", ch)
	}
	for _, k := range []string{"exe", "comm"} {
		if _, has := ch.Fields[k]; has {
			t.Errorf("the container's rule selects by %s too: %+v", k, ch.Fields)
		}
	}
	// The rule validates: it is what `hostqos rule add top-ctr-db --container db --maxbw 5mbit` makes.
	r := policy.NewRule(ch.Rule)
	r.Container, r.MaxBW = ch.Fields["container"].(string), 5e6
	p := policy.DefaultPolicy()
	p.Rules = append(p.Rules, r)
	if err := p.Validate("api"); err != nil {
		t.Errorf("top's container rule does not validate: %v", err)
	}
	// Once it exists, block changes it; undo removes it.
	rules := append(testRules(), api.RuleInfo{Rule: policy.Rule{Name: "top-ctr-db", Container: "db", MaxBW: 5e6, Precedence: 1}})
	m.update(flows, rules, time.Now())
	if ch, err := m.change(ctr, "block", ""); err != nil || ch.Add || ch.Rule != "top-ctr-db" || ch.Fields["action"] != policy.ActionDrop {
		t.Errorf("block container db: %+v %v", ch, err)
	}
	if ch, err := m.change(ctr, "undo", ""); err != nil || !ch.Remove || ch.Rule != "top-ctr-db" {
		t.Errorf("undo on container db: %+v %v", ch, err)
	}
	// A name with glob characters selects that container alone.
	if ch, err := m.change(topApp{Container: "a*b", Runtime: "netns"}, "class", "bulk"); err != nil || ch.Fields["container"] != `a\*b` {
		t.Errorf("container a*b: %+v %v", ch, err)
	}
	// A container that is gone cannot be named by a rule.
	if _, err := m.change(topApp{Container: "?"}, "class", "bulk"); err == nil {
		t.Error("a rule for a container that is gone accepted")
	}
}
