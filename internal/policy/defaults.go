package policy

// DefaultClassName is the class of traffic no rule puts elsewhere. Every
// policy has it; it may be changed but not removed.
const DefaultClassName = "default"

// NoPriority marks an unset Class.Priority in decoded input (TOML, JSON);
// Normalize replaces it. A validated policy never contains it.
const NoPriority = -1

// MaxPriority is the lowest scheduling priority a class may have (0 is
// the highest): HTB has eight.
const MaxPriority = 7

// defaultCustomPriority is the priority of a class that does not set one
// and is not a built-in: the same as class default.
const defaultCustomPriority = 2

// DSCP values the built-in classes use (RFC 2474, RFC 3246, RFC 2597,
// RFC 8622).
const (
	dscpCS0  = 0
	dscpLE   = 1
	dscpAF41 = 34
	dscpEF   = 46
)

// DefaultClasses returns the built-in classes. Each class's mark asks the
// network for the same treatment relative to best effort as its priority
// gets on the host (docs/concepts.md, "Default classes"):
//
//	voice        EF    priority 0  above best effort on the host and the wire
//	interactive  AF41  priority 1  above
//	default      CS0   priority 2  best effort (user_allowed)
//	bulk         LE    priority 4  below (user_allowed)
//	scavenger    LE    priority 7  below, last on the host (user_allowed)
//
// bulk and scavenger are marked LE (DSCP 1, RFC 8622), the lower-effort
// mark that RFC 8622 puts in place of CS1 for low-priority data (RFC 4594):
// a network that does not know LE forwards it as best effort, never above.
// AF1x would ask for more than best effort (RFC 4594's High-Throughput
// Data). None has a minbw or maxbw: the shaper gives classes without minbw
// an equal share of what the guarantees leave.
func DefaultClasses() []Class {
	return []Class{
		{Name: "voice", DSCP: dscpEF, Priority: 0},
		{Name: "interactive", DSCP: dscpAF41, Priority: 1},
		{Name: DefaultClassName, DSCP: dscpCS0, Priority: 2, UserAllowed: true},
		{Name: "bulk", DSCP: dscpLE, Priority: 4, UserAllowed: true},
		{Name: "scavenger", DSCP: dscpLE, Priority: 7, UserAllowed: true},
	}
}

// builtinClass returns the built-in class of that name.
func builtinClass(name string) (Class, bool) {
	for _, c := range DefaultClasses() {
		if c.Name == name {
			return c, true
		}
	}
	return Class{}, false
}

// DefaultPolicy is the policy with no config: the built-in classes, no
// links, no rules.
func DefaultPolicy() *Policy {
	return &Policy{Classes: DefaultClasses(), Links: []Link{}, Rules: []Rule{}}
}

// Normalize fills unset fields that have defaults: a class's DSCP (NoDSCP)
// and priority (NoPriority) come from the built-in class of the same name,
// else CS0 and priority 2. Load, AddClass and Policy's JSON decoding call
// it; call it yourself after building classes from other input.
func (p *Policy) Normalize() {
	for i := range p.Classes {
		p.Classes[i].fillDefaults()
	}
	if p.Links == nil {
		p.Links = []Link{}
	}
	if p.Classes == nil {
		p.Classes = []Class{}
	}
	if p.Rules == nil {
		p.Rules = []Rule{}
	}
}

// FillDefaults sets an unset DSCP (NoDSCP) and priority (NoPriority) from
// the built-in class of the same name, or the defaults of a custom class,
// as Normalize and the config file do.
func (c *Class) FillDefaults() { c.fillDefaults() }

func (c *Class) fillDefaults() {
	b, ok := builtinClass(c.Name)
	if c.DSCP == NoDSCP {
		c.DSCP = 0
		if ok {
			c.DSCP = b.DSCP
		}
	}
	if c.Priority == NoPriority {
		c.Priority = defaultCustomPriority
		if ok {
			c.Priority = b.Priority
		}
	}
}

// Class returns the class of that name; "" means class default.
func (p *Policy) Class(name string) (Class, bool) {
	if name == "" {
		name = DefaultClassName
	}
	for _, c := range p.Classes {
		if c.Name == name {
			return c, true
		}
	}
	return Class{}, false
}

// Rule returns the rule of that name.
func (p *Policy) Rule(name string) (Rule, bool) {
	for _, r := range p.Rules {
		if r.Name == name {
			return r, true
		}
	}
	return Rule{}, false
}

// Link returns the link of that name.
func (p *Policy) Link(name string) (Link, bool) {
	for _, l := range p.Links {
		if l.Name == name {
			return l, true
		}
	}
	return Link{}, false
}

// ReservableShare is the link's effective reservable fraction.
func (l Link) ReservableShare() float64 {
	if l.Reservable == 0 {
		return DefaultReservable
	}
	return l.Reservable
}

// EffectiveClass is the rule's class name with "" resolved to "default".
func (r Rule) EffectiveClass() string {
	if r.Class == "" {
		return DefaultClassName
	}
	return r.Class
}

// EffectiveAction is the rule's action with "" resolved to pass.
func (r Rule) EffectiveAction() Action {
	if r.Action == "" {
		return ActionPass
	}
	return r.Action
}

// NewRule returns a rule with the given name and every selector and
// property unset (DSCP fields NoDSCP). Use it instead of Rule{} so that DSCP
// fields do not silently mean CS0.
func NewRule(name string) Rule {
	return Rule{Name: name, DSCP: NoDSCP, DSCPIn: NoDSCP}
}

// NewClass returns a class with the given name and nothing else set (DSCP
// NoDSCP, priority NoPriority): FillDefaults or validation fills them.
func NewClass(name string) Class {
	return Class{Name: name, DSCP: NoDSCP, Priority: NoPriority}
}
