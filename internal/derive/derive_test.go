package derive

import (
	"errors"
	"net/netip"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hostqos/hostqos/internal/datapath"
	"github.com/hostqos/hostqos/internal/datapath/xdp"
	"github.com/hostqos/hostqos/internal/policy"
	"github.com/hostqos/hostqos/internal/shaper"
)

// The derive is table-tested without any kernel: a policy in, datapath
// rules, reservations and HTB plans out.

// tableResolver resolves app selectors from tables.
type tableResolver struct {
	exes    map[string][]datapath.FileID
	units   map[string][]string
	cgroups map[string]datapath.CgroupRef
}

func (r tableResolver) Exe(p string) (ExeResolution, error) {
	if p == "/broken" {
		return ExeResolution{}, errors.New("out of inotify watches")
	}
	return ExeResolution{IDs: r.exes[p]}, nil
}
func (r tableResolver) Unit(u string) ([]string, error) { return r.units[u], nil }
func (r tableResolver) Cgroup(p string) (datapath.CgroupRef, error) {
	ref, ok := r.cgroups[p]
	if !ok {
		return ref, errors.New("no such cgroup")
	}
	return ref, nil
}
func (r tableResolver) User(n string) (uint32, error) { return policy.ResolveUser(n) }

var testResolver = tableResolver{
	exes:    map[string][]datapath.FileID{"/usr/bin/app": {{Dev: 8, Ino: 42}}},
	units:   map[string][]string{"db.service": {"/system.slice/db.service"}},
	cgroups: map[string]datapath.CgroupRef{"/system.slice/db.service": {ID: 77, Level: 2}},
}

// testInput is an input for p (and shield s, nil: none) with slots given
// in the expansion's order (what a fresh store would give) and eth0 on
// ifindex 2, eth1 on 3.
func testInput(p *policy.Policy, s *Shield) Input {
	in := Input{Policy: p, Shield: s, Resolver: testResolver, Now: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC),
		Ifindexes: map[string]int{"eth0": 2, "eth1": 3}}
	x := Expand(in)
	in.Slots = Slots{Rules: map[string]int{}, Classes: map[string]int{}, Resv: map[string]int{}}
	for i, r := range x.Policy.Rules {
		in.Slots.Rules[r.Name] = i
	}
	for i, c := range x.Policy.Classes {
		in.Slots.Classes[c.Name] = i
	}
	for i, k := range x.ResvKeys {
		in.Slots.Resv[k] = i
	}
	return in
}

func udpRule(name string) policy.Rule {
	return policy.Rule{Name: name, Proto: "udp", DSCP: policy.NoDSCP, DSCPIn: policy.NoDSCP}
}

func basePolicy(links ...policy.Link) *policy.Policy {
	return &policy.Policy{Links: links, Classes: policy.DefaultClasses()}
}

// rule finds the datapath rule of a named rule.
func rule(t *testing.T, in Input, d *Desired, name string) datapath.Rule {
	t.Helper()
	slot, ok := in.Slots.Rules[name]
	if !ok {
		t.Fatalf("rule %s has no slot", name)
	}
	for _, r := range d.Datapath.Rules {
		if int(r.Slot) == slot {
			return r
		}
	}
	t.Fatalf("rule %s (slot %d) is not in the datapath rules", name, slot)
	return datapath.Rule{}
}

func hasMinor(p *shaper.Plan, minor uint16) bool {
	for _, c := range p.Classes {
		if c.Minor == minor {
			return true
		}
	}
	return false
}

func TestDeriveMarkOnly(t *testing.T) {
	p := basePolicy(policy.Link{Name: "eth0"})
	r := udpRule("calls")
	r.Class, r.RPort = "voice", policy.PortRange{From: 3478, To: 3478}
	p.Rules = []policy.Rule{r}
	in := testInput(p, nil)
	d, err := Derive(in)
	if err != nil {
		t.Fatal(err)
	}
	dr := rule(t, in, d, "calls")
	want := datapath.Rule{Slot: 0, Proto: unix.IPPROTO_UDP, RPortFrom: 3478, RPortTo: 3478, DSCP: 46, DSCPIn: -1,
		ActionCode: datapath.ActPass, ServiceClass: 0, ClassID: shaper.ClassLeafID(0), InPrio: 0}
	if !reflect.DeepEqual(dr, want) {
		t.Errorf("datapath rule\n got %+v\nwant %+v", dr, want)
	}
	if len(d.Links) != 1 || d.Links[0].Plan != nil || d.Links[0].XDP || d.Links[0].Ifindex != 2 {
		t.Errorf("links %+v; want eth0 on ifindex 2, mark only", d.Links)
	}
	if d.Datapath.InPrioNone != 2 || len(d.Rules) != 0 || len(d.Acks) != 0 || d.View != "" {
		t.Errorf("desired %+v", d)
	}
}

func TestDeriveShapedRule(t *testing.T) {
	p := basePolicy(policy.Link{Name: "eth0", EgressRate: 20e6}, policy.Link{Name: "eth1", EgressRate: 10e6})
	r := udpRule("backup")
	r.Class, r.MaxBW, r.MinBW = "bulk", 5e6, 1e6
	p.Rules = []policy.Rule{r}
	in := testInput(p, nil)
	d, err := Derive(in)
	if err != nil {
		t.Fatal(err)
	}
	dr := rule(t, in, d, "backup")
	if dr.ClassID != shaper.RuleClassID(dr.Slot) || dr.DSCP != 1 || dr.ServiceClass != 3 {
		t.Errorf("rule %+v: want its own leaf, LE, class bulk", dr)
	}
	if want := []shaper.RuleSpec{{Slot: dr.Slot, Class: 3, MinBW: 1e6, MaxBW: 5e6}}; !reflect.DeepEqual(d.Rules, want) {
		t.Errorf("shaper rules %+v, want %+v", d.Rules, want)
	}
	for _, l := range d.Links {
		if l.Plan == nil || !hasMinor(l.Plan, shaper.RuleLeafMinor(dr.Slot)) || l.QSched != nil {
			t.Errorf("link %s: plan %+v lacks the rule's leaf", l.Name, l.Plan)
			continue
		}
		if l.Plan.Link.Rate != map[string]uint64{"eth0": 20e6, "eth1": 10e6}[l.Name] {
			t.Errorf("link %s planned at %d bit/s", l.Name, l.Plan.Link.Rate)
		}
	}
}

func TestDeriveReservations(t *testing.T) {
	p := basePolicy(policy.Link{Name: "eth0", EgressRate: 20e6, Reservable: 0.8}, policy.Link{Name: "eth1", EgressRate: 20e6})
	g := policy.NewReservation("call")
	g.Service, g.Rate, g.Burst, g.Proto, g.RPort, g.Link = policy.ServiceGuaranteed, 2e6, 16000, "udp", policy.PortRange{From: 5004, To: 5004}, "eth0"
	cl := policy.NewReservation("stream")
	cl.Service, cl.Rate, cl.Burst, cl.Proto = policy.ServiceControlledLoad, 1e6, 8000, "tcp"
	p.Reservations = []policy.Reservation{g, cl}
	r := udpRule("specific") // more specific than any reservation: only precedence puts them first
	r.Remote, r.RPort, r.LPort = netip.MustParsePrefix("198.18.0.2/32"), policy.PortRange{From: 5004, To: 5004}, policy.PortRange{From: 9, To: 9}
	p.Rules = []policy.Rule{r}
	in := testInput(p, nil)
	d, err := Derive(in)
	if err != nil {
		t.Fatal(err)
	}
	if got := d.Datapath.Rules[0].Slot; int(got) == in.Slots.Rules["specific"] {
		t.Error("a user rule is evaluated before the reservations")
	}
	gr := rule(t, in, d, ResvKey("call"))
	if gr.Reservation != uint16(in.Slots.Resv[ResvKey("call")]+1) || gr.ClassID != shaper.RuleClassID(gr.Slot) || gr.DSCP != 46 {
		t.Errorf("guaranteed reservation's rule %+v: want its reservation id, its own leaf, class voice", gr)
	}
	byID := map[uint16]datapath.Reservation{}
	for _, rv := range d.Datapath.Reservations {
		byID[rv.ID] = rv
	}
	sndbuf, queue := datapath.FlowControl(16000, uint32(g.EffMinUnit()), 0)
	if rv := byID[gr.Reservation]; rv.Service != datapath.ServiceGuaranteed || rv.Rate != 250000 || rv.Bucket != 16000 || rv.SendBuffer != sndbuf {
		t.Errorf("guaranteed reservation %+v", rv)
	}
	var spec shaper.RuleSpec
	for _, s := range d.Rules {
		if s.Slot == gr.Slot {
			spec = s
		}
	}
	if spec.QueueLimit != queue || spec.MinBW != uint64(g.EffServiceRate()) || spec.MaxBW != uint64(g.EffServiceRate()) ||
		spec.Tspec == nil || *spec.Tspec != (shaper.TspecShape{ID: gr.Reservation, Rate: 2e6, Bucket: 16000, MaxUnit: 1500}) {
		t.Errorf("guaranteed reservation's leaf %+v (Tspec %+v): want it shaped to the Tspec, queue %d", spec, spec.Tspec, queue)
	}
	l0p, _ := d.Link("eth0")
	if !hasMinor(l0p.Plan, shaper.TspecMinor(gr.Reservation)) {
		t.Error("the shaped reservation's leaf has no class of its own above it")
	}
	l0, _ := d.Link("eth0")
	l1, _ := d.Link("eth1")
	if !hasMinor(l0.Plan, shaper.RuleLeafMinor(gr.Slot)) || hasMinor(l1.Plan, shaper.RuleLeafMinor(gr.Slot)) {
		t.Error("a reservation admitted on eth0 must have its leaf on eth0 only")
	}
	cr := rule(t, in, d, ResvKey("stream"))
	if rv := byID[cr.Reservation]; rv.Service != datapath.ServiceControlledLoad || rv.DemoteClassID != shaper.ClassLeafID(2) || rv.DemoteDSCP != 0 {
		t.Errorf("controlled-load reservation %+v: want excess demoted to the default class", rv)
	}
	if cr.DSCP != 34 {
		t.Errorf("controlled-load rule DSCP %d, want interactive's", cr.DSCP)
	}
}

// TestDeriveEnforcement: enforce picks shaping or policing whatever the
// service: a policed guaranteed reservation is demoted beyond its Tspec
// and guaranteed R in a leaf that may borrow; a shaped controlled-load one
// gets flow control and a leaf shaped to its Tspec.
func TestDeriveEnforcement(t *testing.T) {
	p := basePolicy(policy.Link{Name: "eth0", EgressRate: 20e6})
	g := policy.NewReservation("gp")
	g.Service, g.Enforce, g.Rate, g.ServiceRate, g.Burst, g.Proto = policy.ServiceGuaranteed, policy.EnforcePolice, 1e6, 2e6, 8000, "udp"
	c := policy.NewReservation("cs")
	c.Service, c.Enforce, c.Rate, c.Peak, c.Burst, c.Proto = policy.ServiceControlledLoad, policy.EnforceShape, 1e6, 4e6, 8000, "tcp"
	p.Reservations = []policy.Reservation{g, c}
	in := testInput(p, nil)
	d, err := Derive(in)
	if err != nil {
		t.Fatal(err)
	}
	specs := map[uint16]shaper.RuleSpec{}
	for _, s := range d.Rules {
		specs[s.Slot] = s
	}
	byID := map[uint16]datapath.Reservation{}
	for _, rv := range d.Datapath.Reservations {
		byID[rv.ID] = rv
	}
	gr, cr := rule(t, in, d, ResvKey("gp")), rule(t, in, d, ResvKey("cs"))
	if rv, s := byID[gr.Reservation], specs[gr.Slot]; rv.Service != datapath.ServiceControlledLoad || rv.SendBuffer != 0 || rv.DemoteClassID == 0 ||
		s.Tspec != nil || s.MinBW != 2e6 || s.MaxBW != 0 || gr.DSCP != 46 {
		t.Errorf("policed guaranteed reservation %+v, leaf %+v: want the excess demoted, R guaranteed, class voice", rv, s)
	}
	if rv, s := byID[cr.Reservation], specs[cr.Slot]; rv.Service != datapath.ServiceGuaranteed || rv.SendBuffer == 0 ||
		s.Tspec == nil || s.Tspec.Rate != 1e6 || s.Tspec.Peak != 4e6 || s.QueueLimit == 0 || cr.DSCP != 34 {
		t.Errorf("shaped controlled-load reservation %+v, leaf %+v: want flow control and a leaf shaped to (r, b, p), class interactive", rv, s)
	}
}

func TestDeriveSessionGroups(t *testing.T) {
	p := basePolicy(policy.Link{Name: "eth0", EgressRate: 20e6})
	r := udpRule("game")
	r.MaxSessions, r.PerSessionMaxBW = 3, 1e6
	policed := udpRule("policed")
	policed.MaxSessions, policed.Police = 2, 1e6
	p.Rules = []policy.Rule{r, policed}
	in := testInput(p, nil)
	d, err := Derive(in)
	if err != nil {
		t.Fatal(err)
	}
	dr := rule(t, in, d, "game")
	if dr.ClassID != shaper.ClassLeafID(2) || dr.Reservation == 0 {
		t.Errorf("rule %+v: sessionless traffic to the class's leaf, sessions counted in a group", dr)
	}
	if len(d.Rules) != 1 || d.Rules[0].MaxBW != 3e6 || d.Rules[0].Sessions != 3 || d.Rules[0].SessionMaxBW != 1e6 {
		t.Errorf("shaper rules %+v: want a 3 Mbit/s ceiling with 3 session leaves", d.Rules)
	}
	if len(d.Datapath.Reservations) != 1 || d.Datapath.Reservations[0].Service != datapath.ServiceNone ||
		d.Datapath.Reservations[0].SessionClassID != shaper.SessionClassID(dr.Reservation, 0) {
		t.Errorf("reservations %+v: one session group, of no service, with leaves", d.Datapath.Reservations)
	}
	if pr := rule(t, in, d, "policed"); pr.Reservation != 0 {
		t.Errorf("a policed rule got session group %d", pr.Reservation)
	}
	if r := p.Rules[0]; r.MaxBW != 0 {
		t.Error("the derive changed its input's rule")
	}
}

func TestDeriveProtectedClients(t *testing.T) {
	p := basePolicy(policy.Link{Name: "eth0"})
	p.Rules = []policy.Rule{udpRule("a")}
	admin := netip.MustParseAddrPort("198.51.100.7:443")
	user := netip.MustParseAddrPort("198.51.100.8:0")
	in := testInput(p, &Shield{Protected: []Protected{{Client: user, UID: 1000}, {Client: admin, Admin: true, Class: "voice"}}})
	d, err := Derive(in)
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	names := map[int]string{}
	for n, s := range in.Slots.Rules {
		names[s] = n
	}
	for _, r := range d.Datapath.Rules {
		order = append(order, names[int(r.Slot)])
	}
	want := []string{ProtKey(admin), "a", ProtKey(user)}
	if !slices.Equal(order, want) {
		t.Errorf("evaluation order %v, want %v (admin's client first, a user's in the users' tier)", order, want)
	}
	// The class applies both ways: what the host sends the client (its
	// DSCP and leaf), and on a link with an ingress_rate what it receives
	// from the client (its class's priority level).
	voice, _ := p.Class("voice")
	interactive, _ := p.Class("interactive")
	ar := rule(t, in, d, ProtKey(admin))
	if ar.Proto != unix.IPPROTO_TCP || ar.LPortFrom != 443 || ar.DSCP != 46 || ar.Remote != netip.MustParsePrefix("198.51.100.7/32") || int(ar.InPrio) != voice.Priority {
		t.Errorf("admin's protected client %+v: class voice (EF, receive priority %d)", ar, voice.Priority)
	}
	ur := rule(t, in, d, ProtKey(user))
	if ur.UID == nil || *ur.UID != 1000 || ur.Proto != 0 || ur.DSCP != 34 || int(ur.InPrio) != interactive.Priority {
		t.Errorf("user's protected client %+v: any port, uid 1000, class interactive (AF41, receive priority %d)", ur, interactive.Priority)
	}
	if len(d.Protected) != 2 {
		t.Errorf("XDP protected list %v", d.Protected)
	}
}

func TestDeriveRuntimeView(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC) // a Monday, noon
	night := udpRule("night")
	night.Schedule, night.TimeZone = "Mon-Sun 00:00-06:00", "UTC"
	blocked := udpRule("blocked")
	blocked.Quota, blocked.QuotaAction = 1<<20, "block"
	capped := udpRule("capped")
	capped.Quota, capped.QuotaAction, capped.MaxBW = 1<<20, "limit 1mbit", 5e6
	evented := udpRule("evented")
	evented.Quota = 1 << 20
	for _, shaped := range []bool{true, false} {
		l := policy.Link{Name: "eth0"}
		if shaped {
			l.EgressRate = 20e6
		}
		p := basePolicy(l)
		p.Rules = []policy.Rule{night, blocked, capped, evented}
		in := testInput(p, nil)
		in.Now = now
		in.OverQuota = map[string]bool{"blocked": true, "capped": true, "evented": true}
		d, err := Derive(in)
		if err != nil {
			t.Fatal(err)
		}
		if len(d.Datapath.Rules) != 3 {
			t.Errorf("shaped %v: %d rules; the rule outside its schedule must be left out", shaped, len(d.Datapath.Rules))
		}
		if d.View != "night:off,blocked:block,capped:limit 1mbit" {
			t.Errorf("view %q", d.View)
		}
		if d.View != View(p, now, in.OverQuota) {
			t.Errorf("View() = %q, derive %q", View(p, now, in.OverQuota), d.View)
		}
		if r := rule(t, in, d, "blocked"); r.ActionCode != datapath.ActDrop {
			t.Errorf("over its block quota: %+v", r)
		}
		c := rule(t, in, d, "capped")
		if shaped && (len(d.Rules) != 1 || d.Rules[0].MaxBW != 1e6) {
			t.Errorf("shaped: over its limit quota: shaper rules %+v, want a 1 Mbit/s ceiling", d.Rules)
		}
		if !shaped && c.PoliceRate != 1e6 {
			t.Errorf("unshaped: over its limit quota: %+v, want policed at 1 Mbit/s", c)
		}
		if e := rule(t, in, d, "evented"); e.ActionCode != datapath.ActPass {
			t.Errorf("an event quota changed the rule: %+v", e)
		}
	}
}

func TestDeriveLinks(t *testing.T) {
	dl := udpRule("download")
	dl.MaxBWIn = 8e6
	p := basePolicy(policy.Link{Name: "eth0", IngressRate: 50e6}, policy.Link{Name: "eth1", EgressRate: 20e6, SynRate: 1000},
		policy.Link{Name: "wg0"})
	p.Rules = []policy.Rule{dl}
	in := testInput(p, nil)
	if _, err := Derive(in); !errors.Is(err, ErrNoShield) || !strings.Contains(err.Error(), "link eth1") {
		t.Errorf("SYN limits without the XDP shield: %v", err)
	}
	in.Shield = &Shield{}
	in.QSchedRate = 2e6
	d, err := Derive(in)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(d.Missing, []string{"wg0"}) || len(d.Links) != 2 {
		t.Errorf("missing %v, links %d: wg0 has no interface", d.Missing, len(d.Links))
	}
	l0, _ := d.Link("eth0")
	l1, _ := d.Link("eth1")
	slot := uint16(in.Slots.Rules["download"])
	if l0.Plan == nil || l0.Plan.Link.Rate != shaper.PassRate || !hasMinor(l0.Plan, shaper.AckBase+slot) || l0.QSched != nil || l0.XDP {
		t.Errorf("eth0 (unshaped, a download limit): %+v; want a pass-through tree with the ACK leaf, no XDP", l0)
	}
	if !hasMinor(l1.Plan, shaper.AckBase+slot) || l1.QSched == nil || l1.QSched.Rate != 2e6 || !l1.XDP || l1.Syn.Rate != 1000 {
		t.Errorf("eth1 (shaped, SYN limits): %+v; want the ACK leaf, a 2 Mbit/s qsched class and XDP", l1)
	}
	if want := []datapath.LinkIn{{Ifindex: 2, Rate: 50e6}}; !reflect.DeepEqual(d.Datapath.LinksIn, want) {
		t.Errorf("ingress budgets %v, want %v", d.Datapath.LinksIn, want)
	}
	in.Shield = &Shield{Blocks: []xdp.BlockEntry{{Prefix: netip.MustParsePrefix("203.0.113.0/24")}}}
	d, err = Derive(in)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range d.Links {
		if !l.XDP {
			t.Errorf("link %s: a drop list puts the XDP shield on every managed link", l.Name)
		}
	}
}

func TestDeriveAppSelectors(t *testing.T) {
	p := basePolicy()
	app := udpRule("app")
	app.Exe = "/usr/bin/app"
	gone := udpRule("gone")
	gone.Exe = "/usr/bin/gone"
	db := udpRule("db")
	db.Unit = "db.service"
	p.Rules = []policy.Rule{app, gone, db}
	in := testInput(p, nil)
	in.Runs = []Run{{Rule: "run-x", Cgroup: "/hostqos/run-x", Origin: "/system.slice/db.service"}}
	d, err := Derive(in)
	if err != nil {
		t.Fatal(err)
	}
	if r := rule(t, in, d, "app"); !reflect.DeepEqual(r.Exes, []datapath.FileID{{Dev: 8, Ino: 42}}) {
		t.Errorf("exe: %v", r.Exes)
	}
	for _, r := range d.Datapath.Rules {
		if int(r.Slot) == in.Slots.Rules["gone"] {
			t.Errorf("a rule whose exe matches no file is in the datapath: %+v", r)
		}
	}
	if r := rule(t, in, d, "db"); !reflect.DeepEqual(r.Cgroups, []datapath.CgroupRef{{ID: 77, Level: 2}}) {
		t.Errorf("unit: cgroups %v (a run's cgroup that does not exist is skipped)", r.Cgroups)
	}
	w := strings.Join(d.Warnings, "\n")
	if !strings.Contains(w, `rule "gone"`) || !strings.Contains(strings.Join(d.Resolved["db"], ","), "unit: /system.slice/db.service") {
		t.Errorf("warnings %q, resolved %v", w, d.Resolved)
	}
	broken := udpRule("broken")
	broken.Exe = "/broken"
	p.Rules = append(p.Rules, broken)
	if _, err := Derive(testInput(p, nil)); err == nil || !strings.Contains(err.Error(), `rule "broken"`) {
		t.Errorf("a resolution error that proves nothing must fail the derive: %v", err)
	}
}

// TestDeriveLeavesOutWhatMatchesNothing: a rule whose app selector
// resolves to no file or cgroup is not in the datapath: no identity or
// cgroup id stands for "none" (exe 0:0 is what a socket of a task without
// an executable carries, cgroup id 0 the datapath refuses), so a drop rule
// of a program not installed yet drops nothing, and the policy applies.
func TestDeriveLeavesOutWhatMatchesNothing(t *testing.T) {
	p := basePolicy(policy.Link{Name: "eth0", EgressRate: 20e6})
	noexe := udpRule("noexe")
	noexe.Exe, noexe.Action = "/opt/not-yet/app", policy.ActionDrop
	nocg := udpRule("nocg")
	nocg.Cgroup, nocg.MaxBW = "/system.slice/gone.service", 1e6
	nounit := udpRule("nounit")
	nounit.Unit = "stopped.service"
	other := udpRule("other")
	other.Unit, other.Cgroup = "db.service", "/user.slice" // the unit is elsewhere
	p.Rules = []policy.Rule{noexe, nocg, nounit, other, udpRule("plain")}
	in := testInput(p, nil)
	d, err := Derive(in)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Datapath.Rules) != 1 || int(d.Datapath.Rules[0].Slot) != in.Slots.Rules["plain"] {
		t.Errorf("datapath rules %+v, want only rule plain", d.Datapath.Rules)
	}
	if len(d.Rules) != 0 {
		t.Errorf("shaper rules %+v: a rule that matches nothing needs no leaf", d.Rules)
	}
	for _, name := range []string{"noexe", "nocg", "nounit"} {
		if !strings.Contains(strings.Join(d.Warnings, "\n"), `rule "`+name+`"`) {
			t.Errorf("no warning names rule %s: %q", name, d.Warnings)
		}
	}
}

// TestExpandKeys: the expansion names every reservation and session group
// once, sorted, and every contributed rule by its contributor's prefix.
func TestExpandKeys(t *testing.T) {
	p := basePolicy()
	s := udpRule("s")
	s.MaxSessions = 2
	b := policy.NewReservation("b")
	a := policy.NewReservation("a")
	p.Rules, p.Reservations = []policy.Rule{s}, []policy.Reservation{b, a}
	x := Expand(Input{Policy: p, Shield: &Shield{Protected: []Protected{{Client: netip.MustParseAddrPort("192.0.2.1:22"), Admin: true}}}})
	if want := []string{"resv:a", "resv:b", "rule:s"}; !slices.Equal(x.ResvKeys, want) {
		t.Errorf("reservation keys %v, want %v", x.ResvKeys, want)
	}
	var names []string
	for _, r := range x.Policy.Rules {
		names = append(names, r.Name)
		if r.Name != "s" && !Contributed(r.Name) {
			t.Errorf("contributed rule %q is not named by a contributor's prefix", r.Name)
		}
	}
	sort.Strings(names)
	if want := []string{"prot:192.0.2.1:22", "resv:a", "resv:b", "s"}; !slices.Equal(names, want) {
		t.Errorf("rules %v, want %v", names, want)
	}
	if len(p.Rules) != 1 {
		t.Error("Expand changed its input")
	}
	seen := map[string]bool{}
	for _, c := range contributors {
		if seen[c.prefix] || !strings.HasSuffix(c.prefix, ":") && !strings.HasSuffix(c.prefix, "/") {
			t.Errorf("contributor %s: prefix %q repeated or without ':' or '/'", c.name, c.prefix)
		}
		seen[c.prefix] = true
	}
}
