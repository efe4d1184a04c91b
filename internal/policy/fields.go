package policy

import (
	"reflect"
	"slices"
	"strings"
	"sync"
)

// The config file and the JSON API decode links, classes and rules the
// same way: by reflection over the fields' struct tags (`toml` for the
// file, `json` for the API), strictly, with unknown names answered by
// UnknownNameFix. Adding a field to Link, Class or Rule therefore touches
// the type (the field and its tags), its validation (validate.go) and its
// compile step in the daemon; neither decoder nor MarshalTOML names
// fields. A field of a new value type also needs an entry in
// tomlValueDecoders (config.go) when its TOML form is not a plain string,
// number or boolean.

// structField is one field of a struct as a tag names it.
type structField struct {
	name  string
	index []int
	opts  []string // the tag's options after the name, e.g. "omitzero"
}

// has reports whether the field's tag carries option o.
func (f structField) has(o string) bool { return slices.Contains(f.opts, o) }

// structFields is the field set of a struct type under one tag key.
type structFields struct {
	list  []structField          // in declaration order
	index map[string][]int       // name → field index
	names []string               // in declaration order
	byKey map[string]structField // name → field
}

type fieldsKey struct {
	t   reflect.Type
	tag string
}

var fieldCache sync.Map // fieldsKey → *structFields

// fieldsOf lists the exported fields of struct type t by their name under
// tag ("json" or "toml"): fields tagged "-" are left out, untagged ones go
// by their Go name (as encoding/json does).
func fieldsOf(t reflect.Type, tag string) *structFields {
	if f, ok := fieldCache.Load(fieldsKey{t, tag}); ok {
		return f.(*structFields)
	}
	fs := &structFields{index: map[string][]int{}, byKey: map[string]structField{}}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		parts := strings.Split(f.Tag.Get(tag), ",")
		name := parts[0]
		if name == "-" && len(parts) == 1 {
			continue
		}
		if name == "" {
			name = f.Name
		}
		sf := structField{name: name, index: f.Index, opts: parts[1:]}
		fs.list = append(fs.list, sf)
		fs.index[name] = f.Index
		fs.names = append(fs.names, name)
		fs.byKey[name] = sf
	}
	fieldCache.Store(fieldsKey{t, tag}, fs)
	return fs
}
