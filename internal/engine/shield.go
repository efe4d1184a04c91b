package engine

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"time"

	"github.com/hostqos/hostqos/internal/store"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/datapath/xdp"
	"github.com/hostqos/hostqos/internal/derive"
	"github.com/hostqos/hostqos/internal/policy"
)

// The XDP shield (docs/ddos.md): the drop list (the config file's
// [[block]] entries and those added through the API, with optional TTLs),
// SYN limits of managed links, and protected clients. The API's entries
// are a section of the persistent state file, written with every change,
// so a restart (or a crash) keeps them and their deadlines.

// ShieldKernel is what the shield needs of the kernel, beside Kernel
// (Host.Shield). The daemon gives one when the XDP program loaded; without
// it the drop list and SYN limits are refused and managed links carry no
// XDP program.
type ShieldKernel interface {
	// SetBlocks makes the drop list exactly entries.
	SetBlocks(entries []xdp.BlockEntry) error
	BlockCounters() ([]xdp.BlockCounters, error)
	// SetProtected makes the protected clients exactly list.
	SetProtected(list []xdp.Protected) error
	// AttachXDP puts the shield on a link (idempotent) with its SYN
	// limits; DetachXDP takes it off.
	AttachXDP(ifindex int, syn xdp.SynLimits) error
	DetachXDP(ifindex int) error
	// SynCounters reads a link's pure-SYN counters.
	SynCounters(ifindex int) (xdp.SynCounters, error)
	// ListenerUIDs are the owners of the listening TCP sockets (IPv4 and
	// IPv6) on a local port, in the daemon's network namespace.
	ListenerUIDs(port uint16) ([]uint32, error)
}

// MaxProtectedPerUser bounds the protected clients one ordinary user may
// have at a time.
const MaxProtectedPerUser = 256

// The shield's state is a section of the persistent state file
// (store.Shield): its entries and their deadlines.
type (
	shieldState = store.Shield
	blockRec    = store.Block
	protRec     = store.Protected
)

// writeShield writes the shield's state into the persistent state file
// (one journal record with the entries that changed).
func (e *Engine) writeShield(s *shieldState) error {
	st := e.stPersist.Holds()
	st.Shield = s
	_, err := e.stPersist.Write(st)
	return err
}

// shieldKernel is the kernel's shield, or nil.
func (e *Engine) shieldKernel() ShieldKernel {
	if e.k == nil {
		return nil
	}
	return e.sk
}

var errNoShield = derive.ErrNoShield

// blockEntries is the whole drop list: the config file's entries and the
// API's (which cannot shadow the config file's).
func blockEntries(base *policy.Policy, s *shieldState) []xdp.BlockEntry {
	out := make([]xdp.BlockEntry, 0, len(base.Blocks)+len(s.Blocks))
	seen := map[netip.Prefix]bool{}
	for _, b := range base.Blocks {
		out = append(out, xdp.BlockEntry{Prefix: b.Prefix, Rate: uint64(b.MaxBWIn)})
		seen[b.Prefix] = true
	}
	for p, b := range s.Blocks {
		if !seen[p] {
			out = append(out, xdp.BlockEntry{Prefix: p, Rate: uint64(b.MaxBWIn)})
		}
	}
	return out
}

// shieldChange applies a change of the shield state: mutate works on a
// copy; the result is synced (the protected clients' rules change with the
// XDP entries, in the same sync) and written, or nothing changes.
func (e *Engine) shieldChange(mutate func(s *shieldState) error) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.k == nil || e.desired == nil {
		return errNotLoaded
	}
	if e.shieldKernel() == nil {
		return errNoShield
	}
	s := e.shield.Clone()
	if err := mutate(s); err != nil {
		return err
	}
	return e.syncLocked("shield change", syncChange{shield: s, save: func(*store.Slots) error { return e.writeShield(s) }})
}

func ttlDeadline(ttl int64, field string) (int64, error) {
	if ttl < 0 || ttl > api.MaxTTLSeconds {
		return 0, &policy.FieldError{Source: "api", Field: field, Value: strconv.FormatInt(ttl, 10), Literal: true,
			Reason: fmt.Sprintf("must be 0 (no expiry) .. %d seconds", api.MaxTTLSeconds), Fix: "e.g. 3600 for an hour"}
	}
	if ttl == 0 {
		return 0, nil
	}
	return time.Now().Add(time.Duration(ttl) * time.Second).Unix(), nil
}

// AddBlock adds (or replaces) a drop-list entry of the API.
func (e *Engine) AddBlock(ctx context.Context, who Caller, req api.BlockRequest) (api.BlockInfo, error) {
	if err := who.MayChange(); err != nil {
		return api.BlockInfo{}, err
	}
	b := policy.Block{Prefix: req.Prefix, MaxBWIn: req.MaxBWIn}
	if msg, fix := policy.CheckBlock(b); msg != "" {
		field, val := "prefix", req.Prefix.String()
		if req.Prefix.IsValid() && req.Prefix == req.Prefix.Masked() {
			field, val = "maxbw_in", req.MaxBWIn.String()
		}
		return api.BlockInfo{}, &policy.FieldError{Source: "api", Object: "block", Field: field, Value: policy.Clip(val), Reason: msg, Fix: fix}
	}
	exp, err := ttlDeadline(req.TTLSeconds, "ttl_s")
	if err != nil {
		return api.BlockInfo{}, err
	}
	err = e.shieldChange(func(s *shieldState) error {
		for _, cb := range e.base.Blocks {
			if cb.Prefix == b.Prefix {
				return &BadRequestError{fmt.Errorf("block %s is in the config file; change it there (and hostqos reload)", b.Prefix)}
			}
		}
		if _, ok := s.Blocks[b.Prefix]; !ok {
			n4 := 0
			for _, be := range blockEntries(e.base, s) {
				if be.Prefix.Addr().Is4() == b.Prefix.Addr().Is4() {
					n4++
				}
			}
			if n4 >= xdp.MaxBlocks {
				return &TooManyError{Why: fmt.Sprintf("the drop list holds %d entries of this family, the most it can; remove some first", n4)}
			}
		}
		s.Blocks[b.Prefix] = &blockRec{MaxBWIn: b.MaxBWIn, Expires: exp}
		return nil
	})
	if err != nil {
		return api.BlockInfo{}, err
	}
	info := api.BlockInfo{Block: b, Source: store.SrcAPI}
	if exp != 0 {
		t := time.Unix(exp, 0).UTC()
		info.Expires = &t
	}
	return info, nil
}

// RemoveBlock removes a drop-list entry of the API.
func (e *Engine) RemoveBlock(ctx context.Context, who Caller, prefix string) error {
	if err := who.MayChange(); err != nil {
		return err
	}
	p, err := netip.ParsePrefix(prefix)
	if err != nil {
		return &NotFoundError{What: "block", Name: prefix}
	}
	return e.shieldChange(func(s *shieldState) error {
		if _, ok := s.Blocks[p]; !ok {
			for _, cb := range e.base.Blocks {
				if cb.Prefix == p {
					return &BadRequestError{fmt.Errorf("block %s is in the config file; remove it there (and hostqos reload)", p)}
				}
			}
			return &NotFoundError{What: "block", Name: prefix}
		}
		delete(s.Blocks, p)
		return nil
	})
}

// Blocks lists the drop list with its counters (config entries first,
// then the API's, each by prefix). Anyone may read it. The engine's lock
// is held only to take the current shield state and config, which no
// change alters in place (a change makes a new state, a reload a new
// policy); the list is built after.
func (e *Engine) Blocks() ([]api.BlockInfo, error) {
	e.mu.Lock()
	s := e.shield
	conf := e.base.Blocks
	sk := e.shieldKernel()
	e.mu.Unlock()
	out := make([]api.BlockInfo, 0, len(conf)+len(s.Blocks))
	seen := make(map[netip.Prefix]bool, len(conf))
	for _, b := range conf {
		out = append(out, api.BlockInfo{Block: b, Source: store.SrcConfig})
		seen[b.Prefix] = true
	}
	n := len(out)
	for p, b := range s.Blocks {
		if seen[p] {
			continue
		}
		bi := api.BlockInfo{Block: policy.Block{Prefix: p, MaxBWIn: b.MaxBWIn}, Source: store.SrcAPI}
		if b.Expires != 0 {
			t := time.Unix(b.Expires, 0).UTC()
			bi.Expires = &t
		}
		out = append(out, bi)
	}
	slices.SortFunc(out[n:], func(a, b api.BlockInfo) int { return comparePrefixes(a.Prefix, b.Prefix) })
	if sk == nil {
		return out, nil
	}
	cs, err := sk.BlockCounters() // not under the engine's lock
	if err != nil {
		return nil, err
	}
	slices.SortFunc(cs, func(a, b xdp.BlockCounters) int { return comparePrefixes(a.Prefix, b.Prefix) })
	for i := range out {
		j, ok := slices.BinarySearchFunc(cs, out[i].Prefix, func(c xdp.BlockCounters, p netip.Prefix) int {
			return comparePrefixes(c.Prefix, p)
		})
		if ok {
			out[i].Packets, out[i].Bytes, out[i].Dropped = cs[j].Packets, cs[j].Bytes, cs[j].Dropped
		}
	}
	return out, nil
}

// comparePrefixes orders prefixes by address (IPv4 first), then length.
func comparePrefixes(a, b netip.Prefix) int {
	if c := a.Addr().Compare(b.Addr()); c != 0 {
		return c
	}
	return a.Bits() - b.Bits()
}

// Protect protects a client (see api.ProtectRequest for who may).
func (e *Engine) Protect(ctx context.Context, who Caller, req api.ProtectRequest) (api.ProtectedInfo, error) {
	if msg, fix := policy.CheckProtectedAddr(req.Addr); msg != "" {
		return api.ProtectedInfo{}, &policy.FieldError{Source: "api", Object: "protected client", Field: "addr", Value: policy.Clip(req.Addr.String()),
			Reason: msg, Fix: fix}
	}
	exp, err := ttlDeadline(req.TTLSeconds, "ttl_s")
	if err != nil {
		return api.ProtectedInfo{}, err
	}
	addr := req.Addr.Unmap()
	if err := who.MayChange(); err != nil {
		if req.Port == 0 {
			return api.ProtectedInfo{}, &ForbiddenError{Why: "protecting a client on every port needs root or group hostqos; name the port your server listens on (port)"}
		}
		if err := e.ownsListener(who.UID, req.Port); err != nil {
			return api.ProtectedInfo{}, err
		}
	}
	class, err := e.protectClass(who, req)
	if err != nil {
		return api.ProtectedInfo{}, err
	}
	key := netip.AddrPortFrom(addr, req.Port)
	err = e.shieldChange(func(s *shieldState) error {
		if old, ok := s.Protected[key]; ok && old.UID != who.UID && !who.Privileged {
			return &ForbiddenError{Why: fmt.Sprintf("client %s is already protected by uid %d", key, old.UID)}
		}
		if _, ok := s.Protected[key]; !ok {
			if len(s.Protected) >= xdp.MaxProtected {
				return &TooManyError{Why: fmt.Sprintf("%d clients are protected, the most the shield holds", len(s.Protected))}
			}
			if !who.Privileged {
				n := 0
				for _, p := range s.Protected {
					if p.UID == who.UID {
						n++
					}
				}
				if n >= MaxProtectedPerUser {
					return &TooManyError{Why: fmt.Sprintf("you protect %d clients, the most one user may; remove some first", n)}
				}
			}
		}
		s.Protected[key] = &protRec{UID: who.UID, Expires: exp, Class: class, Admin: who.Privileged}
		return nil
	})
	if err != nil {
		return api.ProtectedInfo{}, err
	}
	out := api.ProtectedInfo{Addr: addr, Port: req.Port, UID: who.UID, Class: class}
	if exp != 0 {
		t := time.Unix(exp, 0).UTC()
		out.Expires = &t
	}
	return out, nil
}

// ownsListener checks that uid has a listening TCP socket on port.
func (e *Engine) ownsListener(uid uint32, port uint16) error {
	e.mu.Lock()
	sk := e.shieldKernel()
	e.mu.Unlock()
	if sk == nil {
		return errNoShield
	}
	uids, err := sk.ListenerUIDs(port)
	if err != nil {
		return err
	}
	for _, u := range uids {
		if u == uid {
			return nil
		}
	}
	return &ForbiddenError{Why: fmt.Sprintf("protecting a client needs root or group hostqos, or a listening TCP socket of yours on the port; uid %d has none on port %d", uid, port)}
}

// Unprotect ends a client's protection: the admin's for any client, a
// user's for their own.
func (e *Engine) Unprotect(ctx context.Context, who Caller, client string) error {
	ap, err := netip.ParseAddrPort(client)
	if err != nil {
		return &NotFoundError{What: "protected client", Name: client}
	}
	ap = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	return e.shieldChange(func(s *shieldState) error {
		p, ok := s.Protected[ap]
		if !ok {
			return &NotFoundError{What: "protected client", Name: client}
		}
		if !who.Privileged && p.UID != who.UID {
			return &ForbiddenError{Why: fmt.Sprintf("client %s was protected by uid %d; only they, root or group hostqos may end it", ap, p.UID)}
		}
		delete(s.Protected, ap)
		return nil
	})
}

// Protected lists the protected clients: all of them for root and group
// hostqos, their own for other users.
func (e *Engine) Protected(who Caller) ([]api.ProtectedInfo, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	s := e.shield
	out := []api.ProtectedInfo{}
	for ap, p := range s.Protected {
		if !who.Privileged && p.UID != who.UID {
			continue
		}
		pi := api.ProtectedInfo{Addr: ap.Addr(), Port: ap.Port(), UID: p.UID, Class: protClassOf(p)}
		if p.Expires != 0 {
			t := time.Unix(p.Expires, 0).UTC()
			pi.Expires = &t
		}
		out = append(out, pi)
	}
	sort.Slice(out, func(i, j int) bool {
		if c := out[i].Addr.Compare(out[j].Addr); c != 0 {
			return c < 0
		}
		return out[i].Port < out[j].Port
	})
	return out, nil
}

// ExpireShield removes the API's blocks and protected clients whose TTL
// has passed (Tick calls it every second).
func (e *Engine) ExpireShield() {
	now := time.Now().Unix()
	e.mu.Lock()
	due := false
	for _, b := range e.shield.Blocks {
		due = due || (b.Expires != 0 && b.Expires <= now)
	}
	for _, p := range e.shield.Protected {
		due = due || (p.Expires != 0 && p.Expires <= now)
	}
	e.mu.Unlock()
	if !due {
		return
	}
	var gone []string
	err := e.shieldChange(func(s *shieldState) error {
		for p, b := range s.Blocks {
			if b.Expires != 0 && b.Expires <= now {
				delete(s.Blocks, p)
				gone = append(gone, p.String())
			}
		}
		for ap, p := range s.Protected {
			if p.Expires != 0 && p.Expires <= now {
				delete(s.Protected, ap)
				gone = append(gone, "protected "+ap.String())
			}
		}
		return nil
	})
	if err != nil {
		e.log.Warn("expire drop-list entries", "err", err)
		return
	}
	e.log.Info("drop-list entries expired", "entries", gone)
}

// shieldLinkStatus adds the XDP shield's state of a link to its status.
func (e *Engine) shieldLinkStatus(ls *api.LinkStatus, name string) {
	ifindex, ok := e.xdp[name]
	sk := e.shieldKernel()
	if !ok || sk == nil {
		return
	}
	ls.XDP = true
	if c, err := sk.SynCounters(ifindex); err == nil {
		ls.SynSeen, ls.SynDropped = c.Seen, c.Dropped
	}
}
