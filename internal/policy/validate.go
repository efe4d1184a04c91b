package policy

import (
	"fmt"
	"math"
	"net/netip"
	"os/user"
	"path"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"unicode"
)

var (
	nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,62}$`)
	userRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.-]{0,31}\$?$`)
	unitRE = regexp.MustCompile(`^[A-Za-z0-9:_.\\-]+(@[A-Za-z0-9:_.\\-]*)?\.(service|socket|device|mount|automount|swap|target|path|timer|slice|scope)$`)
)

// Protocols a rule may select.
var validProtos = map[string]bool{"": true, "tcp": true, "udp": true, "icmp": true}

// Rule capacity: the most rules a policy may have, and the most of them
// with an app selector (exe, comm, user, cgroup, unit). The datapath is
// sized for exactly these (internal/datapath checks that its compiled
// maps agree), and `hostqos config check` and the daemon refuse a policy
// over them with the same message (Validate).
const (
	MaxRules    = 16384
	MaxAppRules = 2048
)

// MaxPrecedence is the largest Rule.Precedence.
const MaxPrecedence = 65535

// MaxCommLen is the longest task command name the kernel keeps.
const MaxCommLen = 15

// MaxIfaceNameLen is the longest Linux interface name (IFNAMSIZ-1).
const MaxIfaceNameLen = 15

// Bounds of string fields (bytes). Names of rules and classes follow
// nameRE (1..MaxNameLen); links are interface names (MaxIfaceNameLen).
const (
	MaxNameLen = 63   // rule and class names
	MaxPathLen = 4095 // exe and cgroup paths: PATH_MAX less its NUL
	MaxUnitLen = 255  // systemd unit names
	MaxUserLen = 32   // user names (numeric uids are shorter)
	// Container selectors: a name or id pattern, an image pattern (a
	// registry path with tag or digest), a label KEY=VALUE.
	MaxContainerLen = 255
	MaxImageLen     = 1024
	MaxLabelLen     = 1024
	MaxRunCmdLen    = 4096 // the command line shown for a `hostqos run`
)

// validator collects FieldErrors for one policy.
type validator struct {
	src  string
	errs Errors
}

func (v *validator) add(obj, field, value, reason, fix string) {
	v.errs = append(v.errs, &FieldError{Source: v.src, Object: obj, Field: field, Value: Clip(value), Reason: reason, Fix: fix})
}

// addNum is add for a numeric value, printed without quotes.
func (v *validator) addNum(obj, field, value, reason, fix string) {
	v.add(obj, field, value, reason, fix)
	v.errs[len(v.errs)-1].Literal = true
}

// Validate checks the whole policy and returns every problem found as
// Errors (nil when valid). source names where the policy came from (a file
// path, or "api") and is copied into each FieldError. Validate does not
// check admission; see Admit.
func (p *Policy) Validate(source string) error {
	v := &validator{src: source}
	v.links(p)
	v.classes(p)
	v.rules(p)
	v.reservations(p)
	v.blocks(p)
	return v.errs.err()
}

func (v *validator) checkName(kind, name string, idx int, seen map[string]bool) string {
	obj := objectLabel(kind, name, idx)
	switch {
	case name == "":
		v.add(obj, "name", "", "missing", "every "+kind+" needs a name")
	case len(name) > MaxNameLen:
		v.add(obj, "name", name, fmt.Sprintf("too long: %d bytes, at most %d", len(name), MaxNameLen), "e.g. "+suggestName(name))
	case !validName(name):
		v.add(obj, "name", name, "not a valid name", "use 1-63 of a-z 0-9 _ . - starting with a letter or digit, e.g. "+suggestName(name))
	case seen[name]:
		v.add(obj, "name", name, "duplicate "+kind+" name", "names must be unique")
	}
	seen[name] = true
	return obj
}

// validName is nameRE.MatchString(name) without the regexp engine (it
// runs for every object on every validation).
func validName(name string) bool {
	if len(name) == 0 || len(name) > 63 {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case i > 0 && (c == '_' || c == '.' || c == '-'):
		default:
			return false
		}
	}
	return true
}

// suggestName turns s into a valid name, for hints.
func suggestName(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '_', r == '.', r == '-':
			b.WriteRune(r)
		case unicode.IsSpace(r), r == '/':
			b.WriteByte('-')
		}
	}
	out := strings.TrimLeft(b.String(), "_.-")
	if out == "" {
		out = "my-name"
	}
	if len(out) > 63 {
		out = out[:63]
	}
	return out
}

// rateField is a rate field of an object, for maxRates.
type rateField struct {
	name string
	r    Rate
}

// maxRates refuses rates above MaxRate: the parser refuses them in input,
// and this holds a policy built in code to the same bound.
func (v *validator) maxRates(obj string, fs ...rateField) {
	for _, f := range fs {
		if f.r > MaxRate {
			v.addNum(obj, f.name, strconv.FormatUint(uint64(f.r), 10), rateTooHighReason, rateTooHighFix)
		}
	}
}

func (v *validator) links(p *Policy) {
	seen := map[string]bool{}
	for i, l := range p.Links {
		obj := objectLabel("link", l.Name, i)
		for _, f := range []rateField{{"egress_rate", Rate(l.EgressRate)}, {"ingress_rate", Rate(l.IngressRate)}} {
			if f.r != Rate(RateAuto) {
				v.maxRates(obj, f)
			}
		}
		v.autoBounds(obj, "egress", l.EgressRate, l.EgressMin, l.EgressMax)
		v.autoBounds(obj, "ingress", l.IngressRate, l.IngressMin, l.IngressMax)
		if err := checkIfaceName(l.Name); err != "" {
			v.add(obj, "name", l.Name, err, "")
		} else if seen[l.Name] {
			v.add(obj, "name", l.Name, "duplicate link", "list each interface once")
		}
		seen[l.Name] = true
		for _, f := range []struct {
			name string
			v    int
		}{{"syn_rate", l.SynRate}, {"syn_rate_per_source", l.SynRatePerSource}} {
			if f.v < 0 || f.v > MaxSynRate {
				v.addNum(obj, f.name, strconv.Itoa(f.v), fmt.Sprintf("must be 0 (no limit) .. %d SYNs per second", MaxSynRate), "e.g. 1000; leave it out for no limit")
			}
		}
		if in := l.IngressFloor(); l.IngressRate != 0 && (in < MinMaxBWIn || in > MaxMaxBWIn) {
			v.addNum(obj, "ingress_rate", l.IngressRate.String(), fmt.Sprintf("must be %s .. %s", MinMaxBWIn, MaxMaxBWIn),
				"set it a little below the downlink's bottleneck, e.g. 95mbit for 100 Mbit/s; leave it out for none")
		}
		if math.IsNaN(l.Reservable) || l.Reservable < 0 || l.Reservable > 1 {
			v.addNum(obj, "reservable", strconv.FormatFloat(l.Reservable, 'g', -1, 64),
				"must be a fraction in (0, 1]", fmt.Sprintf("e.g. 0.8; leave it out for the default %g", DefaultReservable))
		}
	}
}

// checkIfaceName returns why name is not a valid Linux interface name, or "".
func checkIfaceName(name string) string {
	switch {
	case name == "":
		return "missing; every link needs the interface name, e.g. eth0"
	case len(name) > MaxIfaceNameLen:
		return fmt.Sprintf("interface names are at most %d bytes", MaxIfaceNameLen)
	case name == "." || name == "..":
		return "not a valid interface name"
	case strings.ContainsAny(name, "/:") || strings.IndexFunc(name, unicode.IsSpace) >= 0:
		return "not a valid interface name (no '/', ':' or spaces)"
	}
	return ""
}

func (v *validator) classes(p *Policy) {
	seen := map[string]bool{}
	for i, c := range p.Classes {
		obj := v.checkName("class", c.Name, i, seen)
		v.maxRates(obj, rateField{"minbw", c.MinBW}, rateField{"maxbw", c.MaxBW})
		switch {
		case c.DSCP == NoDSCP:
			v.add(obj, "dscp", "", "missing", "a class needs a DSCP, e.g. EF, AF41, CS0 or 0..63")
		case !c.DSCP.Valid():
			v.addNum(obj, "dscp", strconv.Itoa(int(c.DSCP)), "a class needs a DSCP 0..63", "e.g. EF, AF41, CS0")
		}
		if c.Priority == NoPriority {
			v.add(obj, "priority", "", "missing", "use 0 (highest) .. 7 (lowest)")
		} else if c.Priority < 0 || c.Priority > MaxPriority {
			v.addNum(obj, "priority", strconv.Itoa(c.Priority), "out of range", fmt.Sprintf("use 0 (highest) .. %d (lowest)", MaxPriority))
		}
		if c.MaxBW != 0 && c.MinBW > c.MaxBW {
			v.add(obj, "minbw", c.MinBW.String(), "greater than maxbw "+c.MaxBW.String(), "a guarantee cannot exceed the ceiling")
		}
	}
	if !seen[DefaultClassName] {
		v.add(objectLabel("class", DefaultClassName, 0), "", "", "missing", "the policy must always have class default; change it rather than removing it")
	}
}

func (v *validator) rules(p *Policy) {
	apps := 0
	for _, r := range p.Rules {
		if r.HasAppSelector() {
			apps++
		}
	}
	if n := len(p.Rules); n > MaxRules {
		v.addNum("policy", "rule", strconv.Itoa(n)+" rules", fmt.Sprintf("more rules than hostqos holds (%d)", MaxRules),
			"remove rules, or merge rules with the same properties into one with a wider selector (a prefix, a port range)")
	}
	if apps > MaxAppRules {
		v.addNum("policy", "rule", fmt.Sprintf("%d rules with app selectors", apps), fmt.Sprintf("more rules with an exe, comm, user, cgroup or unit selector than hostqos holds (%d)", MaxAppRules),
			"remove such rules, or select the apps by a common cgroup or unit instead of one rule per executable")
	}
	seen := map[string]bool{}
	for i, r := range p.Rules {
		obj := v.checkName("rule", r.Name, i, seen)
		v.maxRates(obj, rateField{"minbw", r.MinBW}, rateField{"maxbw", r.MaxBW}, rateField{"police", r.Police},
			rateField{"maxbw_in", r.MaxBWIn}, rateField{"per_session_minbw", r.PerSessionMinBW}, rateField{"per_session_maxbw", r.PerSessionMaxBW})
		v.ruleSelectors(obj, r)
		v.ruleProperties(obj, r, p)
		v.sessions(obj, r.MaxSessions, r.PerSessionMinBW, r.PerSessionMaxBW)
		v.quotaSchedule(obj, r)
		if r.MaxSessions > 0 && (r.Police != 0 || r.EffectiveAction() != ActionPass) {
			v.addNum(obj, "max_sessions", strconv.Itoa(r.MaxSessions), "needs action pass and no police (sessions are counted on the rule's passing traffic)",
				"remove police, or put the session limit on a rule of its own")
		}
		if r.Precedence < 0 || r.Precedence > MaxPrecedence {
			v.addNum(obj, "precedence", strconv.Itoa(r.Precedence), "out of range", fmt.Sprintf("use 1..%d (larger is evaluated first) or 0 for unset", MaxPrecedence))
		}
	}
}

func (v *validator) ruleSelectors(obj string, r Rule) {
	for _, f := range []struct {
		name, val string
		max       int
	}{{"exe", r.Exe, MaxPathLen}, {"cgroup", r.Cgroup, MaxPathLen}, {"unit", r.Unit, MaxUnitLen}, {"user", r.User, MaxUserLen},
		{"container", r.Container, MaxContainerLen}, {"image", r.Image, MaxImageLen}, {"container_label", r.ContainerLabel, MaxLabelLen},
		{"class", r.Class, MaxNameLen}, {"proto", r.Proto, MaxNameLen}, {"action", string(r.Action), MaxNameLen}} {
		if msg := checkLen(f.val, f.max); msg != "" {
			v.add(obj, f.name, f.val, msg, "")
			return // one clear message; the other checks would repeat it
		}
	}
	if r.Exe != "" {
		if msg, fix := checkExe(r.Exe); msg != "" {
			v.add(obj, "exe", r.Exe, msg, fix)
		}
	}
	if len(r.Comm) > MaxCommLen {
		v.add(obj, "comm", r.Comm, fmt.Sprintf("longer than %d bytes; the kernel keeps only the first %d", MaxCommLen, MaxCommLen),
			fmt.Sprintf("use comm = %q or match the executable with exe", r.Comm[:MaxCommLen]))
	}
	if r.Cgroup != "" {
		switch c := longComponent(r.Cgroup); {
		case c != "":
			v.add(obj, "cgroup", r.Cgroup, fmt.Sprintf("has a name of %d bytes; cgroup names are at most %d", len(c), MaxNameComponent), "")
		case !strings.HasPrefix(r.Cgroup, "/"):
			v.add(obj, "cgroup", r.Cgroup, "must start with /", "give the path from the cgroup2 root, e.g. /"+Clip(strings.TrimLeft(r.Cgroup, "./")))
		case path.Clean(r.Cgroup) != r.Cgroup:
			v.add(obj, "cgroup", r.Cgroup, "not a clean path", "write "+Clip(path.Clean(r.Cgroup)))
		}
	}
	if r.Unit != "" && (len(r.Unit) > 255 || !unitRE.MatchString(r.Unit)) {
		fix := "e.g. nginx.service, user@1000.service, system.slice"
		if !strings.Contains(r.Unit, ".") && nameRE.MatchString(r.Unit) {
			fix = "did you mean " + r.Unit + ".service?"
		}
		v.add(obj, "unit", r.Unit, "not a systemd unit name", fix)
	}
	v.containerSelectors(obj, r)
	if r.User != "" && !validUser(r.User) {
		v.add(obj, "user", r.User, "not a user name or numeric uid", "e.g. www-data or 33")
	}
	if !validProtos[r.Proto] {
		fix := "use tcp, udp or icmp (icmp also covers icmpv6), or leave it out for any"
		if lp := strings.ToLower(r.Proto); validProtos[lp] {
			fix = "write it in lower case: " + lp
		}
		v.add(obj, "proto", r.Proto, "unknown protocol", fix)
	}
	ports := r.Proto == "tcp" || r.Proto == "udp"
	for _, pf := range []struct {
		name string
		pr   PortRange
	}{{"lport", r.LPort}, {"rport", r.RPort}} {
		if pf.pr.IsZero() {
			continue
		}
		if pf.pr.From == 0 || pf.pr.To < pf.pr.From {
			v.add(obj, pf.name, fmt.Sprintf("%d-%d", pf.pr.From, pf.pr.To), "not a port range", "use 1..65535, FROM-TO with FROM <= TO")
			continue
		}
		if !ports {
			v.add(obj, pf.name, pf.pr.String(), pf.name+" needs --proto tcp or udp", "add proto = \"tcp\" or \"udp\" (ports only exist for those)")
		}
	}
	for _, pf := range []struct {
		name string
		p    netip.Prefix
	}{{"local", r.Local}, {"remote", r.Remote}} {
		if err := checkPrefix(pf.p); err != nil {
			v.add(obj, pf.name, pf.p.String(), err.Error(), "")
		}
	}
	if r.Local.IsValid() && r.Remote.IsValid() && r.Local.Addr().Is4() != r.Remote.Addr().Is4() {
		v.add(obj, "remote", r.Remote.String(), fmt.Sprintf("address family differs from local %s; no packet can match both", r.Local),
			"use two rules, one for IPv4 and one for IPv6")
	}
	if r.DSCPIn != NoDSCP && !r.DSCPIn.Valid() {
		v.addNum(obj, "dscp_in", strconv.Itoa(int(r.DSCPIn)), "out of range", "use 0..63 or a name such as EF")
	}
	if !r.HasSelector() {
		v.add(obj, "", "", "a rule needs at least one selector (exe, comm, cgroup, unit, user, proto, local, remote, lport, rport, dscp_in)",
			"to change unmatched traffic edit class default")
	}
}

func (v *validator) ruleProperties(obj string, r Rule, p *Policy) {
	switch r.Action {
	case "", ActionPass:
	case ActionDrop, ActionObserve:
		var set []string
		if r.Class != "" {
			set = append(set, "class")
		}
		if r.DSCP != NoDSCP {
			set = append(set, "dscp")
		}
		if r.MinBW != 0 {
			set = append(set, "minbw")
		}
		if r.MaxBW != 0 {
			set = append(set, "maxbw")
		}
		if r.Police != 0 {
			set = append(set, "police")
		}
		if r.Burst != 0 {
			set = append(set, "burst")
		}
		if r.MaxBWIn != 0 {
			set = append(set, "maxbw_in")
		}
		if len(set) > 0 {
			v.add(obj, "action", string(r.Action), fmt.Sprintf("%s would be ignored with action %s", strings.Join(set, ", "), r.Action),
				"remove "+strings.Join(set, ", ")+" or use action pass")
		}
	default:
		fix := "use pass, drop or observe"
		if la := Action(strings.ToLower(string(r.Action))); la == ActionPass || la == ActionDrop || la == ActionObserve {
			fix = "write it in lower case: " + string(la)
		}
		v.add(obj, "action", string(r.Action), "unknown action", fix)
	}
	cls, clsOK := p.Class(r.Class)
	if !clsOK {
		v.add(obj, "class", r.EffectiveClass(), "no such class", "defined classes: "+strings.Join(classNames(p), ", ")+"; add it with [[class]] or hostqos class add")
	}
	if r.DSCP != NoDSCP && !r.DSCP.Valid() {
		v.addNum(obj, "dscp", strconv.Itoa(int(r.DSCP)), "out of range", "use 0..63 or a name such as EF")
	}
	if r.MaxBW != 0 && r.MinBW > r.MaxBW {
		v.add(obj, "minbw", r.MinBW.String(), "greater than maxbw "+r.MaxBW.String(), "a guarantee cannot exceed the ceiling")
	}
	switch {
	case r.Police != 0 && r.Police < MinPolice:
		v.add(obj, "police", r.Police.String(), "below "+MinPolice.String(), "police at "+MinPolice.String()+" or more")
	case r.Burst != 0 && r.Police == 0:
		v.add(obj, "burst", r.Burst.String(), "set without police", "add police = RATE or remove burst")
	case r.Burst != 0 && r.Burst < MinPoliceBurst:
		v.add(obj, "burst", r.Burst.String(), "smaller than one full-size Ethernet frame ("+MinPoliceBurst.String()+"): nothing that size would ever pass",
			"use at least "+MinPoliceBurst.String()+"; 64KiB or more for TCP (segmentation offload sends up to 64KiB at once)")
	case r.Burst > MaxPoliceBurst:
		v.add(obj, "burst", r.Burst.String(), "larger than "+MaxPoliceBurst.String(), "use at most "+MaxPoliceBurst.String())
	}
	switch {
	case r.MaxBWIn != 0 && r.MaxBWIn < MinMaxBWIn:
		v.add(obj, "maxbw_in", r.MaxBWIn.String(), "below "+MinMaxBWIn.String()+": TCP cannot be held that low by its window (two segments per round trip)",
			"use "+MinMaxBWIn.String()+" or more, or drop the traffic with action drop")
	case r.MaxBWIn > MaxMaxBWIn:
		v.add(obj, "maxbw_in", r.MaxBWIn.String(), "above "+MaxMaxBWIn.String(), "use at most "+MaxMaxBWIn.String()+" or remove maxbw_in")
	}
	if clsOK && cls.MaxBW != 0 && r.MaxBW > cls.MaxBW {
		v.add(obj, "maxbw", r.MaxBW.String(), fmt.Sprintf("exceeds the maxbw %s of its class %s", cls.MaxBW, cls.Name),
			"lower the rule's maxbw or raise the class's")
	}
}

func classNames(p *Policy) []string {
	out := make([]string, 0, len(p.Classes))
	for _, c := range p.Classes {
		out = append(out, c.Name)
	}
	sort.Strings(out)
	return out
}

// checkLen returns why s is too long (more than max bytes) or holds a NUL
// byte, or "".
func checkLen(s string, max int) string {
	switch {
	case len(s) > max:
		return fmt.Sprintf("too long: %d bytes, at most %d", len(s), max)
	case strings.IndexByte(s, 0) >= 0:
		return "contains a NUL byte"
	}
	return ""
}

// CheckLen is checkLen for other packages' fields (e.g. a run's command
// line): a FieldError naming object, field and the clipped value, or nil.
func CheckLen(obj, field, s string, max int) *FieldError {
	if msg := checkLen(s, max); msg != "" {
		return &FieldError{Object: obj, Field: field, Value: Clip(s), Reason: msg}
	}
	return nil
}

// MaxNameComponent is the longest file name in a path (NAME_MAX).
const MaxNameComponent = 255

// longComponent returns a path component longer than MaxNameComponent.
func longComponent(p string) string {
	for _, c := range strings.Split(p, "/") {
		if len(c) > MaxNameComponent {
			return c
		}
	}
	return ""
}

// checkExe validates an exe selector: absolute, clean, valid glob syntax.
func checkExe(exe string) (msg, fix string) {
	if c := longComponent(exe); c != "" {
		return fmt.Sprintf("has a name of %d bytes (%q); file names are at most %d", len(c), Clip(c), MaxNameComponent), ""
	}
	if !strings.HasPrefix(exe, "/") {
		return "must be an absolute path or glob", "e.g. /usr/bin/" + Clip(path.Base(exe)) + " (see: command -v " + Clip(path.Base(exe)) + ")"
	}
	if _, err := path.Match(exe, ""); err != nil {
		return "bad glob syntax", "check [ ] pairs and escapes; * ? [a-z] are supported"
	}
	if path.Clean(exe) != exe {
		return "not a clean path", "write " + Clip(path.Clean(exe))
	}
	return "", ""
}

// HasAppSelector reports whether the rule selects by app (exe, comm,
// user, cgroup or unit); such rules count against MaxAppRules.
func (r Rule) HasAppSelector() bool {
	return r.Exe != "" || r.Comm != "" || r.Cgroup != "" || r.Unit != "" || r.User != "" || r.HasContainerSelector()
}

// HasContainerSelector reports whether the rule selects containers (by
// name or id, image or label).
func (r Rule) HasContainerSelector() bool {
	return r.Container != "" || r.Image != "" || r.ContainerLabel != ""
}

// IsGlob reports whether an exe selector is a pattern rather than one path.
func IsGlob(exe string) bool { return strings.ContainsAny(exe, "*?[\\") }

func validUser(u string) bool {
	if n, err := strconv.ParseUint(u, 10, 32); err == nil {
		return n != math.MaxUint32 // (uid_t)-1 is "no user"
	}
	return userRE.MatchString(u)
}

// HasSelector reports whether the rule sets any selector.
func (r Rule) HasSelector() bool {
	return r.Exe != "" || r.Comm != "" || r.Cgroup != "" || r.Unit != "" || r.User != "" || r.HasContainerSelector() ||
		r.Proto != "" || r.Local.IsValid() || r.Remote.IsValid() || !r.LPort.IsZero() || !r.RPort.IsZero() ||
		r.DSCPIn != NoDSCP
}

// ResolveUser turns a rule's user selector (a name or a numeric uid) into
// a uid. Numeric uids are returned as they are, whether or not the user
// exists. This is the daemon's job at compile time; Validate only checks
// the syntax.
func ResolveUser(name string) (uint32, error) {
	if n, err := strconv.ParseUint(name, 10, 32); err == nil {
		return uint32(n), nil
	}
	u, err := user.Lookup(name)
	if err != nil {
		return 0, fmt.Errorf("resolve user %q: %w", name, err)
	}
	n, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return 0, fmt.Errorf("resolve user %q: uid %q is not numeric", name, u.Uid)
	}
	return uint32(n), nil
}

func (v *validator) blocks(p *Policy) {
	seen := map[netip.Prefix]bool{}
	for i, b := range p.Blocks {
		name := ""
		if b.Prefix.IsValid() {
			name = b.Prefix.String()
		}
		obj := objectLabel("block", name, i)
		if msg, fix := CheckBlock(b); msg != "" {
			field, val := "prefix", b.Prefix.String()
			if b.Prefix.IsValid() && b.Prefix == b.Prefix.Masked() {
				field, val = "maxbw_in", b.MaxBWIn.String()
			}
			v.add(obj, field, val, msg, fix)
			continue
		}
		if seen[b.Prefix] {
			v.add(obj, "prefix", b.Prefix.String(), "duplicate block", "list each prefix once")
		}
		seen[b.Prefix] = true
	}
}

// CheckBlock returns why a drop-list entry is not valid (and the fix), or
// "": the prefix must be valid and written masked (198.18.0.0/16, not
// 198.18.1.1/16), the quarantine rate unset (drop everything) or
// MinBlockRate..MaxBlockRate.
func CheckBlock(b Block) (msg, fix string) {
	switch {
	case !b.Prefix.IsValid() || b.Prefix.Addr().Zone() != "":
		return "not a valid address prefix", "e.g. 203.0.113.0/24 or 2001:db8:bad::/48"
	case b.Prefix != b.Prefix.Masked():
		return "has bits set beyond the prefix length", "write " + b.Prefix.Masked().String()
	case b.MaxBWIn != 0 && (b.MaxBWIn < MinBlockRate || b.MaxBWIn > MaxBlockRate):
		return fmt.Sprintf("must be %s .. %s, or left out to drop everything", MinBlockRate, MaxBlockRate), "e.g. 1mbit"
	}
	return "", ""
}

// A block's maxbw_in given as 0. Every rate field takes 0 as "no limit"
// (a rule's or a class's maxbw, a rule's maxbw_in), which for a block
// would pass everything; a block that drops everything has no maxbw_in.
// So an explicit 0 is refused rather than read as either.
const (
	ZeroBlockRateReason = "0 is no limit (as for every rate), which would pass everything from the prefix"
	ZeroBlockRateFix    = "leave maxbw_in out to drop everything from the prefix, or quarantine at 8kbit or more, e.g. 1mbit"
)

// CheckProtectedAddr returns why a cannot be a protected client (and the
// fix), or "". A protected client is one host that sends this host SYNs
// over a managed link: not the unspecified address, a broadcast or
// multicast address (no TCP connection comes from one), nor a loopback
// address (its traffic crosses no managed link, and the shield's XDP
// program never sees it).
func CheckProtectedAddr(a netip.Addr) (msg, fix string) {
	fix = "name the client's own address, e.g. 198.51.100.7 or 2001:db8::7"
	a = a.Unmap()
	switch {
	case !a.IsValid() || a.Zone() != "":
		return "not a valid IP address", fix
	case a.IsUnspecified():
		return "the unspecified address is no client", fix
	case a == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		return "the broadcast address is no client", fix
	case a.IsMulticast():
		return "a multicast address opens no TCP connection", fix
	case a.IsLoopback():
		return "a loopback address never crosses a managed link (the host's own connections are not SYN-throttled)", fix
	}
	return "", ""
}
