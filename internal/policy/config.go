package policy

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/BurntSushi/toml"
)

// DefaultConfigPath is where hostqosd reads its config by default.
const DefaultConfigPath = "/etc/hostqos/hostqos.toml"

// Config file keys, per table, in canonical order.
var (
	linkKeys  = []string{"name", "egress_rate", "reservable"}
	classKeys = []string{"name", "dscp", "priority", "minbw", "maxbw", "user_allowed"}
	ruleKeys  = []string{"name", "exe", "comm", "cgroup", "unit", "user", "proto", "local", "remote", "lport", "rport", "dscp_in",
		"class", "dscp", "maxbw", "minbw", "police", "burst", "action", "precedence"}
	topKeys = []string{"link", "class", "rule", "builtin_classes"}
)

// LoadFile reads and loads a config file (see Load). A missing file gives
// an error wrapping fs.ErrNotExist, so the caller can decide to run with
// DefaultPolicy instead.
func LoadFile(path string) (*Policy, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read config %s: %w", path, err)
	}
	return Load(data, path)
}

// Load parses a TOML config and returns the complete policy: the built-in
// classes (DefaultClasses) merged with the file's [[class]] entries, its
// [[link]] and [[rule]] entries, normalized, validated and admitted.
//
// Decoding is strict: unknown keys, wrong types and malformed values are
// errors. Every problem found is returned at once as Errors, each naming
// source (the file), the line, the object, the field and the value. A TOML
// syntax error stops decoding and is reported alone.
//
// A [[class]] whose name is a built-in class replaces it; the fields it
// leaves out keep the built-in's values. builtin_classes = false leaves the
// built-ins out, except class default, which every policy has.
func Load(data []byte, source string) (*Policy, error) {
	var raw map[string]any
	if _, err := toml.Decode(string(data), &raw); err != nil {
		fe := &FieldError{Source: source, Reason: "invalid TOML: " + err.Error()}
		var pe toml.ParseError
		var ppe *toml.ParseError
		switch {
		case errors.As(err, &pe):
			fe.Line, fe.Reason = pe.Position.Line, "invalid TOML: "+pe.Message
		case errors.As(err, &ppe):
			fe.Line, fe.Reason = ppe.Position.Line, "invalid TOML: "+ppe.Message
		}
		return nil, Errors{fe}
	}
	ld := &loader{src: source, loc: locateKeys(data), lines: map[string]int{}, bad: map[string]bool{}}
	p := ld.policy(raw)
	p.Normalize()

	errs := ld.errs
	for _, e := range AsErrors(p.Validate(source)) {
		if ld.bad[e.Object+"\x00"+e.Field] || (e.Field == "" && ld.bad[e.Object+"\x00"]) {
			continue // already reported as a decoding error
		}
		errs = append(errs, e)
	}
	errs = append(errs, AsErrors(p.Admit(source))...)
	for _, e := range errs {
		if e.Line == 0 {
			if l, ok := ld.lines[e.Object+"\x00"+e.Field]; ok {
				e.Line = l
			} else {
				e.Line = ld.lines[e.Object+"\x00"]
			}
		}
	}
	errs.sortByLine()
	if len(errs) > 0 {
		return nil, errs
	}
	return p, nil
}

// loader decodes the generic TOML tree into a Policy, collecting errors.
type loader struct {
	src   string
	loc   map[keyLoc]int
	errs  Errors
	lines map[string]int  // object label + "\x00" + field → line
	bad   map[string]bool // object label + "\x00" + field that failed to decode; field "" marks the object
}

func (ld *loader) policy(raw map[string]any) *Policy {
	p := &Policy{}
	builtins := true
	keys := sortedKeys(raw)
	for _, k := range keys {
		switch k {
		case "link", "class", "rule":
		case "builtin_classes":
			b, ok := raw[k].(bool)
			if !ok {
				ld.fail("", "builtin_classes", ld.loc[keyLoc{"", -1, k}], raw[k], "want true or false, got "+tomlType(raw[k]), "")
				continue
			}
			builtins = b
		default:
			ld.unknownKey("", k, ld.loc[keyLoc{"", -1, k}], topKeys)
		}
	}
	if builtins {
		p.Classes = DefaultClasses()
	}
	nBuiltin := len(p.Classes)
	fromFile := map[string]bool{}
	for i, m := range ld.tables(raw, "link") {
		e := ld.entry("link", i, m)
		var l Link
		e.str("name", &l.Name)
		e.label(objectLabel("link", l.Name, len(p.Links)))
		e.rate("egress_rate", &l.EgressRate)
		e.float("reservable", &l.Reservable)
		e.finish(linkKeys)
		p.Links = append(p.Links, l)
	}
	for i, m := range ld.tables(raw, "class") {
		e := ld.entry("class", i, m)
		var name string
		e.str("name", &name)
		// Fields the entry leaves out keep the built-in class's values.
		c := Class{Name: name, DSCP: NoDSCP, Priority: NoPriority}
		if b, ok := builtinClass(name); ok && !fromFile[name] {
			c = b
		}
		at := len(p.Classes)
		for j := 0; j < nBuiltin; j++ {
			if p.Classes[j].Name == name && !fromFile[name] {
				at = j
			}
		}
		fromFile[name] = true
		e.label(objectLabel("class", name, at))
		e.dscp("dscp", &c.DSCP)
		e.integer("priority", &c.Priority)
		e.rate("minbw", &c.MinBW)
		e.rate("maxbw", &c.MaxBW)
		e.boolean("user_allowed", &c.UserAllowed)
		e.finish(classKeys)
		if at == len(p.Classes) {
			p.Classes = append(p.Classes, c)
		} else {
			p.Classes[at] = c
		}
	}
	if !fromFile[DefaultClassName] && !builtins {
		c, _ := builtinClass(DefaultClassName)
		p.Classes = append(p.Classes, c)
	}
	for i, m := range ld.tables(raw, "rule") {
		e := ld.entry("rule", i, m)
		r := NewRule("")
		e.str("name", &r.Name)
		e.label(objectLabel("rule", r.Name, len(p.Rules)))
		e.str("exe", &r.Exe)
		e.str("comm", &r.Comm)
		e.str("cgroup", &r.Cgroup)
		e.str("unit", &r.Unit)
		e.user("user", &r.User)
		e.str("proto", &r.Proto)
		e.prefix("local", &r.Local)
		e.prefix("remote", &r.Remote)
		e.ports("lport", &r.LPort)
		e.ports("rport", &r.RPort)
		e.dscp("dscp_in", &r.DSCPIn)
		e.str("class", &r.Class)
		e.dscp("dscp", &r.DSCP)
		e.rate("maxbw", &r.MaxBW)
		e.rate("minbw", &r.MinBW)
		e.rate("police", &r.Police)
		e.size("burst", &r.Burst)
		var action string
		e.str("action", &action)
		r.Action = Action(action)
		e.integer("precedence", &r.Precedence)
		e.finish(ruleKeys)
		p.Rules = append(p.Rules, r)
	}
	return p
}

// tables returns the array of tables under key, reporting other shapes.
func (ld *loader) tables(raw map[string]any, key string) []map[string]any {
	v, ok := raw[key]
	if !ok {
		return nil
	}
	switch t := v.(type) {
	case []map[string]any:
		return t
	case []any:
		out := make([]map[string]any, 0, len(t))
		for _, x := range t {
			m, ok := x.(map[string]any)
			if !ok {
				ld.fail("", key, ld.loc[keyLoc{"", -1, key}], v, "want an array of tables", "write each entry as a [["+key+"]] section")
				return nil
			}
			out = append(out, m)
		}
		return out
	default:
		line := ld.loc[keyLoc{key, -1, ""}]
		if line == 0 {
			line = ld.loc[keyLoc{"", -1, key}]
		}
		var shown any
		if _, isTable := v.(map[string]any); !isTable {
			shown = v
		}
		ld.fail("", key, line, shown, "want an array of tables", "write each entry as a [["+key+"]] section, with double brackets")
		return nil
	}
}

func (ld *loader) fail(obj, field string, line int, v any, reason, fix string) {
	fe := &FieldError{Source: ld.src, Line: line, Object: obj, Field: field, Reason: reason, Fix: fix}
	switch v.(type) {
	case nil:
	case string:
		fe.Value = Clip(v.(string))
	default:
		fe.Value, fe.Literal = Clip(tomlText(v)), true
	}
	ld.errs = append(ld.errs, fe)
	ld.bad[obj+"\x00"+field] = true
	ld.bad[obj+"\x00"] = true
}

func (ld *loader) unknownKey(obj, key string, line int, known []string) {
	ld.errs = append(ld.errs, &FieldError{Source: ld.src, Line: line, Object: obj, Reason: fmt.Sprintf("unknown key %q", Clip(key)), Fix: UnknownNameFix(key, known)})
}

// entry decodes one table of an array of tables.
type entry struct {
	ld   *loader
	kind string
	idx  int
	obj  string
	m    map[string]any
	used map[string]bool
}

func (ld *loader) entry(kind string, idx int, m map[string]any) *entry {
	return &entry{ld: ld, kind: kind, idx: idx, obj: objectLabel(kind, "", idx), m: m, used: map[string]bool{}}
}

// label sets the object's label once its name is known, and records the
// lines of its keys for later (validation) errors.
func (e *entry) label(obj string) {
	e.obj = obj
	if _, ok := e.ld.lines[obj+"\x00"]; ok {
		return // duplicate name: keep the first object's lines
	}
	e.ld.lines[obj+"\x00"] = e.ld.loc[keyLoc{e.kind, e.idx, ""}]
	for k := range e.m {
		e.ld.lines[obj+"\x00"+k] = e.line(k)
	}
}

func (e *entry) line(key string) int {
	if l := e.ld.loc[keyLoc{e.kind, e.idx, key}]; l > 0 {
		return l
	}
	return e.ld.loc[keyLoc{e.kind, e.idx, ""}]
}

func (e *entry) get(key string) (any, bool) {
	v, ok := e.m[key]
	if ok {
		e.used[key] = true
	}
	return v, ok
}

func (e *entry) fail(key string, v any, reason, fix string) {
	e.ld.fail(e.obj, key, e.line(key), v, reason, fix)
}

func (e *entry) str(key string, dst *string) {
	v, ok := e.get(key)
	if !ok {
		return
	}
	s, ok := v.(string)
	if !ok {
		e.fail(key, v, "want a string, got "+tomlType(v), fmt.Sprintf("quote it: %s = %q", key, tomlText(v)))
		return
	}
	*dst = s
}

// user accepts a name (string) or a numeric uid (integer or string).
func (e *entry) user(key string, dst *string) {
	v, ok := e.get(key)
	if !ok {
		return
	}
	switch t := v.(type) {
	case string:
		*dst = t
	case int64:
		*dst = strconv.FormatInt(t, 10)
	default:
		e.fail(key, v, "want a user name or uid, got "+tomlType(v), "")
	}
}

func (e *entry) rate(key string, dst *Rate) {
	v, ok := e.get(key)
	if !ok {
		return
	}
	switch t := v.(type) {
	case string:
		r, err := ParseRate(t)
		if err != nil {
			e.fail(key, v, err.Error(), "")
			return
		}
		*dst = r
	case int64:
		if t == 0 {
			*dst = 0
			return
		}
		fix := ""
		if t > 0 {
			fix = fmt.Sprintf("write %s = %q for %d bits/s", key, Rate(t).String(), t)
		}
		e.fail(key, v, "a rate needs a unit", fix)
	default:
		e.fail(key, v, "want a rate string such as \"10mbit\", got "+tomlType(v), "")
	}
}

func (e *entry) size(key string, dst *Size) {
	v, ok := e.get(key)
	if !ok {
		return
	}
	switch t := v.(type) {
	case string:
		sz, err := ParseSize(t)
		if err != nil {
			e.fail(key, v, err.Error(), "")
			return
		}
		*dst = sz
	case int64:
		if t < 0 || t > maxSize {
			e.fail(key, v, "out of range", "write a size from 0 to 1tb, e.g. \"64kb\"")
			return
		}
		*dst = Size(t)
	default:
		e.fail(key, v, "want a size such as \"64kb\" or a number of bytes, got "+tomlType(v), "")
	}
}

func (e *entry) dscp(key string, dst *DSCP) {
	v, ok := e.get(key)
	if !ok {
		return
	}
	switch t := v.(type) {
	case string:
		d, err := ParseDSCP(t)
		if err != nil {
			e.fail(key, v, err.Error(), "")
			return
		}
		*dst = d
	case int64:
		if t < 0 || t > 63 {
			e.fail(key, v, "DSCP out of range", "use 0..63 or a name such as EF, AF41, CS1")
			return
		}
		*dst = DSCP(t)
	default:
		e.fail(key, v, "want a DSCP name or number, got "+tomlType(v), "")
	}
}

func (e *entry) ports(key string, dst *PortRange) {
	v, ok := e.get(key)
	if !ok {
		return
	}
	var s string
	switch t := v.(type) {
	case string:
		s = t
	case int64:
		s = strconv.FormatInt(t, 10)
		if t < 1 || t > 65535 {
			e.fail(key, v, "not a port number 1..65535", "")
			return
		}
	default:
		e.fail(key, v, "want a port (80) or a range (\"1000-2000\"), got "+tomlType(v), "")
		return
	}
	pr, err := ParsePortRange(s)
	if err != nil {
		e.fail(key, v, err.Error(), "")
		return
	}
	*dst = pr
}

func (e *entry) prefix(key string, dst *netip.Prefix) {
	v, ok := e.get(key)
	if !ok {
		return
	}
	s, ok := v.(string)
	if !ok {
		e.fail(key, v, "want a CIDR prefix string, got "+tomlType(v), "")
		return
	}
	p, err := ParsePrefix(s)
	if err != nil {
		e.fail(key, v, err.Error(), "")
		return
	}
	*dst = p
}

func (e *entry) integer(key string, dst *int) {
	v, ok := e.get(key)
	if !ok {
		return
	}
	n, ok := v.(int64)
	if !ok {
		e.fail(key, v, "want an integer, got "+tomlType(v), "")
		return
	}
	if n < -1<<31 || n > 1<<31-1 {
		e.fail(key, v, "out of range", "")
		return
	}
	*dst = int(n)
}

func (e *entry) float(key string, dst *float64) {
	v, ok := e.get(key)
	if !ok {
		return
	}
	switch t := v.(type) {
	case float64:
		*dst = t
	case int64:
		*dst = float64(t)
	default:
		e.fail(key, v, "want a number, got "+tomlType(v), "")
	}
}

func (e *entry) boolean(key string, dst *bool) {
	v, ok := e.get(key)
	if !ok {
		return
	}
	b, ok := v.(bool)
	if !ok {
		e.fail(key, v, "want true or false, got "+tomlType(v), "")
		return
	}
	*dst = b
}

// finish reports keys the entry did not use.
func (e *entry) finish(known []string) {
	for _, k := range sortedKeys(e.m) {
		if !e.used[k] {
			e.ld.unknownKey(e.obj, k, e.line(k), known)
		}
	}
}

func sortedKeys(m map[string]any) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

func tomlType(v any) string {
	switch v.(type) {
	case string:
		return "string"
	case int64:
		return "integer"
	case float64:
		return "float"
	case bool:
		return "boolean"
	case map[string]any:
		return "table"
	case []any, []map[string]any:
		return "array"
	default:
		return fmt.Sprintf("%T", v)
	}
}

// tomlText renders a decoded TOML value for messages.
func tomlText(v any) string {
	switch t := v.(type) {
	case string:
		return t
	case int64:
		return strconv.FormatInt(t, 10)
	case float64:
		return strconv.FormatFloat(t, 'g', -1, 64)
	case bool:
		return strconv.FormatBool(t)
	case map[string]any:
		return "{…}"
	case []any, []map[string]any:
		return "[…]"
	default:
		return fmt.Sprint(v)
	}
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			c := prev[j-1]
			if a[i-1] != b[j-1] {
				c++
			}
			cur[j] = min(c, prev[j]+1, cur[j-1]+1)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// keyLoc identifies a key in the file: table "" is the top level, idx is
// the entry of an array of tables (-1 for plain tables and the top level),
// key "" is the table header itself.
type keyLoc struct {
	table string
	idx   int
	key   string
}

// locateKeys finds the line of every header and key of a config written in
// the usual style ([[rule]] headers, one key = value per line). It is a
// best-effort scanner for error messages; anything it cannot place gets
// line 0 (or its table's header line).
func locateKeys(data []byte) map[keyLoc]int {
	out := map[keyLoc]int{}
	counts := map[string]int{}
	cur := keyLoc{"", -1, ""}
	inMulti := "" // open multi-line string delimiter
	depth := 0    // open [ of a multi-line array
	for n, raw := range bytes.Split(data, []byte("\n")) {
		line := strings.TrimSpace(string(raw))
		lineNo := n + 1
		if inMulti != "" {
			if strings.Count(line, inMulti)%2 == 1 {
				inMulti = ""
			}
			continue
		}
		if depth > 0 {
			depth += bracketDepth(line)
			continue
		}
		if line == "" || line[0] == '#' {
			continue
		}
		if strings.HasPrefix(line, "[[") {
			name := unquoteKey(strings.TrimSpace(strings.TrimPrefix(line[:strings.Index(line+"]]", "]]")], "[[")))
			cur = keyLoc{name, counts[name], ""}
			counts[name]++
			out[cur] = lineNo
			continue
		}
		if strings.HasPrefix(line, "[") {
			name := unquoteKey(strings.TrimSpace(strings.TrimPrefix(line[:strings.Index(line+"]", "]")], "[")))
			cur = keyLoc{name, -1, ""}
			if _, ok := out[cur]; !ok {
				out[cur] = lineNo
			}
			continue
		}
		k, val, ok := strings.Cut(line, "=")
		if !ok {
			continue
		}
		loc := cur
		loc.key = unquoteKey(strings.TrimSpace(k))
		if _, dup := out[loc]; !dup {
			out[loc] = lineNo
		}
		val = strings.TrimSpace(val)
		for _, d := range []string{`"""`, `'''`} {
			if strings.Count(val, d)%2 == 1 {
				inMulti = d
			}
		}
		if strings.HasPrefix(val, "[") {
			depth = bracketDepth(val)
		}
	}
	return out
}

// bracketDepth is the net count of [ over ] outside quoted strings and comments.
func bracketDepth(s string) int {
	d := 0
	var quote byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0:
			if c == '\\' && quote == '"' {
				i++
			} else if c == quote {
				quote = 0
			}
		case c == '"' || c == '\'':
			quote = c
		case c == '#':
			return d
		case c == '[':
			d++
		case c == ']':
			d--
		}
	}
	return d
}

func unquoteKey(k string) string {
	if len(k) >= 2 && (k[0] == '"' || k[0] == '\'') && k[len(k)-1] == k[0] {
		if k[0] == '"' {
			if u, err := strconv.Unquote(k); err == nil {
				return u
			}
		}
		return k[1 : len(k)-1]
	}
	return k
}

// MarshalTOML writes p as a canonical config file: every link, every class
// in full, and every non-temporary rule with the fields it sets, in the
// policy's order. Loading the output gives back an equal policy (minus
// temporary rules). If the built-in classes are not all there, first and in
// their usual order (one was removed, or classes were reordered), it writes
// builtin_classes = false so the classes come back exactly as they were.
func (p *Policy) MarshalTOML() ([]byte, error) {
	var b bytes.Buffer
	b.WriteString("# hostqos policy; reference: docs/config.md\n")
	// With the built-ins intact at the front, loading merges them back in
	// place; otherwise write every class explicitly, in order.
	intact := len(p.Classes) >= len(DefaultClasses())
	for i, c := range DefaultClasses() {
		if intact && p.Classes[i].Name != c.Name {
			intact = false
		}
	}
	if !intact {
		b.WriteString("builtin_classes = false\n")
	}
	kv := func(k, v string) { fmt.Fprintf(&b, "%s = %s\n", k, v) }
	str := func(k, v string) {
		if v != "" {
			kv(k, tomlQuote(v))
		}
	}
	rate := func(k string, r Rate) {
		if r != 0 {
			kv(k, tomlQuote(r.String()))
		}
	}
	for _, l := range p.Links {
		b.WriteString("\n[[link]]\n")
		kv("name", tomlQuote(l.Name))
		rate("egress_rate", l.EgressRate)
		if l.Reservable != 0 {
			f := strconv.FormatFloat(l.Reservable, 'g', -1, 64)
			if !strings.ContainsAny(f, ".eE") {
				f += ".0"
			}
			kv("reservable", f)
		}
	}
	for _, c := range p.Classes {
		b.WriteString("\n[[class]]\n")
		kv("name", tomlQuote(c.Name))
		if c.DSCP != NoDSCP {
			kv("dscp", tomlQuote(c.DSCP.String()))
		}
		if c.Priority != NoPriority {
			kv("priority", strconv.Itoa(c.Priority))
		}
		rate("minbw", c.MinBW)
		rate("maxbw", c.MaxBW)
		kv("user_allowed", strconv.FormatBool(c.UserAllowed))
	}
	for _, r := range p.Rules {
		if r.Temporary {
			continue
		}
		b.WriteString("\n[[rule]]\n")
		kv("name", tomlQuote(r.Name))
		str("exe", r.Exe)
		str("comm", r.Comm)
		str("cgroup", r.Cgroup)
		str("unit", r.Unit)
		str("user", r.User)
		str("proto", r.Proto)
		if r.Local.IsValid() {
			str("local", r.Local.String())
		}
		if r.Remote.IsValid() {
			str("remote", r.Remote.String())
		}
		str("lport", r.LPort.String())
		str("rport", r.RPort.String())
		if r.DSCPIn != NoDSCP {
			str("dscp_in", r.DSCPIn.String())
		}
		str("class", r.Class)
		if r.DSCP != NoDSCP {
			str("dscp", r.DSCP.String())
		}
		rate("maxbw", r.MaxBW)
		rate("minbw", r.MinBW)
		rate("police", r.Police)
		if r.Burst != 0 {
			str("burst", r.Burst.String())
		}
		str("action", string(r.Action))
		if r.Precedence != 0 {
			kv("precedence", strconv.Itoa(r.Precedence))
		}
	}
	return b.Bytes(), nil
}

// tomlQuote writes a TOML basic string.
func tomlQuote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"':
			b.WriteString(`\"`)
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\r':
			b.WriteString(`\r`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\u%04X`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}
