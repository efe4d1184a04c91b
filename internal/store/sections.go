package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"strconv"
	"time"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/policy"
)

// Sections of a state file beside the overlays, slots and keys: the XDP
// shield's entries made through the API, the quotas' usage and the
// Kubernetes pods' QoS (the persistent file), and the real-time channels admitted host-wide (the
// runtime file: they belong to running processes). They are written in the
// same snapshot and journal as the rest, so a change of one is one journal
// record and a crash loses none of them. Daemons before state version 2
// kept each in a file of its own (Legacy); Open takes them in and Ready
// removes them once the snapshot holds them.

// Shield is the API's part of the XDP shield: its drop-list entries and
// its protected clients, with their deadlines.
type Shield struct {
	Blocks    map[netip.Prefix]*Block       `json:"blocks,omitempty"`
	Protected map[netip.AddrPort]*Protected `json:"protected,omitempty"`
}

// Block is a drop-list entry made through the API.
type Block struct {
	MaxBWIn policy.Rate `json:"maxbw_in,omitempty"`
	Expires int64       `json:"expires_unix,omitempty"` // 0: never
}

// Protected is a protected client.
type Protected struct {
	UID     uint32 `json:"uid"`
	Expires int64  `json:"expires_unix,omitempty"`
	// Class its flows go into; Admin: protected by root or group hostqos
	// (its rule precedes the admin's rules).
	Class string `json:"class,omitempty"`
	Admin bool   `json:"admin,omitempty"`
}

// NewShield is an empty shield state.
func NewShield() *Shield {
	return &Shield{Blocks: map[netip.Prefix]*Block{}, Protected: map[netip.AddrPort]*Protected{}}
}

// Clone copies the shield state, entries included, for a change to work
// on (nil: an empty one).
func (s *Shield) Clone() *Shield {
	n := NewShield()
	if s == nil {
		return n
	}
	for k, v := range s.Blocks {
		c := *v
		n.Blocks[k] = &c
	}
	for k, v := range s.Protected {
		c := *v
		n.Protected[k] = &c
	}
	return n
}

// QuotaUsage is one rule's quota usage in its current period.
type QuotaUsage struct {
	PeriodStart time.Time `json:"period_start"`
	Used        uint64    `json:"used_bytes"`
	// Slot and Counter are the rule's counter slot and its raw byte
	// counter at the last reading; usage grows by the counter's increase.
	Slot      int       `json:"slot"`
	Counter   uint64    `json:"counter"`
	Direction string    `json:"direction,omitempty"` // what Counter counts ("": out)
	ReachedAt time.Time `json:"reached_at,omitzero"`
}

// RTChannel is an admitted real-time channel and the start time of its
// owner (clock ticks after boot), so that a restarted daemon takes the
// same process again, not another with its PID.
type RTChannel struct {
	Channel api.RTChannel `json:"channel"`
	Start   uint64        `json:"start"`
}

// Pod is the QoS a Kubernetes pod's annotations ask for and the engine
// enforces (the node agent, docs/kubernetes.md): kept so that a restart
// with the API server unreachable enforces the last known.
type Pod struct {
	Namespace string      `json:"namespace"`
	Name      string      `json:"name"`
	UID       string      `json:"uid"`
	Class     string      `json:"class,omitempty"`
	DSCP      policy.DSCP `json:"dscp,omitzero"`
	MinBW     policy.Rate `json:"minbw,omitempty"`
	MaxBW     policy.Rate `json:"maxbw,omitempty"`
	MaxBWIn   policy.Rate `json:"maxbw_in,omitempty"`
	// Flow, when set, names one flow selector of a policy that applies
	// to the pod's flows it selects only (Proto, Remote, RPort); the
	// entry is one more rule of the pod, keyed NAMESPACE/NAME/FLOW.
	Flow   string           `json:"flow,omitempty"`
	Proto  string           `json:"proto,omitempty"`
	Remote netip.Prefix     `json:"remote,omitzero"`
	RPort  policy.PortRange `json:"rport,omitzero"`
}

// Key is the pod's NAMESPACE/NAME, or NAMESPACE/NAME/FLOW for a flow of
// it.
func (p Pod) Key() string {
	if p.Flow != "" {
		return p.Namespace + "/" + p.Name + "/" + p.Flow
	}
	return p.Namespace + "/" + p.Name
}

// PodKey is the NAMESPACE/NAME of the pod the entry belongs to.
func (p Pod) PodKey() string { return p.Namespace + "/" + p.Name }

// Journal kinds of the sections.
const (
	KindBlock     = "shield.block"     // name: the prefix
	KindProtected = "shield.protected" // name: address:port
	KindQuota     = "quota"            // name: the rule
	KindRTChannel = "rtchannel"        // name: the channel id
	KindPod       = "k8s.pod"          // name: NAMESPACE/NAME
)

// diffPtrVals is diffVals over maps of pointers compared by what they
// point to (the sections' entries are written through, not replaced).
func diffPtrVals[K comparable, V comparable](kind string, old, cur map[K]*V, add func(kind, name string, v any, del bool)) {
	for n, v := range cur {
		if ov, ok := old[n]; !ok || ov == nil || v == nil || *ov != *v {
			add(kind, fmt.Sprint(n), v, false)
		}
	}
	for n := range old {
		if _, ok := cur[n]; !ok {
			add(kind, fmt.Sprint(n), nil, true)
		}
	}
}

// applyKeyed sets or deletes an entry of a section keyed by something
// other than a string: key parses the op's name.
func applyKeyed[K comparable, V any](m map[K]*V, op Op, key func(string) (K, error)) error {
	k, err := key(op.Name)
	if err != nil {
		return fmt.Errorf("name: %w", err)
	}
	if op.Value == nil {
		delete(m, k)
		return nil
	}
	v := new(V)
	if err := strictJSON(op.Value, v); err != nil {
		return err
	}
	m[k] = v
	return nil
}

func parseID(s string) (uint64, error) { return strconv.ParseUint(s, 10, 64) }

// shield is p's shield section with its maps made (a snapshot leaves out
// the empty ones).
func (p *Persisted) shield() *Shield {
	if p.Shield == nil {
		p.Shield = NewShield()
	}
	if p.Shield.Blocks == nil {
		p.Shield.Blocks = map[netip.Prefix]*Block{}
	}
	if p.Shield.Protected == nil {
		p.Shield.Protected = map[netip.AddrPort]*Protected{}
	}
	return p.Shield
}

// applySection lays a section's journal op over p; false: not a section's
// kind.
func (p *Persisted) applySection(op Op) (bool, error) {
	switch op.Kind {
	case KindBlock:
		return true, applyKeyed(p.shield().Blocks, op, netip.ParsePrefix)
	case KindProtected:
		return true, applyKeyed(p.shield().Protected, op, netip.ParseAddrPort)
	case KindQuota:
		if p.Quota == nil {
			p.Quota = map[string]*QuotaUsage{}
		}
		return true, applyKeyed(p.Quota, op, func(s string) (string, error) { return s, nil })
	case KindRTChannel:
		if p.RTChannels == nil {
			p.RTChannels = map[uint64]*RTChannel{}
		}
		return true, applyKeyed(p.RTChannels, op, parseID)
	case KindPod:
		if p.Pods == nil {
			p.Pods = map[string]*Pod{}
		}
		return true, applyKeyed(p.Pods, op, func(s string) (string, error) { return s, nil })
	}
	return false, nil
}

// diffSections lists what differs between the sections the file holds and
// those of st.
func diffSections(old, st State, add func(kind, name string, v any, del bool)) {
	os, ns := old.Shield, st.Shield
	if os == nil {
		os = &Shield{}
	}
	if ns == nil {
		ns = &Shield{}
	}
	diffPtrVals(KindBlock, os.Blocks, ns.Blocks, add)
	diffPtrVals(KindProtected, os.Protected, ns.Protected, add)
	diffPtrVals(KindQuota, old.Quota, st.Quota, add)
	diffPtrVals(KindRTChannel, old.RT, st.RT, add)
	diffPtrVals(KindPod, old.Pods, st.Pods, add)
}

// Legacy names the files of the sections that daemons before state
// version 2 kept apart ("" for none).
type Legacy struct {
	Shield string // the API's drop list and protected clients (state.json.shield)
	Quota  string // quota usage (quota.json)
	RT     string // real-time channels (rtchannels.json)
}

func (l Legacy) files() []string {
	var out []string
	for _, f := range []string{l.Shield, l.Quota, l.RT} {
		if f != "" {
			out = append(out, f)
		}
	}
	return out
}

// takeLegacy reads the legacy files that exist into p. A file that cannot
// be read is an error naming it, as a bad state file is; quota usage that
// cannot be parsed is dropped (usage is worth less than a daemon that
// starts), as it always was.
func (p *Persisted) takeLegacy(l Legacy) (found []string, err error) {
	read := func(path string) ([]byte, bool, error) {
		if path == "" {
			return nil, false, nil
		}
		data, err := os.ReadFile(path)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, false, nil
		}
		if err != nil {
			return nil, false, fmt.Errorf("read %s: %w", path, err)
		}
		return data, true, nil
	}
	const fix = "move it away to start without it"
	if data, ok, err := read(l.Shield); err != nil {
		return nil, err
	} else if ok {
		var s struct {
			Version   int                           `json:"version"`
			Blocks    map[netip.Prefix]*Block       `json:"blocks"`
			Protected map[netip.AddrPort]*Protected `json:"protected"`
		}
		if err := json.Unmarshal(data, &s); err != nil || s.Version != 1 {
			return nil, fmt.Errorf("read shield state %s: version %d, %v (%s)", l.Shield, s.Version, err, fix)
		}
		p.Shield = NewShield()
		for k, v := range s.Blocks {
			if v != nil {
				p.Shield.Blocks[k] = v
			}
		}
		for k, v := range s.Protected {
			if v != nil {
				p.Shield.Protected[k] = v
			}
		}
		found = append(found, l.Shield)
	}
	if data, ok, err := read(l.Quota); err != nil {
		return nil, err
	} else if ok {
		var q struct {
			Version int                    `json:"version"`
			Usage   map[string]*QuotaUsage `json:"usage"`
		}
		if err := json.Unmarshal(data, &q); err != nil || q.Version != 1 {
			bad := l.Quota + ".bad"
			if rerr := os.Rename(l.Quota, bad); rerr != nil {
				return nil, fmt.Errorf("move unreadable quota usage %s aside: %w", l.Quota, rerr)
			}
			p.Warnings = append(p.Warnings, fmt.Sprintf("quota usage %s unreadable (version %d, %v): moved to %s; quotas count from zero", l.Quota, q.Version, err, bad))
		} else {
			p.Quota = map[string]*QuotaUsage{}
			for k, v := range q.Usage {
				if v != nil {
					p.Quota[k] = v
				}
			}
			found = append(found, l.Quota)
		}
	}
	if data, ok, err := read(l.RT); err != nil {
		return nil, err
	} else if ok {
		var saved []RTChannel
		if err := json.Unmarshal(data, &saved); err != nil {
			return nil, fmt.Errorf("read real-time channels %s: %w (%s)", l.RT, err, fix)
		}
		p.RTChannels = map[uint64]*RTChannel{}
		for i := range saved {
			p.RTChannels[saved[i].Channel.ID] = &saved[i]
		}
		found = append(found, l.RT)
	}
	return found, nil
}
