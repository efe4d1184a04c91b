package policy

import (
	"bytes"
	"encoding"
	"errors"
	"fmt"
	"os"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/BurntSushi/toml"
)

// DefaultConfigPath is where hostqosd reads its config by default.
const DefaultConfigPath = "/etc/hostqos/hostqos.toml"

// builtinClassesKey is the one top-level key that is not a Policy field.
const builtinClassesKey = "builtin_classes"

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
	top := fieldsOf(reflect.TypeOf(Policy{}), "toml")
	settings := settingsKeys()
	for _, k := range sortedKeys(raw) {
		switch _, section := top.byKey[k]; {
		case section, settings[k], k == rsvpKey, k == containersKey, k == kubernetesKey, k == webKey:
		case k == builtinClassesKey:
			b, ok := raw[k].(bool)
			if !ok {
				ld.fail("", k, ld.loc[keyLoc{"", -1, k}], raw[k], "want true or false, got "+tomlType(raw[k]), "")
				continue
			}
			builtins = b
		default:
			ld.unknownKey("", k, ld.loc[keyLoc{"", -1, k}], append(append(slices.Clip(top.names), builtinClassesKey, rsvpKey, containersKey, kubernetesKey, webKey), fieldsOf(reflect.TypeOf(Settings{}), "toml").names...))
		}
	}
	ld.settings(raw, p)
	ld.rsvp(raw, p)
	ld.containers(raw, p)
	ld.kubernetes(raw, p)
	ld.web(raw, p)
	if builtins {
		p.Classes = DefaultClasses()
	}
	nBuiltin := len(p.Classes)
	fromFile := map[string]bool{}
	for i, m := range ld.tables(raw, "link") {
		e := ld.entry("link", i, m)
		l := Link{Name: e.name()}
		e.label(objectLabel("link", l.Name, len(p.Links)))
		e.fields(&l)
		p.Links = append(p.Links, l)
	}
	for i, m := range ld.tables(raw, "class") {
		e := ld.entry("class", i, m)
		name := e.name()
		// Fields the entry leaves out keep the built-in class's values.
		c := NewClass(name)
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
		e.fields(&c)
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
	for i, m := range ld.tables(raw, "block") {
		e := ld.entry("block", i, m)
		var b Block
		if s, ok := m["prefix"].(string); ok {
			// Labelled as validation labels it: by the prefix it parses
			// to, or by its place.
			if p, err := ParsePrefix(s); err == nil && p.IsValid() {
				e.label(objectLabel("block", p.String(), i))
			} else {
				e.label(objectLabel("block", "", i))
			}
		}
		e.fields(&b)
		if v, ok := m["maxbw_in"]; ok && b.MaxBWIn == 0 && !ld.bad[e.obj+"\x00maxbw_in"] {
			e.fail("maxbw_in", v, ZeroBlockRateReason, ZeroBlockRateFix)
		}
		p.Blocks = append(p.Blocks, b)
	}
	for i, m := range ld.tables(raw, "rule") {
		e := ld.entry("rule", i, m)
		r := NewRule(e.name())
		e.label(objectLabel("rule", r.Name, len(p.Rules)))
		e.fields(&r)
		p.Rules = append(p.Rules, r)
	}
	for i, m := range ld.tables(raw, "reservation") {
		e := ld.entry("reservation", i, m)
		r := NewReservation(e.name())
		e.label(objectLabel("reservation", r.Name, len(p.Reservations)))
		e.fields(&r)
		p.Reservations = append(p.Reservations, r)
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
	switch t := v.(type) {
	case nil:
	case string:
		fe.Value = Clip(t)
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

// nameKey is the key that names an object; it is decoded first, since
// the object's label (and, for a class, its starting values) depend on it.
const nameKey = "name"

// name decodes the entry's name ("" when absent or not a string).
func (e *entry) name() string {
	var name string
	e.value(nameKey, reflect.ValueOf(&name).Elem(), structField{name: nameKey})
	return name
}

// fields decodes every other key of the entry into the struct dst points
// to, by the fields' toml tags, and reports the keys that are no field.
func (e *entry) fields(dst any) {
	rv := reflect.ValueOf(dst).Elem()
	fs := fieldsOf(rv.Type(), "toml")
	for _, f := range fs.list {
		if f.name != nameKey {
			e.value(f.name, rv.FieldByIndex(f.index), f)
		}
	}
	for _, k := range sortedKeys(e.m) {
		if !e.used[k] {
			e.ld.unknownKey(e.obj, k, e.line(k), fs.names)
		}
	}
}

// value decodes key, when the entry has it, into dst (field f), by dst's
// type: a policy value type through tomlValueDecoders, anything else by
// its kind.
func (e *entry) value(key string, dst reflect.Value, f structField) {
	v, ok := e.get(key)
	if !ok {
		return
	}
	dec := tomlValueDecoders[dst.Type()]
	if dec == nil {
		dec = tomlKindDecoders[dst.Kind()]
	}
	if f.has(uidOption) && dst.Kind() == reflect.String {
		dec = decodeTOMLUser
	}
	if dec == nil {
		e.fail(key, v, "cannot be set in the config file", "")
		return
	}
	if reason, fix := dec(key, v, dst); reason != "" {
		e.fail(key, v, reason, fix)
	}
}

// A tomlDecoder stores the decoded TOML value v of key in dst, or returns
// why it cannot (and optionally how to fix it).
type tomlDecoder func(key string, v any, dst reflect.Value) (reason, fix string)

// uidOption, in a string field's toml tag, accepts a TOML integer too (a
// numeric uid), stored as its decimal text.
const uidOption = "uid"

// tomlValueDecoders decode the policy's value types: strings with units,
// names or numbers, each with its own messages.
var tomlValueDecoders = map[reflect.Type]tomlDecoder{
	rateType: decodeTOMLRate,
	reflect.TypeOf(LinkRate(0)): func(key string, v any, dst reflect.Value) (string, string) {
		if t, ok := v.(string); ok && strings.EqualFold(strings.TrimSpace(t), "auto") {
			dst.SetUint(uint64(RateAuto))
			return "", ""
		}
		return decodeTOMLRate(key, v, dst)
	},
	sizeType:   decodeTOMLSize,
	dscpType:   decodeTOMLDSCP,
	portsType:  decodeTOMLPorts,
	prefixType: decodeTOMLPrefix,
}

// tomlKindDecoders decode plain fields by their kind.
var tomlKindDecoders = map[reflect.Kind]tomlDecoder{
	reflect.String:  decodeTOMLString,
	reflect.Bool:    decodeTOMLBool,
	reflect.Int:     decodeTOMLInt,
	reflect.Int32:   decodeTOMLInt,
	reflect.Int64:   decodeTOMLInt,
	reflect.Float64: decodeTOMLFloat,
}

func decodeTOMLString(key string, v any, dst reflect.Value) (string, string) {
	s, ok := v.(string)
	if !ok {
		return "want a string, got " + tomlType(v), fmt.Sprintf("quote it: %s = %q", key, tomlText(v))
	}
	dst.SetString(s)
	return "", ""
}

// decodeTOMLUser accepts a name (string) or a numeric uid (integer or string).
func decodeTOMLUser(_ string, v any, dst reflect.Value) (string, string) {
	switch t := v.(type) {
	case string:
		dst.SetString(t)
	case int64:
		dst.SetString(strconv.FormatInt(t, 10))
	default:
		return "want a user name or uid, got " + tomlType(v), ""
	}
	return "", ""
}

func decodeTOMLRate(key string, v any, dst reflect.Value) (string, string) {
	switch t := v.(type) {
	case string:
		r, err := ParseRate(t)
		if err != nil {
			return err.Error(), ""
		}
		dst.SetUint(uint64(r))
	case int64:
		if t == 0 {
			dst.SetUint(0)
			return "", ""
		}
		fix := ""
		if t > 0 {
			fix = fmt.Sprintf("write %s = %q for %d bits/s", key, Rate(t).String(), t)
		}
		return "a rate needs a unit", fix
	default:
		return "want a rate string such as \"10mbit\", got " + tomlType(v), ""
	}
	return "", ""
}

func decodeTOMLSize(_ string, v any, dst reflect.Value) (string, string) {
	switch t := v.(type) {
	case string:
		sz, err := ParseSize(t)
		if err != nil {
			return err.Error(), ""
		}
		dst.SetUint(uint64(sz))
	case int64:
		if t < 0 || t > maxSize {
			return "out of range", "write a size from 0 to 1TiB, e.g. \"64KiB\""
		}
		dst.SetUint(uint64(t))
	default:
		return "want a size such as \"64KiB\" or a number of bytes, got " + tomlType(v), ""
	}
	return "", ""
}

func decodeTOMLDSCP(_ string, v any, dst reflect.Value) (string, string) {
	switch t := v.(type) {
	case string:
		d, err := ParseDSCP(t)
		if err != nil {
			return err.Error(), ""
		}
		dst.SetInt(int64(d))
	case int64:
		if t < 0 || t > 63 {
			return "DSCP out of range", "use 0..63 or a name such as EF, AF41, CS1"
		}
		dst.SetInt(t)
	default:
		return "want a DSCP name or number, got " + tomlType(v), ""
	}
	return "", ""
}

func decodeTOMLPorts(_ string, v any, dst reflect.Value) (string, string) {
	var s string
	switch t := v.(type) {
	case string:
		s = t
	case int64:
		s = strconv.FormatInt(t, 10)
		if t < 1 || t > 65535 {
			return "not a port number 1..65535", ""
		}
	default:
		return "want a port (80) or a range (\"1000-2000\"), got " + tomlType(v), ""
	}
	pr, err := ParsePortRange(s)
	if err != nil {
		return err.Error(), ""
	}
	dst.Set(reflect.ValueOf(pr))
	return "", ""
}

func decodeTOMLPrefix(_ string, v any, dst reflect.Value) (string, string) {
	s, ok := v.(string)
	if !ok {
		return "want a CIDR prefix string, got " + tomlType(v), ""
	}
	p, err := ParsePrefix(s)
	if err != nil {
		return err.Error(), ""
	}
	dst.Set(reflect.ValueOf(p))
	return "", ""
}

func decodeTOMLInt(_ string, v any, dst reflect.Value) (string, string) {
	n, ok := v.(int64)
	if !ok {
		return "want an integer, got " + tomlType(v), ""
	}
	if n < -1<<31 || n > 1<<31-1 || dst.OverflowInt(n) {
		return "out of range", ""
	}
	dst.SetInt(n)
	return "", ""
}

func decodeTOMLFloat(_ string, v any, dst reflect.Value) (string, string) {
	switch t := v.(type) {
	case float64:
		dst.SetFloat(t)
	case int64:
		dst.SetFloat(float64(t))
	default:
		return "want a number, got " + tomlType(v), ""
	}
	return "", ""
}

func decodeTOMLBool(_ string, v any, dst reflect.Value) (string, string) {
	b, ok := v.(bool)
	if !ok {
		return "want true or false, got " + tomlType(v), ""
	}
	dst.SetBool(b)
	return "", ""
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
	for _, l := range p.Links {
		writeTOMLTable(&b, "link", l)
	}
	for _, c := range p.Classes {
		writeTOMLTable(&b, "class", c)
	}
	for _, r := range p.Rules {
		if !r.Temporary {
			writeTOMLTable(&b, "rule", r)
		}
	}
	for _, r := range p.Reservations {
		if !r.Temporary {
			writeTOMLTable(&b, "reservation", r)
		}
	}
	for _, bl := range p.Blocks {
		writeTOMLTable(&b, "block", bl)
	}
	return b.Bytes(), nil
}

// writeTOMLTable writes v as one [[header]] entry, its fields in
// declaration order by their toml tags: a field tagged omitzero is left
// out when zero (an IsZero method says what zero is), and a value whose
// text is empty (an unset DSCP) is always left out.
func writeTOMLTable(b *bytes.Buffer, header string, v any) {
	b.WriteString("\n[[" + header + "]]\n")
	rv := reflect.ValueOf(v)
	for _, f := range fieldsOf(rv.Type(), "toml").list {
		fv := rv.FieldByIndex(f.index)
		if f.has("omitzero") && isZeroValue(fv) {
			continue
		}
		if text, ok := tomlValueText(fv); ok {
			fmt.Fprintf(b, "%s = %s\n", f.name, text)
		}
	}
}

func isZeroValue(v reflect.Value) bool {
	if z, ok := v.Interface().(interface{ IsZero() bool }); ok {
		return z.IsZero()
	}
	return v.IsZero()
}

// tomlValueText renders a field's value as TOML: value types by their
// text (quoted), plain fields by kind; false when there is nothing to write.
func tomlValueText(v reflect.Value) (string, bool) {
	if m, ok := v.Interface().(encoding.TextMarshaler); ok {
		t, err := m.MarshalText()
		if err != nil || len(t) == 0 {
			return "", false
		}
		return tomlQuote(string(t)), true
	}
	switch v.Kind() {
	case reflect.String:
		return tomlQuote(v.String()), v.Len() > 0
	case reflect.Bool:
		return strconv.FormatBool(v.Bool()), true
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return strconv.FormatInt(v.Int(), 10), true
	case reflect.Float32, reflect.Float64:
		f := strconv.FormatFloat(v.Float(), 'g', -1, 64)
		if !strings.ContainsAny(f, ".eE") {
			f += ".0"
		}
		return f, true
	}
	return "", false
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
