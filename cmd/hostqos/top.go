package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gdamore/tcell/v2"
	"github.com/spf13/cobra"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/cliflag"
	"github.com/hostqos/hostqos/internal/policy"
)

// topOptions are those of `hostqos top`.
type topOptions struct {
	io       ioStreams
	client   func() apiClient
	iface    func() string  // the interface the empty view suggests
	output   cliflag.Output // when not on a terminal
	sort     string
	filter   string
	interval time.Duration
}

// minRefresh is the shortest refresh of stat -i and top --interval.
const minRefresh = 200 * time.Millisecond

// Sort orders of top (--sort and the s key, in this order).
var topSorts = []string{"rate", "bytes", "drops", "flows", "name"}

func newTopCmd(f *factory) *cobra.Command {
	o := &topOptions{io: f.io, client: f.client, iface: f.iface}
	c := &cobra.Command{
		Use:   "top [--sort rate|bytes|drops|flows|name] [--filter TEXT]",
		Short: "Live full-screen view of apps and their flows: rates, class, limit, drops; change an app's class or limit, or block it",
		Long: `top shows the apps (processes, and containers: one row each, named
runtime/name, its image in the EXE column) that have flows, each with its flows below it
when unfolded: the rate each sends (OUT) and receives (IN) now, bytes each way
and drops so far, and the rule, class and limit that apply. It refreshes every
--interval (1s). An app whose process exited leaves once nothing of it flows
(its flows stay in the flow table until they are evicted).

Keys: ↑/↓ (or k/j) select an app, Enter or space folds its flows in or out,
s changes the sort order, / filters (by command, exe, pid, user or rule),
c puts the selected app in a class, l limits it (a ceiling, e.g. 5mbit; empty
removes the limit), b blocks it (drops all its traffic), u removes what top
did to it, q quits. Every change asks for confirmation (y). A value a prompt
refuses (a limit of 2mbits) stays on the bottom line with why, to correct.

A change makes or changes one rule for the app, named top-<name> (its
executable's file name, or its command name when the executable cannot be
read): selector exe (or comm), precedence one above the rules that match the
app now, so that it decides the app's traffic; it is persistent, like
'hostqos rule add'. For a container the rule is top-ctr-<name>, selector
container (its name). Changing policy needs root or group hostqos: the daemon
refuses anyone else and top shows the refusal.

When standard output is not a terminal, top prints 'hostqos stat apps' once
(-o json: as JSON).`,
		Example: "  hostqos top\n  hostqos top --sort bytes --filter curl\n  hostqos top | head",
		Args:    cobra.NoArgs,
		RunE:    func(*cobra.Command, []string) error { return o.run() },
	}
	c.Flags().StringVar(&o.sort, "sort", "rate", "order apps by "+strings.Join(topSorts, ", "))
	c.Flags().StringVar(&o.filter, "filter", "", "show only apps whose command, exe, pid, uid, rule, container or image contains TEXT")
	durationFlag(c.Flags(), &o.interval, "interval", "", time.Second, "refresh interval, e.g. 2s (at least 200ms)").
		within(minRefresh, 0, "want at least 200ms, e.g. 1s")
	cliflag.AddOutput(c.Flags(), &o.output)
	return c
}

func (o *topOptions) run() error {
	if !slices.Contains(topSorts, o.sort) {
		return usagef("flag --sort = %q: want %s", o.sort, strings.Join(topSorts, ", "))
	}
	cl := o.client()
	if !isTerminal(o.io.Out) {
		c, cancel := apiCtx()
		defer cancel()
		s, err := cl.Stats().Apps(c)
		if err != nil {
			return err
		}
		if o.output == cliflag.JSON {
			return printJSON(o.io.Out, s)
		}
		printStats(o.io.Out, api.StatApps, s, 0, statsHint(cl, o.iface(), api.StatApps, s))
		return nil
	}
	scr, err := tcell.NewScreen()
	if err != nil {
		return fmt.Errorf("open terminal: %w", err)
	}
	if err := scr.Init(); err != nil {
		return fmt.Errorf("open terminal: %w", err)
	}
	defer scr.Fini()
	m := &topModel{sort: o.sort, filter: o.filter, iface: o.iface()}
	return m.loop(scr, cl, o.interval)
}

// topApp is one app of the view: a process and its flows, or a container
// (docs/containers.md) and its flows, whichever of its processes they are.
type topApp struct {
	PID, UID  uint32
	Comm, Exe string
	Exited    bool // the process has exited
	// Container, Runtime and Image name a container's row (PID 0).
	Container, Runtime, Image string
	Flows                     []api.FlowStat
	Rules                     []string // the rules its flows matched
	api.Counter
	In api.Counter // received
}

// Name is how top names the app: a container's name, else its
// executable's file name, else its command name.
func (a topApp) Name() string {
	switch {
	case a.Container != "":
		return a.Container
	case a.Exe != "":
		return filepath.Base(a.Exe)
	}
	return a.Comm
}

// key tells apps apart across refreshes: its pid, or its container.
func (a topApp) key() string {
	if a.Container != "" {
		return "container " + a.Runtime + "/" + a.Container
	}
	return "pid " + strconv.Itoa(int(a.PID))
}

// label is the APP column: the command, or runtime/name of a container.
func (a topApp) label() string {
	if a.Container != "" {
		return a.Runtime + "/" + a.Container
	}
	return a.Comm
}

// topModel is the state of the view; it draws itself and turns keys into
// changes, without a terminal (tests drive it directly).
type topModel struct {
	apps   []topApp // filtered and sorted
	rules  map[string]api.RuleInfo
	order  []string // rule names in evaluation order
	sel    int      // index into apps
	selKey string   // the selected app (topApp.key), kept across refreshes
	open   map[string]bool
	sort   string
	filter string
	top    int // first line shown
	at     time.Time
	status string // the last answer or error
	// unfiltered counts the apps before the filter; hint says why no app
	// shows when the links carried nothing; iface is the interface it
	// suggests managing.
	unfiltered int
	hint       string
	iface      string

	// An input or confirmation in progress (nil: none).
	prompt *topPrompt
	quit   bool
	// drawn, when set (tests), is called after each draw, in the loop.
	drawn func()
}

// topPrompt reads a line (a class, a rate, a filter) or a y/n answer.
type topPrompt struct {
	label   string
	text    string
	err     string                 // why the text was refused; shown until it is edited
	confirm bool                   // a y/n question
	done    func(text string) bool // called with the text (or "y"); false keeps the prompt
	choices []string               // Tab cycles through these
	choice  int
}

// bottom is the prompt's line: label, text, cursor, and why the text
// was refused.
func (p *topPrompt) bottom() string {
	s := p.label + p.text
	if !p.confirm {
		s += "_"
	}
	if p.err != "" {
		s += "   ✗ " + p.err
	}
	return s
}

// update replaces the data with a new reading of flows and rules.
func (m *topModel) update(flows []api.FlowStat, rules []api.RuleInfo, at time.Time) {
	m.at = at
	m.rules = map[string]api.RuleInfo{}
	m.order = m.order[:0]
	for _, ri := range rules {
		m.rules[ri.Rule.Name] = ri
		m.order = append(m.order, ri.Rule.Name)
	}
	byKey := map[string]*topApp{}
	var apps []*topApp
	for _, f := range flows {
		n := topApp{PID: f.PID, UID: f.UID, Comm: f.Comm, Exe: f.Exe, Exited: f.Exited}
		if f.Container != "" { // one row for the container, whichever process sent
			n = topApp{Container: f.Container, Runtime: f.Runtime, Image: f.Image}
		} else if f.PID == 0 {
			continue
		}
		a := byKey[n.key()]
		if a == nil {
			a = &n
			byKey[n.key()] = a
			apps = append(apps, a)
		}
		a.Flows = append(a.Flows, f)
		a.Counter.Add(f.Counter)
		a.In.Add(f.In)
		if f.Rule != "" && !slices.Contains(a.Rules, f.Rule) {
			a.Rules = append(a.Rules, f.Rule)
		}
	}
	m.apps = m.apps[:0]
	m.unfiltered = 0
	for _, a := range apps {
		// A process that exited leaves its flows in the flow table until
		// they are evicted: its row goes once nothing of it flows.
		if a.Exited && a.RateBps == 0 && a.In.RateBps == 0 {
			continue
		}
		m.unfiltered++
		if m.matches(*a) {
			sort.Slice(a.Flows, func(i, j int) bool {
				return a.Flows[i].RateBps+a.Flows[i].In.RateBps > a.Flows[j].RateBps+a.Flows[j].In.RateBps
			})
			m.apps = append(m.apps, *a)
		}
	}
	m.sortApps()
	m.sel = 0
	for i, a := range m.apps {
		if a.key() == m.selKey {
			m.sel = i
		}
	}
	if m.sel < len(m.apps) {
		m.selKey = m.apps[m.sel].key()
	}
}

func (m *topModel) matches(a topApp) bool {
	if m.filter == "" {
		return true
	}
	f := strings.ToLower(m.filter)
	fields := []string{a.Comm, a.Exe, strconv.Itoa(int(a.PID)), strconv.Itoa(int(a.UID))}
	if a.Container != "" {
		fields = []string{a.Runtime + "/" + a.Container, a.Image}
	}
	for _, s := range append(fields, a.Rules...) {
		if strings.Contains(strings.ToLower(s), f) {
			return true
		}
	}
	return false
}

func (m *topModel) sortApps() {
	less := map[string]func(a, b topApp) bool{
		"rate":  func(a, b topApp) bool { return a.RateBps+a.In.RateBps > b.RateBps+b.In.RateBps },
		"bytes": func(a, b topApp) bool { return a.Bytes+a.In.Bytes > b.Bytes+b.In.Bytes },
		"drops": func(a, b topApp) bool { return a.Drops+a.In.Drops > b.Drops+b.In.Drops },
		"flows": func(a, b topApp) bool { return len(a.Flows) > len(b.Flows) },
		"name":  func(a, b topApp) bool { return a.Name() < b.Name() },
	}[m.sort]
	sort.SliceStable(m.apps, func(i, j int) bool {
		a, b := m.apps[i], m.apps[j]
		if less(a, b) != less(b, a) {
			return less(a, b)
		}
		if a.PID != b.PID {
			return a.PID < b.PID
		}
		return a.key() < b.key() // containers (PID 0) by runtime and name
	})
}

// decision is the rule that decides the app's traffic (the first of its
// rules in evaluation order), if any.
func (m *topModel) decision(a topApp) (api.RuleInfo, bool) {
	for _, name := range m.order {
		if slices.Contains(a.Rules, name) {
			return m.rules[name], true
		}
	}
	return api.RuleInfo{}, false
}

// classLimit is what the CLASS and LIMIT columns show for an app.
func (m *topModel) classLimit(a topApp) (class, limit string) {
	ri, ok := m.decision(a)
	if !ok {
		return policy.DefaultClassName, "-"
	}
	r := ri.Rule
	if r.EffectiveAction() == policy.ActionDrop {
		return "-", "blocked"
	}
	var l []string
	if r.MaxBW > 0 {
		l = append(l, "max "+r.MaxBW.String())
	}
	if r.Police > 0 {
		l = append(l, "police "+r.Police.String())
	}
	if r.MaxBWIn > 0 {
		l = append(l, "in "+r.MaxBWIn.String())
	}
	if ri.Quota != nil && ri.Quota.Reached {
		l = append(l, "quota: "+ri.Quota.Action)
	}
	return r.EffectiveClass(), orDash(strings.Join(l, ", "))
}

var topNameRE = regexp.MustCompile(`[^a-z0-9_.-]+`)

// topRuleName is the rule top makes for an app: top-<name>, or
// top-ctr-<name> for a container (so that it is not the rule of an
// executable of the same name).
func topRuleName(a topApp) string {
	n := strings.Trim(topNameRE.ReplaceAllString(strings.ToLower(a.Name()), "-"), "-.")
	if n == "" {
		n = "pid" + strconv.Itoa(int(a.PID))
	}
	if a.Container != "" {
		n = "ctr-" + n
	}
	n = "top-" + n
	if len(n) > policy.MaxNameLen {
		n = n[:policy.MaxNameLen]
	}
	return n
}

// topChange is one change of an app's rule: add it (with its selector and
// precedence) or set fields of it.
type topChange struct {
	Rule   string
	Add    bool
	Fields api.Fields
	Remove bool
}

// change is what a key asks for the app: what is "class", "limit",
// "block" or "undo", value the class or rate ("" clears the limit).
func (m *topModel) change(a topApp, what, value string) (topChange, error) {
	if a.Container == "?" {
		return topChange{}, errors.New("the container of these flows is gone: no rule can select it by name")
	}
	name := topRuleName(a)
	_, exists := m.rules[name]
	if what == "undo" {
		if !exists {
			return topChange{}, fmt.Errorf("top made no rule for %s (%s)", a.Name(), name)
		}
		return topChange{Rule: name, Remove: true}, nil
	}
	f := api.Fields{}
	switch what {
	case "class":
		f["class"], f["action"] = value, nil
	case "limit":
		if value == "" {
			f["maxbw"] = nil
		} else {
			r, err := policy.ParseRate(value)
			if err != nil {
				return topChange{}, err
			}
			f["maxbw"], f["action"] = r, nil
		}
	case "block":
		f["action"] = policy.ActionDrop
		for _, k := range []string{"class", "dscp", "maxbw", "minbw", "police", "burst"} {
			f[k] = nil
		}
	}
	if exists {
		return topChange{Rule: name, Fields: f}, nil
	}
	// The new rule keeps what the rule deciding the app gave it (class,
	// mark, limits; not a guarantee, which admission would count twice)
	// unless the change replaces it.
	if ri, ok := m.decision(a); ok && ri.Rule.EffectiveAction() == policy.ActionPass && what != "block" {
		r := ri.Rule
		keep := api.Fields{}
		if r.Class != "" {
			keep["class"] = r.Class
		}
		if r.DSCP != policy.NoDSCP {
			keep["dscp"] = r.DSCP
		}
		if r.MaxBW > 0 {
			keep["maxbw"] = r.MaxBW
		}
		if r.Police > 0 {
			keep["police"] = r.Police
			if r.Burst > 0 {
				keep["burst"] = r.Burst
			}
		}
		for k, v := range keep {
			if _, set := f[k]; !set {
				f[k] = v
			}
		}
	}
	for k, v := range f {
		if v == nil {
			delete(f, k)
		}
	}
	switch {
	case a.Container != "":
		f["container"] = globQuote(a.Container)
	case a.Exe != "":
		f["exe"] = a.Exe
	default:
		f["comm"] = a.Comm
	}
	prec := 0
	for _, rn := range a.Rules {
		if rn != name {
			prec = max(prec, m.rules[rn].Rule.Precedence)
		}
	}
	f["precedence"] = min(prec+1, policy.MaxPrecedence)
	return topChange{Rule: name, Add: true, Fields: f}, nil
}

// globQuote makes a name a glob that matches it alone (a container
// selector is a glob).
func globQuote(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// describe says what a change does, for the confirmation.
func (c topChange) describe(a topApp) string {
	switch {
	case c.Remove:
		return fmt.Sprintf("remove rule %s (what top did to %s)", c.Rule, a.Name())
	case c.Add:
		return fmt.Sprintf("add rule %s %s", c.Rule, fieldsText(c.Fields))
	}
	return fmt.Sprintf("change rule %s: %s", c.Rule, fieldsText(c.Fields))
}

func fieldsText(f api.Fields) string {
	var s []string
	for _, k := range sortedKeys(f) {
		if f[k] == nil {
			s = append(s, k+"=(unset)")
		} else {
			s = append(s, fmt.Sprintf("%s=%v", k, f[k]))
		}
	}
	return strings.Join(s, " ")
}

func sortedKeys(f api.Fields) []string {
	keys := make([]string, 0, len(f))
	for k := range f {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// apply sends a change to the daemon.
func (c topChange) apply(ctx context.Context, cl apiClient) error {
	switch {
	case c.Remove:
		return cl.Rules().Remove(ctx, c.Rule)
	case c.Add:
		return cl.Rules().AddFields(ctx, c.Rule, c.Fields)
	}
	return cl.Rules().Set(ctx, c.Rule, c.Fields)
}

// loop runs the view until q.
func (m *topModel) loop(scr tcell.Screen, cl apiClient, every time.Duration) error {
	events := make(chan tcell.Event, 16)
	quit := make(chan struct{})
	defer close(quit)
	go scr.ChannelEvents(events, quit)
	var classes []string
	refresh := func() {
		c, cancel := apiCtx()
		defer cancel()
		s, err := cl.Stats().Flows(c)
		if err != nil {
			m.status = "read flows: " + err.Error()
			return
		}
		rules, err := cl.Rules().List(c)
		if err != nil {
			m.status = "read rules: " + err.Error()
			return
		}
		if classes == nil {
			if cs, err := cl.Classes().List(c); err == nil {
				for _, ci := range cs {
					classes = append(classes, ci.Class.Name)
				}
			}
		}
		m.update(s.Flows, rules, s.Time)
		m.hint = ""
		if len(s.Flows) == 0 {
			m.hint = trafficHint(cl, m.iface, noFlowsHint)
		}
	}
	act := func(ch topChange) {
		c, cancel := apiCtx()
		defer cancel()
		if err := ch.apply(c, cl); err != nil {
			m.status = "refused: " + err.Error()
			return
		}
		m.status = "done: " + ch.Rule
		refresh()
	}
	refresh()
	tick := time.NewTicker(every)
	defer tick.Stop()
	for !m.quit {
		m.draw(scr)
		if m.drawn != nil {
			m.drawn()
		}
		select {
		case ev := <-events:
			switch ev := ev.(type) {
			case *tcell.EventKey:
				m.key(ev, classes, act)
			case *tcell.EventResize:
				scr.Sync()
			case nil:
				return nil // the screen was closed
			}
		case <-tick.C:
			refresh()
		}
	}
	return nil
}

// key handles one key press; act applies a confirmed change.
func (m *topModel) key(ev *tcell.EventKey, classes []string, act func(topChange)) {
	if p := m.prompt; p != nil {
		switch ev.Key() {
		case tcell.KeyEscape, tcell.KeyCtrlC:
			m.prompt, m.status = nil, "cancelled"
		case tcell.KeyEnter:
			if p.confirm {
				m.prompt, m.status = nil, "cancelled"
			} else if p.done(p.text) {
				if m.prompt == p {
					m.prompt = nil
				}
			}
		case tcell.KeyBackspace, tcell.KeyBackspace2:
			if len(p.text) > 0 {
				p.text, p.err = p.text[:len(p.text)-1], ""
			}
		case tcell.KeyTab:
			if len(p.choices) > 0 {
				p.text = p.choices[p.choice%len(p.choices)]
				p.choice++
			}
		case tcell.KeyRune:
			if p.confirm {
				m.prompt = nil
				if ev.Rune() == 'y' || ev.Rune() == 'Y' {
					p.done("y")
				} else {
					m.status = "cancelled"
				}
			} else if len(p.text) < 256 {
				p.text, p.err = p.text+string(ev.Rune()), ""
			}
		}
		return
	}
	switch ev.Key() {
	case tcell.KeyUp:
		m.move(-1)
	case tcell.KeyDown:
		m.move(1)
	case tcell.KeyPgUp:
		m.move(-10)
	case tcell.KeyPgDn:
		m.move(10)
	case tcell.KeyEnter:
		m.toggle()
	case tcell.KeyEscape, tcell.KeyCtrlC:
		m.quit = true
	case tcell.KeyRune:
		switch ev.Rune() {
		case 'q':
			m.quit = true
		case 'k':
			m.move(-1)
		case 'j':
			m.move(1)
		case ' ':
			m.toggle()
		case 's':
			i := 0
			for n, s := range topSorts {
				if s == m.sort {
					i = n
				}
			}
			m.sort = topSorts[(i+1)%len(topSorts)]
			m.sortApps()
			m.status = "sorted by " + m.sort
		case '/':
			m.prompt = &topPrompt{label: "filter (empty: all): ", text: m.filter, done: func(t string) bool {
				m.filter = strings.TrimSpace(t)
				return true
			}}
		case 'c', 'l', 'b', 'u':
			m.ask(ev.Rune(), classes, act)
		}
	}
}

// ask starts the prompts of a change to the selected app.
func (m *topModel) ask(k rune, classes []string, act func(topChange)) {
	if m.sel >= len(m.apps) {
		m.status = "no app selected"
		return
	}
	a := m.apps[m.sel]
	confirm := func(what, value string) bool {
		ch, err := m.change(a, what, value)
		if err != nil {
			// The prompt stays for a correction, saying what is wrong.
			if m.prompt != nil {
				m.prompt.err = err.Error()
			}
			m.status = err.Error()
			return false
		}
		m.prompt = &topPrompt{label: ch.describe(a) + "? [y/N] ", confirm: true, done: func(string) bool { act(ch); return true }}
		return true
	}
	switch k {
	case 'c':
		m.prompt = &topPrompt{label: fmt.Sprintf("class for %s (Tab: %s): ", a.Name(), strings.Join(classes, ", ")), choices: classes,
			done: func(t string) bool { return confirm("class", strings.TrimSpace(t)) }}
	case 'l':
		m.prompt = &topPrompt{label: fmt.Sprintf("limit for %s (e.g. 5mbit or 2MB/s; empty: none): ", a.Name()),
			done: func(t string) bool { return confirm("limit", strings.TrimSpace(t)) }}
	case 'b':
		confirm("block", "")
	case 'u':
		confirm("undo", "")
	}
}

func (m *topModel) move(d int) {
	m.sel = max(0, min(len(m.apps)-1, m.sel+d))
	if m.sel < len(m.apps) {
		m.selKey = m.apps[m.sel].key()
	}
}

func (m *topModel) toggle() {
	if m.sel < len(m.apps) {
		if m.open == nil {
			m.open = map[string]bool{}
		}
		k := m.apps[m.sel].key()
		m.open[k] = !m.open[k]
	}
}

// topLine is one line of the view.
type topLine struct {
	text     string
	selected bool
	header   bool
}

// lines lays out the view: a title, the column header, the apps (with the
// flows of the unfolded ones), and at the bottom the prompt or the status.
func (m *topModel) lines() []topLine {
	var total, in api.Counter
	for _, a := range m.apps {
		total.RateBps += a.RateBps
		total.Drops += a.Drops + a.In.Drops
		in.RateBps += a.In.RateBps
	}
	title := fmt.Sprintf("hostqos top — %s — %d apps, sending %s, receiving %s, %d drops — sort: %s (s)  filter: %s (/)  keys: ↑↓ Enter c l b u q",
		m.at.Local().Format("15:04:05"), len(m.apps), humanRate(total.RateBps), humanRate(in.RateBps), total.Drops, m.sort, orDash(m.filter))
	out := []topLine{{text: title}, {text: topRow("PID", "APP", "UID", "FLOWS", "OUT", "IN", "BYTES OUT/IN", "DROPS", "RULE", "CLASS", "LIMIT", "EXE"), header: true}}
	for i, a := range m.apps {
		class, limit := m.classLimit(a)
		rule := "-"
		if ri, ok := m.decision(a); ok {
			rule = ri.Rule.Name
		}
		mark := "+"
		open := m.open[a.key()]
		if open {
			mark = "-"
		}
		pid, uid, exe := strconv.Itoa(int(a.PID)), strconv.Itoa(int(a.UID)), orDash(a.Exe)
		if a.Container != "" { // a container: no one pid or user; its image
			pid, uid, exe = "-", "-", orDash(a.Image)
		}
		out = append(out, topLine{selected: i == m.sel, text: topRow(pid, mark+" "+a.label(), uid,
			strconv.Itoa(len(a.Flows)), humanRate(a.RateBps), humanRate(a.In.RateBps), humanBytes(a.Bytes)+"/"+humanBytes(a.In.Bytes),
			strconv.FormatUint(a.Drops+a.In.Drops, 10), rule, class, limit, exe)})
		if open {
			for _, f := range a.Flows {
				out = append(out, topLine{text: topRow("", "  "+f.Proto, "", "", humanRate(f.RateBps), humanRate(f.In.RateBps), humanBytes(f.Bytes)+"/"+humanBytes(f.In.Bytes),
					strconv.FormatUint(f.Drops+f.In.Drops, 10), orDash(f.Rule), "", "", f.Local+" → "+f.Remote)})
			}
		}
	}
	if len(m.apps) == 0 {
		why := "no app has flows now"
		switch {
		case m.unfiltered > 0:
			why = fmt.Sprintf("no app matches the filter %q (/ changes it)", m.filter)
		case m.hint != "":
			why = m.hint
		}
		for _, l := range wrap(why, 100) {
			out = append(out, topLine{text: "  " + l})
		}
	}
	return out
}

// wrap breaks s into lines of at most width runes, between words.
func wrap(s string, width int) []string {
	var lines []string
	line := ""
	for _, w := range strings.Fields(s) {
		if line != "" && len([]rune(line))+1+len([]rune(w)) > width {
			lines = append(lines, line)
			line = ""
		}
		if line != "" {
			line += " "
		}
		line += w
	}
	return append(lines, line)
}

// topRow lays out the columns of a line.
func topRow(c ...string) string {
	widths := []int{8, 18, 6, 6, 13, 13, 20, 7, 16, 12, 16, 0}
	var b strings.Builder
	for i, s := range c {
		w := widths[i]
		if w > 0 && len([]rune(s)) > w-1 {
			s = string([]rune(s)[:w-2]) + "…"
		}
		if w > 0 {
			s += strings.Repeat(" ", max(1, w-len([]rune(s))))
		}
		b.WriteString(s)
	}
	return b.String()
}

// draw paints the view, keeping the selected app on the screen.
func (m *topModel) draw(scr tcell.Screen) {
	scr.Clear()
	w, h := scr.Size()
	ls := m.lines()
	body := h - 3 // title, header, prompt/status line
	selLine := 0
	for i, l := range ls {
		if l.selected {
			selLine = i - 2
		}
	}
	if selLine < m.top {
		m.top = selLine
	}
	if body > 0 && selLine >= m.top+body {
		m.top = selLine - body + 1
	}
	put := func(y int, s string, st tcell.Style) {
		x := 0
		for _, r := range s {
			if x >= w {
				break
			}
			scr.SetContent(x, y, r, nil, st)
			x++
		}
		for ; x < w && st != tcell.StyleDefault; x++ {
			scr.SetContent(x, y, ' ', nil, st)
		}
	}
	put(0, ls[0].text, tcell.StyleDefault.Bold(true))
	put(1, ls[1].text, tcell.StyleDefault.Reverse(true))
	for i := 0; i < body && m.top+2+i < len(ls); i++ {
		l := ls[m.top+2+i]
		st := tcell.StyleDefault
		if l.selected {
			st = st.Background(tcell.ColorNavy).Foreground(tcell.ColorWhite)
		}
		put(2+i, l.text, st)
	}
	bottom := m.status
	if p := m.prompt; p != nil {
		bottom = p.bottom()
	}
	put(h-1, bottom, tcell.StyleDefault.Bold(true))
	scr.Show()
}
