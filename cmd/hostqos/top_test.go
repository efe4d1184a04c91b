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
	m := &topModel{sort: "rate", open: map[uint32]bool{}}
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
	m.sel, m.selPID = 0, 10
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
	m := &topModel{sort: "name", open: map[uint32]bool{}}
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
	m := &topModel{sort: "rate", open: map[uint32]bool{}}
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
	m := &topModel{sort: "rate", open: map[uint32]bool{}, drawn: func() {
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
