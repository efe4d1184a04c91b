package store

import (
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hostqos/hostqos/api"
)

// legacyFiles writes what a daemon before state version 2 kept: a version
// 1 state file and the sections' files of their own.
func legacyFiles(t *testing.T, dir string) (statePath string, l Legacy) {
	t.Helper()
	statePath = filepath.Join(dir, "state.json")
	l = Legacy{Shield: statePath + ".shield", Quota: filepath.Join(dir, "quota.json"), RT: filepath.Join(dir, "rtchannels.json")}
	for path, content := range map[string]string{
		statePath: `{"version": 1, "overlay": {}}`,
		l.Shield:  `{"version": 1, "blocks": {"203.0.113.0/24": {"expires_unix": 1900000000}}, "protected": {"198.51.100.7:443": {"uid": 1000, "class": "voice"}}}`,
		l.Quota:   `{"version": 1, "usage": {"dl": {"period_start": "2026-11-28T00:00:00Z", "used_bytes": 5000, "slot": 3, "counter": 7000}}}`,
		l.RT:      `[{"channel": {"id": 4, "name": "cam", "link": "eth0", "pid": 99, "message_bytes": 1200, "period_ns": 2000000, "burst": 1, "delay_ns": 10000000}, "start": 12345}]`,
	} {
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return statePath, l
}

// TestLegacySectionsMigrate: a state file of version 1 takes the sections
// from their files; Ready writes them into a snapshot of version 2 and
// removes the files; the state read again holds them.
func TestLegacySectionsMigrate(t *testing.T) {
	path, l := legacyFiles(t, t.TempDir())
	f, p, err := Open(path, l)
	if err != nil {
		t.Fatal(err)
	}
	check := func(what string, st State) {
		t.Helper()
		if b := st.Shield.Blocks[netip.MustParsePrefix("203.0.113.0/24")]; b == nil || b.Expires != 1900000000 {
			t.Errorf("%s: block %+v", what, b)
		}
		if pr := st.Shield.Protected[netip.MustParseAddrPort("198.51.100.7:443")]; pr == nil || pr.UID != 1000 || pr.Class != "voice" {
			t.Errorf("%s: protected client %+v", what, pr)
		}
		if q := st.Quota["dl"]; q == nil || q.Used != 5000 || q.Counter != 7000 {
			t.Errorf("%s: quota %+v", what, q)
		}
		if c := st.RT[4]; c == nil || c.Channel.Name != "cam" || c.Start != 12345 {
			t.Errorf("%s: real-time channel %+v", what, c)
		}
	}
	check("opened", p.State())
	if err := f.Ready(); err != nil {
		t.Fatal(err)
	}
	for _, old := range []string{l.Shield, l.Quota, l.RT} {
		if _, err := os.Stat(old); !os.IsNotExist(err) {
			t.Errorf("%s still there after the migration: %v", old, err)
		}
	}
	data, _ := os.ReadFile(path)
	var head struct{ Version int }
	if json.Unmarshal(data, &head); head.Version != stateVersion {
		t.Errorf("snapshot version %d after the migration, want %d", head.Version, stateVersion)
	}
	p2, err := Read(path)
	if err != nil {
		t.Fatal(err)
	}
	check("read again", p2.State())
}

// TestLegacyFileLeftAfterMigration: a legacy file still there beside a
// state file of version 2 (a migration cut short between the snapshot and
// the removal) is not read again, only removed.
func TestLegacyFileLeftAfterMigration(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.json")
	if err := WriteState(path, State{Overlay: NewOverlay(), Shield: NewShield()}); err != nil {
		t.Fatal(err)
	}
	l := Legacy{Shield: path + ".shield"}
	if err := os.WriteFile(l.Shield, []byte(`{"version": 1, "blocks": {"203.0.113.0/24": {}}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	f, p, err := Open(path, l)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Shield.Blocks) != 0 {
		t.Errorf("the legacy file was read over the state file's section: %v", p.Shield.Blocks)
	}
	if err := f.Ready(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(l.Shield); !os.IsNotExist(err) {
		t.Errorf("leftover legacy file not removed: %v", err)
	}
}

// TestDamagedLegacyQuota: quota usage that cannot be read is moved aside
// with a warning; the rest migrates.
func TestDamagedLegacyQuota(t *testing.T) {
	path, l := legacyFiles(t, t.TempDir())
	if err := os.WriteFile(l.Quota, []byte("{half"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, p, err := Open(path, l)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Quota) != 0 || len(p.Warnings) != 1 || !strings.Contains(p.Warnings[0], "quota.json.bad") {
		t.Errorf("quota %v, warnings %q", p.Quota, p.Warnings)
	}
	if _, err := os.Stat(l.Quota + ".bad"); err != nil {
		t.Error(err)
	}
}

// TestSectionsJournal: a change of one section is one journal record with
// the entries that changed, replayed on the next read.
func TestSectionsJournal(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.json")
	f, _, err := Open(path, Legacy{})
	if err != nil {
		t.Fatal(err)
	}
	st := f.Holds()
	st.Overlay, st.Shield = NewOverlay(), NewShield()
	if err := f.Compact(st); err != nil { // a snapshot the journal continues
		t.Fatal(err)
	}
	next := func(edit func(*State)) Record {
		t.Helper()
		st := f.Holds()
		edit(&st)
		if _, err := f.Write(st); err != nil {
			t.Fatal(err)
		}
		data, _ := os.ReadFile(JournalPath(path))
		lines := strings.Split(strings.TrimSpace(string(data)), "\n")
		r, err := DecodeRecord([]byte(lines[len(lines)-1]))
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	pfx := netip.MustParsePrefix("203.0.113.0/24")
	r := next(func(st *State) {
		s := st.Shield.Clone()
		s.Blocks[pfx] = &Block{Expires: 5}
		st.Shield = s
		st.Quota = map[string]*QuotaUsage{"dl": {Used: 1, PeriodStart: time.Unix(0, 0).UTC()}}
		st.RT = map[uint64]*RTChannel{7: {Channel: api.RTChannel{ID: 7, Name: "x"}, Start: 1}}
	})
	if len(r.Ops) != 3 || r.Ops[0].Kind != KindBlock || r.Ops[0].Name != "203.0.113.0/24" {
		t.Errorf("record %+v", r)
	}
	r = next(func(st *State) {
		s := st.Shield.Clone() // same entries, new pointers: nothing to write
		st.Shield = s
		q := *st.Quota["dl"]
		q.Used = 2
		st.Quota = map[string]*QuotaUsage{"dl": &q}
	})
	if len(r.Ops) != 1 || r.Ops[0].Kind != KindQuota {
		t.Errorf("record %+v, want the quota only", r)
	}
	r = next(func(st *State) {
		s := st.Shield.Clone()
		delete(s.Blocks, pfx)
		st.Shield = s
		st.RT = nil
	})
	if len(r.Ops) != 2 || r.Ops[0].Value != nil || r.Ops[1].Value != nil {
		t.Errorf("record %+v, want two deletions", r)
	}
	p, err := Read(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Shield.Blocks) != 0 || len(p.RTChannels) != 0 || p.Quota["dl"].Used != 2 {
		t.Errorf("replayed: shield %+v, quota %+v, channels %+v", p.Shield, p.Quota, p.RTChannels)
	}

	// A Kubernetes pod's QoS: one entry per pod, its DSCP and rates kept.
	web := Pod{Namespace: "app", Name: "web", UID: "0f0e0d0c-0b0a-0908-0706-050403020100", Class: "bulk", DSCP: 10, MaxBW: 5_000_000, MaxBWIn: 2_000_000}
	r = next(func(st *State) { st.Pods = map[string]*Pod{web.Key(): &web} })
	if len(r.Ops) != 1 || r.Ops[0].Kind != KindPod || r.Ops[0].Name != "app/web" {
		t.Errorf("record %+v, want the pod app/web", r)
	}
	if p, err = Read(path); err != nil {
		t.Fatal(err)
	}
	if got := p.Pods["app/web"]; got == nil || *got != web {
		t.Errorf("replayed pod %+v, want %+v", got, web)
	}
}
