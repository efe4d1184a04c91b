package policy

import (
	"fmt"
	"reflect"
)

// StartTime is what hostqosd reads from the config file only when it
// starts: the top-level settings (history, metrics, event limits), the
// [rsvp] table and the [web] table. A reload reads them too, but they
// apply at the next start.
type StartTime struct {
	Settings Settings
	RSVP     RSVP
	Web      WebSettings
}

// Changes lists the settings whose value in file (the config file now)
// differs from s (in force since the start), one line each:
// `[rsvp] enabled: false in force, true in the config file`.
func (s StartTime) Changes(file StartTime) []string {
	var out []string
	diff := func(prefix string, a, b reflect.Value) {
		for _, f := range fieldsOf(a.Type(), "toml").list {
			x, y := a.FieldByIndex(f.index), b.FieldByIndex(f.index)
			if x.Interface() != y.Interface() {
				out = append(out, fmt.Sprintf("%s%s: %s in force, %s in the config file", prefix, f.name, settingText(x), settingText(y)))
			}
		}
	}
	diff("", reflect.ValueOf(s.Settings), reflect.ValueOf(file.Settings))
	diff("[rsvp] ", reflect.ValueOf(s.RSVP), reflect.ValueOf(file.RSVP))
	diff("[web] ", reflect.ValueOf(s.Web), reflect.ValueOf(file.Web))
	return out
}

// settingText writes a setting's value for Changes: "(default)" when
// unset, strings quoted.
func settingText(v reflect.Value) string {
	switch {
	case v.Kind() == reflect.Bool:
		return fmt.Sprint(v.Bool())
	case v.IsZero():
		return "(default)"
	case v.Kind() == reflect.String:
		return fmt.Sprintf("%q", Clip(v.String()))
	}
	return fmt.Sprint(v.Interface())
}
