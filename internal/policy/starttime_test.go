package policy

import (
	"reflect"
	"testing"
)

func TestStartTimeChanges(t *testing.T) {
	var force StartTime
	force.Settings.HistoryRaw = "1h"
	file := force
	if c := force.Changes(file); len(c) != 0 {
		t.Errorf("no change: %q", c)
	}
	file.RSVP.Enabled = true
	file.Settings.HistoryRaw = ""
	file.Settings.MaxApps = 50
	file.Web.Listen = "127.0.0.1:9465"
	want := []string{`max_apps: (default) in force, 50 in the config file`, `history_raw: "1h" in force, (default) in the config file`,
		`[rsvp] enabled: false in force, true in the config file`, `[web] listen: (default) in force, "127.0.0.1:9465" in the config file`}
	if c := force.Changes(file); !reflect.DeepEqual(c, want) {
		t.Errorf("changes\n%q\nwant\n%q", c, want)
	}
}
