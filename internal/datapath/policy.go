package datapath

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"sync/atomic"

	"github.com/cilium/ebpf"
)

// Address families as the BPF program encodes them (enum hq_family).
const (
	famAny  = uint8(hostqosHqFamilyHQ_AF_ANY)
	famIPv4 = uint8(hostqosHqFamilyHQ_AF_INET)
	famIPv6 = uint8(hostqosHqFamilyHQ_AF_INET6)
)

type bitmap [hostqosHqLimitsHQ_BITMAP_WORDS]uint64

func (b *bitmap) set(bit int) { b[bit>>6] |= 1 << (bit & 63) }

// compiled is a policy in map form, ready to be written to one buffer.
type compiled struct {
	rules             []hostqosHqRule
	exe               map[FileID]*bitmap
	comm              map[string]*bitmap
	uid               map[uint32]*bitmap
	cg                map[uint64]*bitmap
	rExe, rComm, rUID bitmap
	rCg               bitmap
	appRules          int
	// pos is each rule's position in the buffer (place.go), in policy
	// order; appIdx is the position of each app bit's rule.
	pos    []uint32
	appIdx []uint32
	// Tuple-space search over the rules without app selectors (struct
	// hq_tuple): tuples by family (0 IPv4, 1 IPv6) in the order of their
	// earliest rule, the hash entries and their chains' further nodes
	// (by tnodeOf; node 0 unused).
	tuples [2][]hostqosHqTuple
	tss    map[hostqosHqTssKey]hostqosHqTnode
	tnodes []hostqosHqTnode
	// Policers of the rules that have one.
	police []policer
	// Reservations of the rules that name one, by rule slot.
	resv map[uint16]hostqosHqResv
	// Download limits of every rule (0 = none).
	in []inLimit
}

// policer is a rule slot's token bucket as struct hq_police holds it.
type policer struct {
	slot       uint16
	nsQ16, tau uint64 // cost of a byte in 1/65536 ns; bucket depth in ns
}

func newPolicer(slot uint16, rate uint64, burst uint32) policer {
	return policer{slot: slot,
		nsQ16: uint64(math.Round(8e9 * (1 << policeShift) / float64(rate))),
		tau:   uint64(float64(burst) * 8e9 / float64(rate))}
}

// policeShift is HQ_POLICE_SHIFT: a policer's cost per byte is kept in
// 1/2^policeShift ns.
const policeShift = uint(hostqosHqLimitsHQ_POLICE_SHIFT)

// compile validates p and turns it into map entries, the rules at
// positions 0, 1, 2, ... Errors name the rule (index and slot), the field
// and the value.
func compile(p Policy) (*compiled, error) { return compileAt(p, nil) }

// compileAt is compile with the rules at positions pos (strictly
// increasing, below MaxRules; nil: 0, 1, 2, ...), see place.go.
func compileAt(p Policy, pos []uint32) (*compiled, error) {
	if len(p.Rules) > MaxRules {
		return nil, fmt.Errorf("policy has %d rules, the datapath holds at most %d", len(p.Rules), MaxRules)
	}
	if pos == nil {
		pos = make([]uint32, len(p.Rules))
		for i := range pos {
			pos[i] = uint32(i)
		}
	}
	if err := checkLinksIn(p.LinksIn, p.InPrioNone); err != nil {
		return nil, err
	}
	c := &compiled{
		exe:  map[FileID]*bitmap{},
		comm: map[string]*bitmap{},
		uid:  map[uint32]*bitmap{},
		cg:   map[uint64]*bitmap{},
		pos:  pos,
		// Sized up front: this runs over the whole policy on every change.
		rules: make([]hostqosHqRule, 0, len(p.Rules)),
		in:    make([]inLimit, 0, len(p.Rules)),
	}
	slots := make([]int32, MaxRules) // rule index + 1 of each slot used
	get := func(m map[string]*bitmap, k string) *bitmap {
		b := m[k]
		if b == nil {
			b = new(bitmap)
			m[k] = b
		}
		return b
	}
	for i, r := range p.Rules {
		where := func() string { return fmt.Sprintf("rule %d (slot %d)", i, r.Slot) } // for errors only: no Sprintf per rule
		if int(r.Slot) >= MaxRules {
			return nil, fmt.Errorf("%s: slot %d out of range 0..%d", where(), r.Slot, MaxRules-1)
		}
		if j := slots[r.Slot]; j != 0 {
			return nil, fmt.Errorf("%s: slot %d already used by rule %d", where(), r.Slot, j-1)
		}
		slots[r.Slot] = int32(i + 1)
		br := hostqosHqRule{
			Slot:    r.Slot,
			Proto:   r.Proto,
			Classid: r.ClassID,
			Action:  uint8(r.ActionCode),
			Dscp:    r.DSCP,
			DscpIn:  r.DSCPIn,
		}
		switch r.ActionCode {
		case ActPass, ActDrop, ActObserve:
		default:
			return nil, fmt.Errorf("%s: action %d unknown", where(), r.ActionCode)
		}
		if r.PoliceRate > 0 {
			if r.ActionCode != ActPass {
				return nil, fmt.Errorf("%s: a policer needs action pass, not %d", where(), r.ActionCode)
			}
			if r.PoliceBurst == 0 {
				return nil, fmt.Errorf("%s: policer burst 0: must hold at least one packet", where())
			}
			br.Action = uint8(ActPolice)
			c.police = append(c.police, newPolicer(r.Slot, r.PoliceRate, r.PoliceBurst))
		}
		if r.MaxBWIn > 0 && r.ActionCode != ActPass {
			return nil, fmt.Errorf("%s: a download limit needs action pass, not %d", where(), r.ActionCode)
		}
		if r.InPrio >= inLevels {
			return nil, fmt.Errorf("%s: class priority %d out of range 0..%d", where(), r.InPrio, inLevels-1)
		}
		c.in = append(c.in, newInLimit(r.Slot, r.MaxBWIn, r.InPrio, r.AckClassID))
		if r.DSCP < -1 || r.DSCP > 63 {
			return nil, fmt.Errorf("%s: DSCP %d out of range -1..63", where(), r.DSCP)
		}
		if r.DSCPIn < -1 || r.DSCPIn > 63 {
			return nil, fmt.Errorf("%s: DSCPIn %d out of range -1..63", where(), r.DSCPIn)
		}
		var err error
		if br.LportLo, br.LportHi, err = portRange(r.LPortFrom, r.LPortTo); err != nil {
			return nil, fmt.Errorf("%s: local ports: %w", where(), err)
		}
		if br.RportLo, br.RportHi, err = portRange(r.RPortFrom, r.RPortTo); err != nil {
			return nil, fmt.Errorf("%s: remote ports: %w", where(), err)
		}
		lf, err := prefixWords(r.Local, &br.LocalAddr, &br.LocalMask)
		if err != nil {
			return nil, fmt.Errorf("%s: local prefix: %w", where(), err)
		}
		rf, err := prefixWords(r.Remote, &br.RemoteAddr, &br.RemoteMask)
		if err != nil {
			return nil, fmt.Errorf("%s: remote prefix: %w", where(), err)
		}
		switch {
		case lf != famAny && rf != famAny && lf != rf:
			return nil, fmt.Errorf("%s: local prefix %s and remote prefix %s are of different address families", where(), r.Local, r.Remote)
		case lf != famAny:
			br.Family = lf
		default:
			br.Family = rf
		}

		hasApp := len(r.Exes) > 0 || r.Comm != "" || len(r.Cgroups) > 0 || r.UID != nil
		if hasApp {
			if c.appRules >= MaxAppRules {
				return nil, fmt.Errorf("%s: more than %d rules with app selectors (exe, comm, cgroup, uid)", where(), MaxAppRules)
			}
			bit := c.appRules
			c.appRules++
			br.HasApp = 1
			br.AppBit = uint16(bit)
			for _, e := range r.Exes {
				b := c.exe[e]
				if b == nil {
					b = new(bitmap)
					c.exe[e] = b
				}
				b.set(bit)
			}
			if len(r.Exes) > 0 {
				c.rExe.set(bit)
			}
			if r.Comm != "" {
				if len(r.Comm) > 15 {
					return nil, fmt.Errorf("%s: comm %q longer than 15 bytes (the kernel truncates task names to 15)", where(), r.Comm)
				}
				get(c.comm, r.Comm).set(bit)
				c.rComm.set(bit)
			}
			if r.UID != nil {
				b := c.uid[*r.UID]
				if b == nil {
					b = new(bitmap)
					c.uid[*r.UID] = b
				}
				b.set(bit)
				c.rUID.set(bit)
			}
			for _, g := range r.Cgroups {
				if g.ID == 0 {
					return nil, fmt.Errorf("%s: cgroup id 0 is invalid", where())
				}
				b := c.cg[g.ID]
				if b == nil {
					b = new(bitmap)
					c.cg[g.ID] = b
				}
				b.set(bit)
			}
			if len(r.Cgroups) > 0 {
				c.rCg.set(bit)
			}
		}
		if hasApp {
			c.appIdx = append(c.appIdx, pos[len(c.rules)])
		}
		c.rules = append(c.rules, br)
	}
	var err error
	if c.resv, err = compileResv(p, c.rules); err != nil {
		return nil, err
	}
	if err := c.buildTSS(); err != nil {
		return nil, err
	}
	switch {
	case len(c.exe) > maxExeKeys:
		return nil, fmt.Errorf("policy names %d executables, the datapath holds at most %d", len(c.exe), maxExeKeys)
	case len(c.comm) > maxCommKeys:
		return nil, fmt.Errorf("policy names %d command names, the datapath holds at most %d", len(c.comm), maxCommKeys)
	case len(c.uid) > maxUIDKeys:
		return nil, fmt.Errorf("policy names %d users, the datapath holds at most %d", len(c.uid), maxUIDKeys)
	case len(c.cg) > maxCgroupKeys:
		return nil, fmt.Errorf("policy names %d cgroups, the datapath holds at most %d", len(c.cg), maxCgroupKeys)
	}
	return c, nil
}

func portRange(from, to uint16) (uint16, uint16, error) {
	if from == 0 && to == 0 {
		return 0, 65535, nil
	}
	if to == 0 {
		to = from
	}
	if from > to {
		return 0, 0, fmt.Errorf("range %d-%d is empty", from, to)
	}
	return from, to, nil
}

// prefixWords writes a prefix as four network-order words (IPv4 in word
// 0) plus mask, pre-masked, and returns its family (famAny if invalid).
func prefixWords(p netip.Prefix, addr, mask *[4]uint32) (uint8, error) {
	if !p.IsValid() {
		return famAny, nil
	}
	p = p.Masked()
	a := p.Addr()
	bits := p.Bits()
	var b []byte
	fam := uint8(famIPv6)
	if a.Is4() || a.Is4In6() && bits >= 96 {
		if a.Is4In6() {
			a = a.Unmap()
			bits -= 96
		}
		v := a.As4()
		b = v[:]
		fam = famIPv4
	} else {
		v := a.As16()
		b = v[:]
	}
	for w := 0; w < len(b)/4; w++ {
		// Words are compared as loaded from the packet: keep network byte
		// order in memory, i.e. native-endian decode of the bytes.
		addr[w] = binary.NativeEndian.Uint32(b[w*4:])
		var m [4]byte
		for k := 0; k < 32; k++ {
			if w*32+k < bits {
				m[k/8] |= 0x80 >> (k % 8)
			}
		}
		mask[w] = binary.NativeEndian.Uint32(m[:])
		addr[w] &= mask[w]
	}
	return fam, nil
}

func addrFromWords(family uint8, w *[4]uint32) netip.Addr {
	var b [16]byte
	for i := 0; i < 4; i++ {
		binary.NativeEndian.PutUint32(b[i*4:], w[i])
	}
	if family == famIPv4 {
		return netip.AddrFrom4([4]byte(b[:4]))
	}
	return netip.AddrFrom16(b)
}

// Apply installs a complete policy atomically: it writes the inactive
// buffer of the double-buffered policy tables completely, then flips the
// active buffer and generation with one atomic store. Flows evaluated under
// the previous generation are re-evaluated on their next packet. On error
// nothing changes for the datapath. When the policy has reservations, the
// connected sockets of the calling thread's network namespace that fall
// under one are bound to it right after the flip.
//
// Only entries that differ from what the inactive buffer holds are
// written: the datapath remembers what it wrote to each buffer (after a
// failed write, or for adopted state, it reads the hash maps back and
// rewrites the arrays whole).
func (d *Datapath) Apply(p Policy) error {
	d.mu.Lock()
	prev := d.placed
	d.mu.Unlock()
	var pos []uint32
	if len(p.Rules) <= MaxRules { // else compile says why not
		slots := make([]uint16, len(p.Rules))
		for i := range p.Rules {
			slots[i] = p.Rules[i].Slot
		}
		pos = placeRules(slots, prev, MaxRules)
	}
	c, err := compileAt(p, pos)
	if err != nil {
		return fmt.Errorf("compile policy: %w", err)
	}
	if err := d.checkBounded(c); err != nil {
		return fmt.Errorf("compile policy: %w", err)
	}
	d.span.noteApplied(p) // before its rules can count
	d.mu.Lock()
	defer d.mu.Unlock()

	st := d.stateView()
	gen := atomic.LoadUint32(&st.Gen)
	buf := (gen + 1) & 1

	oldResv, err := d.activeResv(gen & 1)
	if err != nil {
		return err
	}
	nresv, nsess, err := d.writeResv(buf, c.resv, st.Buf[buf].Nresv != 0)
	if err != nil {
		return err
	}
	want := c.bufState(buf)
	have := d.bufs[buf]
	d.bufs[buf] = nil // unknown until the writes below all succeed
	if err := d.writeBuf(buf, have, want); err != nil {
		return err
	}
	if err := d.writePolicers(c.police); err != nil {
		return err
	}
	if err := d.writeInLimits(c.in); err != nil {
		return err
	}
	if err := d.writeLinksIn(p.LinksIn, p.InPrioNone); err != nil {
		return err
	}
	d.bufs[buf] = want
	d.placed = c.placement()
	hb := &st.Buf[buf]
	hb.Nrules = uint32(len(want.rules)) // the positions' bound: no rule is at or above it
	hb.Napp = uint32(c.appRules)
	hb.Ntuples = [2]uint32{uint32(len(c.tuples[0])), uint32(len(c.tuples[1]))}
	hb.R_exe.W = c.rExe
	hb.R_comm.W = c.rComm
	hb.R_uid.W = c.rUID
	hb.R_cg.W = c.rCg
	hb.Nresv = nresv
	hb.Nsess = nsess
	hb.FqDefault = p.FlowQueueDefault
	// The atomic store orders the buffer writes above before the flip.
	atomic.StoreUint32(&st.Gen, gen+1)
	for _, v := range c.resv {
		delete(oldResv, v.Id)
	}
	if err := d.releaseResv(oldResv); err != nil {
		// The policy is in force; the freed ids start afresh when reused
		// at the latest because their Tspec epoch restarts the times.
		d.log.Warn("reset state of removed reservations", "err", err)
	}
	d.log.Info("policy applied", "generation", gen+1, "rules", len(c.rules), "app_rules", c.appRules,
		"tuples", len(c.tuples[0])+len(c.tuples[1]))
	return nil
}

// bufState is what one policy buffer holds, in map form: the entries of
// every per-buffer map (keys as written, buffer included; but the search
// entries' tuples are within the buffer's part, see tssAt).
type bufState struct {
	rules  []hostqosHqRule
	appIdx []uint32
	tuples [2][]hostqosHqTuple
	tnodes []hostqosHqTnode
	tss    map[hostqosHqTssKey]hostqosHqTnode
	exe    map[hostqosHqExeKey]hostqosHqBitmap
	comm   map[hostqosHqCommKey]hostqosHqBitmap
	uid    map[hostqosHqUidKey]hostqosHqBitmap
	cg     map[hostqosHqCgKey]hostqosHqBitmap
}

// bufState lays c out for buffer buf.
func (c *compiled) bufState(buf uint32) *bufState {
	s := &bufState{
		rules:  c.rulesAt(),
		appIdx: c.appIdx,
		tuples: c.tuples,
		tnodes: c.tnodes,
		tss:    c.tss,
		exe:    make(map[hostqosHqExeKey]hostqosHqBitmap, len(c.exe)),
		comm:   make(map[hostqosHqCommKey]hostqosHqBitmap, len(c.comm)),
		uid:    make(map[hostqosHqUidKey]hostqosHqBitmap, len(c.uid)),
		cg:     make(map[hostqosHqCgKey]hostqosHqBitmap, len(c.cg)),
	}
	for f, b := range c.exe {
		s.exe[hostqosHqExeKey{Buf: buf, Dev: f.Dev, Ino: f.Ino}] = hostqosHqBitmap{W: *b}
	}
	for name, b := range c.comm {
		k := hostqosHqCommKey{Buf: buf}
		putComm(&k.Comm, name)
		s.comm[k] = hostqosHqBitmap{W: *b}
	}
	for u, b := range c.uid {
		s.uid[hostqosHqUidKey{Buf: buf, Uid: u}] = hostqosHqBitmap{W: *b}
	}
	for id, b := range c.cg {
		s.cg[hostqosHqCgKey{Buf: uint64(buf), Id: id}] = hostqosHqBitmap{W: *b}
	}
	return s
}

// writeBuf brings buffer buf from have (nil = unknown) to want, writing
// only what differs.
func (d *Datapath) writeBuf(buf uint32, have, want *bufState) error {
	if have == nil {
		var err error
		if have, err = d.readBufHashes(buf); err != nil {
			return err
		}
	}
	if err := syncArray(d.objs.HqRules, buf*uint32(MaxRules), have.rules, want.rules); err != nil {
		return fmt.Errorf("write rules: %w", err)
	}
	if err := syncArray(d.objs.HqAppidx, buf*uint32(MaxAppRules), have.appIdx, want.appIdx); err != nil {
		return fmt.Errorf("write app-rule index: %w", err)
	}
	for fi := range want.tuples {
		if err := syncArray(d.objs.HqTuples, (buf*2+uint32(fi))*uint32(maxTuples), have.tuples[fi], want.tuples[fi]); err != nil {
			return fmt.Errorf("write search tuples: %w", err)
		}
	}
	if err := syncArray(d.objs.HqTnodes, buf*uint32(tssEntries), have.tnodes, want.tnodes); err != nil {
		return fmt.Errorf("write search chains: %w", err)
	}
	if err := syncHash(d.objs.HqTss, have.tss, want.tss, tssAt(buf)); err != nil {
		return fmt.Errorf("write search entries: %w", err)
	}
	if err := syncHash(d.objs.HqExe, have.exe, want.exe, nil); err != nil {
		return fmt.Errorf("write exe selectors: %w", err)
	}
	if err := syncHash(d.objs.HqComm, have.comm, want.comm, nil); err != nil {
		return fmt.Errorf("write comm selectors: %w", err)
	}
	if err := syncHash(d.objs.HqUid, have.uid, want.uid, nil); err != nil {
		return fmt.Errorf("write uid selectors: %w", err)
	}
	if err := syncHash(d.objs.HqCg, have.cg, want.cg, nil); err != nil {
		return fmt.Errorf("write cgroup selectors: %w", err)
	}
	return nil
}

// readBufHashes reads buffer buf's entries of the hash maps back from the
// kernel; its arrays stay unknown (nil), so they are written whole.
func (d *Datapath) readBufHashes(buf uint32) (*bufState, error) {
	s := &bufState{}
	var err error
	lo, hi := buf*2*uint32(maxTuples), (buf+1)*2*uint32(maxTuples)
	if s.tss, err = readHash[hostqosHqTssKey, hostqosHqTnode](d.objs.HqTss, func(k hostqosHqTssKey) bool { return k.Tuple >= lo && k.Tuple < hi }); err != nil {
		return nil, fmt.Errorf("list search entries: %w", err)
	}
	inBuf := make(map[hostqosHqTssKey]hostqosHqTnode, len(s.tss))
	for k, v := range s.tss {
		k.Tuple -= lo
		inBuf[k] = v
	}
	s.tss = inBuf
	if s.exe, err = readHash[hostqosHqExeKey, hostqosHqBitmap](d.objs.HqExe, func(k hostqosHqExeKey) bool { return k.Buf == buf }); err != nil {
		return nil, fmt.Errorf("list exe selectors: %w", err)
	}
	if s.comm, err = readHash[hostqosHqCommKey, hostqosHqBitmap](d.objs.HqComm, func(k hostqosHqCommKey) bool { return k.Buf == buf }); err != nil {
		return nil, fmt.Errorf("list comm selectors: %w", err)
	}
	if s.uid, err = readHash[hostqosHqUidKey, hostqosHqBitmap](d.objs.HqUid, func(k hostqosHqUidKey) bool { return k.Buf == buf }); err != nil {
		return nil, fmt.Errorf("list uid selectors: %w", err)
	}
	if s.cg, err = readHash[hostqosHqCgKey, hostqosHqBitmap](d.objs.HqCg, func(k hostqosHqCgKey) bool { return k.Buf == uint64(buf) }); err != nil {
		return nil, fmt.Errorf("list cgroup selectors: %w", err)
	}
	return s, nil
}

func readHash[K, V comparable](m *ebpf.Map, keep func(K) bool) (map[K]V, error) {
	out := map[K]V{}
	var k K
	var v V
	it := m.Iterate()
	for it.Next(&k, &v) {
		if keep(k) {
			out[k] = v
		}
	}
	return out, it.Err()
}

// syncArray writes the elements of want that differ from have (same
// index) at base+index.
func syncArray[V comparable](m *ebpf.Map, base uint32, have, want []V) error {
	var keys []uint32
	var vals []V
	for i, v := range want {
		if i < len(have) && have[i] == v {
			continue
		}
		keys = append(keys, base+uint32(i))
		vals = append(vals, v)
	}
	return batchUpdate(m, keys, vals)
}

// syncHash deletes the keys of have that want lacks, then writes the
// entries of want that have lacks or holds with another value; at, if not
// nil, gives the map's key of a key of have and want.
func syncHash[K, V comparable](m *ebpf.Map, have, want map[K]V, at func(K) K) error {
	if at == nil {
		at = func(k K) K { return k }
	}
	var del []K
	for k := range have {
		if _, ok := want[k]; !ok {
			del = append(del, at(k))
		}
	}
	if err := batchDelete(m, del); err != nil {
		return err
	}
	var keys []K
	var vals []V
	for k, v := range want {
		if hv, ok := have[k]; ok && hv == v {
			continue
		}
		keys = append(keys, at(k))
		vals = append(vals, v)
	}
	return batchUpdate(m, keys, vals)
}

// writePolicers sets the cost and depth of the slots' policers before the
// flip makes their rules police. A policer whose parameters did not change
// keeps its state; a changed one starts with a full bucket. Slots without
// a policer keep whatever they had: no rule of the new policy polices
// through them, and a later policer on the slot is rewritten.
func (d *Datapath) writePolicers(ps []policer) error {
	for _, p := range ps {
		k := uint32(p.slot)
		var v hostqosHqPolice
		if err := d.objs.HqPolice.Lookup(&k, &v); err != nil {
			return fmt.Errorf("read policer of slot %d: %w", p.slot, err)
		}
		if v.NsQ16 == p.nsQ16 && v.Tau == p.tau {
			continue
		}
		v = hostqosHqPolice{NsQ16: p.nsQ16, Tau: p.tau}
		if err := d.objs.HqPolice.Update(&k, &v, ebpf.UpdateAny); err != nil {
			return fmt.Errorf("write policer of slot %d: %w", p.slot, err)
		}
	}
	return nil
}

// Reevaluate has every flow evaluated again on its next packet, under the
// active policy: it advances the generation by two, which keeps the active
// buffer (its parity) and rewrites nothing. Used after sockets got an
// identity their flows were classified without.
func (d *Datapath) Reevaluate() {
	d.mu.Lock()
	defer d.mu.Unlock()
	atomic.AddUint32(&d.stateView().Gen, 2)
}

func batchDelete[K any](m *ebpf.Map, keys []K) error {
	if len(keys) == 0 {
		return nil
	}
	_, err := m.BatchDelete(keys, nil)
	if errors.Is(err, ebpf.ErrNotSupported) {
		for i := range keys {
			if err := m.Delete(&keys[i]); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
				return err
			}
		}
		return nil
	}
	return err
}

func batchUpdate[K, V any](m *ebpf.Map, keys []K, vals []V) error {
	if len(keys) == 0 {
		return nil
	}
	_, err := m.BatchUpdate(keys, vals, nil)
	if errors.Is(err, ebpf.ErrNotSupported) {
		for i := range keys {
			if err := m.Put(&keys[i], &vals[i]); err != nil {
				return err
			}
		}
		return nil
	}
	return err
}

// tssAt gives the hq_tss key of a search entry of buffer buf: its tuple
// within the whole map.
func tssAt(buf uint32) func(hostqosHqTssKey) hostqosHqTssKey {
	return func(k hostqosHqTssKey) hostqosHqTssKey {
		k.Tuple += buf * 2 * uint32(maxTuples)
		return k
	}
}
