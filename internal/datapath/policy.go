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
	// Rule lists (struct hq_rlist): rules without app selectors by
	// family and protocol class, and rules with app selectors by app bit.
	lists [rlists][]uint16
	// Policers of the rules that have one.
	police []policer
	// Reservations of the rules that name one, by rule slot.
	resv map[uint16]hostqosHqResv
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

// Rule lists per policy buffer (HQ_RLISTS) and the index of the app-rule
// list (HQ_RLIST_APP).
const (
	rlists   = int(hostqosHqLimitsHQ_RLISTS)
	rlistApp = int(hostqosHqLimitsHQ_RLIST_APP)
)

// protoClasses are the protocol classes (rule list columns: TCP, UDP,
// ICMP/ICMPv6, other) a rule's protocol selector can match.
func protoClasses(proto uint8) []int {
	switch proto {
	case 0:
		return []int{0, 1, 2, 3}
	case 6:
		return []int{0}
	case 17:
		return []int{1}
	case 1, 58:
		return []int{2}
	}
	return []int{3}
}

// compile validates p and turns it into map entries. Errors name the rule
// (index and slot), the field and the value.
func compile(p Policy) (*compiled, error) {
	if len(p.Rules) > MaxRules {
		return nil, fmt.Errorf("policy has %d rules, the datapath holds at most %d", len(p.Rules), MaxRules)
	}
	c := &compiled{
		exe:  map[FileID]*bitmap{},
		comm: map[string]*bitmap{},
		uid:  map[uint32]*bitmap{},
		cg:   map[uint64]*bitmap{},
	}
	slots := map[uint16]int{}
	get := func(m map[string]*bitmap, k string) *bitmap {
		b := m[k]
		if b == nil {
			b = new(bitmap)
			m[k] = b
		}
		return b
	}
	for i, r := range p.Rules {
		where := fmt.Sprintf("rule %d (slot %d)", i, r.Slot)
		if int(r.Slot) >= MaxRules {
			return nil, fmt.Errorf("%s: slot %d out of range 0..%d", where, r.Slot, MaxRules-1)
		}
		if j, dup := slots[r.Slot]; dup {
			return nil, fmt.Errorf("%s: slot %d already used by rule %d", where, r.Slot, j)
		}
		slots[r.Slot] = i
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
			return nil, fmt.Errorf("%s: action %d unknown", where, r.ActionCode)
		}
		if r.PoliceRate > 0 {
			if r.ActionCode != ActPass {
				return nil, fmt.Errorf("%s: a policer needs action pass, not %d", where, r.ActionCode)
			}
			if r.PoliceBurst == 0 {
				return nil, fmt.Errorf("%s: policer burst 0: must hold at least one packet", where)
			}
			br.Action = uint8(ActPolice)
			c.police = append(c.police, newPolicer(r.Slot, r.PoliceRate, r.PoliceBurst))
		}
		if r.DSCP < -1 || r.DSCP > 63 {
			return nil, fmt.Errorf("%s: DSCP %d out of range -1..63", where, r.DSCP)
		}
		if r.DSCPIn < -1 || r.DSCPIn > 63 {
			return nil, fmt.Errorf("%s: DSCPIn %d out of range -1..63", where, r.DSCPIn)
		}
		var err error
		if br.LportLo, br.LportHi, err = portRange(r.LPortFrom, r.LPortTo); err != nil {
			return nil, fmt.Errorf("%s: local ports: %w", where, err)
		}
		if br.RportLo, br.RportHi, err = portRange(r.RPortFrom, r.RPortTo); err != nil {
			return nil, fmt.Errorf("%s: remote ports: %w", where, err)
		}
		lf, err := prefixWords(r.Local, &br.LocalAddr, &br.LocalMask)
		if err != nil {
			return nil, fmt.Errorf("%s: local prefix: %w", where, err)
		}
		rf, err := prefixWords(r.Remote, &br.RemoteAddr, &br.RemoteMask)
		if err != nil {
			return nil, fmt.Errorf("%s: remote prefix: %w", where, err)
		}
		switch {
		case lf != famAny && rf != famAny && lf != rf:
			return nil, fmt.Errorf("%s: local prefix %s and remote prefix %s are of different address families", where, r.Local, r.Remote)
		case lf != famAny:
			br.Family = lf
		default:
			br.Family = rf
		}

		hasApp := len(r.Exes) > 0 || r.Comm != "" || len(r.Cgroups) > 0 || r.UID != nil
		if hasApp {
			if c.appRules >= MaxAppRules {
				return nil, fmt.Errorf("%s: more than %d rules with app selectors (exe, comm, cgroup, uid)", where, MaxAppRules)
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
					return nil, fmt.Errorf("%s: comm %q longer than 15 bytes (the kernel truncates task names to 15)", where, r.Comm)
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
					return nil, fmt.Errorf("%s: cgroup id 0 is invalid", where)
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
		idx := uint16(len(c.rules))
		if hasApp {
			c.lists[rlistApp] = append(c.lists[rlistApp], idx)
		} else {
			for fi, fam := range []uint8{famIPv4, famIPv6} {
				if br.Family != famAny && br.Family != fam {
					continue
				}
				for _, pc := range protoClasses(br.Proto) {
					c.lists[fi*4+pc] = append(c.lists[fi*4+pc], idx)
				}
			}
		}
		c.rules = append(c.rules, br)
	}
	var err error
	if c.resv, err = compileResv(p, c.rules); err != nil {
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
func (d *Datapath) Apply(p Policy) error {
	c, err := compile(p)
	if err != nil {
		return fmt.Errorf("compile policy: %w", err)
	}
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
	if err := d.writeAppMaps(buf, c); err != nil {
		return err
	}
	if err := d.writePolicers(c.police); err != nil {
		return err
	}
	if n := len(c.rules); n > 0 {
		keys := make([]uint32, n)
		for i := range keys {
			keys[i] = buf*uint32(MaxRules) + uint32(i)
		}
		if _, err := d.objs.HqRules.BatchUpdate(keys, c.rules, nil); err != nil {
			return fmt.Errorf("write rules: %w", err)
		}
	}
	lkeys := make([]uint32, rlists)
	lvals := make([]hostqosHqRlist, rlists)
	for k, l := range c.lists {
		lkeys[k] = buf*uint32(rlists) + uint32(k)
		lvals[k].N = uint32(copy(lvals[k].Idx[:], l))
	}
	if err := batchUpdate(d.objs.HqRlists, lkeys, lvals); err != nil {
		return fmt.Errorf("write rule lists: %w", err)
	}
	hb := &st.Buf[buf]
	hb.Nrules = uint32(len(c.rules))
	hb.R_exe.W = c.rExe
	hb.R_comm.W = c.rComm
	hb.R_uid.W = c.rUID
	hb.R_cg.W = c.rCg
	hb.Nresv = nresv
	hb.Nsess = nsess
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
	if nresv > 0 {
		// Sockets opened before their reservation are bound now, not
		// at their next packet.
		if err := d.bindOpenSockets(); err != nil {
			d.log.Warn("bind open sockets to reservations", "err", err)
		}
	}
	d.log.Info("policy applied", "generation", gen+1, "rules", len(c.rules), "app_rules", c.appRules)
	return nil
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

// writeAppMaps replaces buffer buf's entries of the app-selector maps.
func (d *Datapath) writeAppMaps(buf uint32, c *compiled) error {
	// exe
	{
		var old []hostqosHqExeKey
		var k hostqosHqExeKey
		var v hostqosHqBitmap
		it := d.objs.HqExe.Iterate()
		for it.Next(&k, &v) {
			if k.Buf == buf {
				old = append(old, k)
			}
		}
		if err := it.Err(); err != nil {
			return fmt.Errorf("list exe selectors: %w", err)
		}
		if err := batchDelete(d.objs.HqExe, old); err != nil {
			return fmt.Errorf("clear exe selectors: %w", err)
		}
		keys := make([]hostqosHqExeKey, 0, len(c.exe))
		vals := make([]hostqosHqBitmap, 0, len(c.exe))
		for f, b := range c.exe {
			keys = append(keys, hostqosHqExeKey{Buf: buf, Dev: f.Dev, Ino: f.Ino})
			vals = append(vals, hostqosHqBitmap{W: *b})
		}
		if err := batchUpdate(d.objs.HqExe, keys, vals); err != nil {
			return fmt.Errorf("write exe selectors: %w", err)
		}
	}
	// comm
	{
		var old []hostqosHqCommKey
		var k hostqosHqCommKey
		var v hostqosHqBitmap
		it := d.objs.HqComm.Iterate()
		for it.Next(&k, &v) {
			if k.Buf == buf {
				old = append(old, k)
			}
		}
		if err := it.Err(); err != nil {
			return fmt.Errorf("list comm selectors: %w", err)
		}
		if err := batchDelete(d.objs.HqComm, old); err != nil {
			return fmt.Errorf("clear comm selectors: %w", err)
		}
		keys := make([]hostqosHqCommKey, 0, len(c.comm))
		vals := make([]hostqosHqBitmap, 0, len(c.comm))
		for s, b := range c.comm {
			k := hostqosHqCommKey{Buf: buf}
			putComm(&k.Comm, s)
			keys = append(keys, k)
			vals = append(vals, hostqosHqBitmap{W: *b})
		}
		if err := batchUpdate(d.objs.HqComm, keys, vals); err != nil {
			return fmt.Errorf("write comm selectors: %w", err)
		}
	}
	// uid
	{
		var old []hostqosHqUidKey
		var k hostqosHqUidKey
		var v hostqosHqBitmap
		it := d.objs.HqUid.Iterate()
		for it.Next(&k, &v) {
			if k.Buf == buf {
				old = append(old, k)
			}
		}
		if err := it.Err(); err != nil {
			return fmt.Errorf("list uid selectors: %w", err)
		}
		if err := batchDelete(d.objs.HqUid, old); err != nil {
			return fmt.Errorf("clear uid selectors: %w", err)
		}
		keys := make([]hostqosHqUidKey, 0, len(c.uid))
		vals := make([]hostqosHqBitmap, 0, len(c.uid))
		for u, b := range c.uid {
			keys = append(keys, hostqosHqUidKey{Buf: buf, Uid: u})
			vals = append(vals, hostqosHqBitmap{W: *b})
		}
		if err := batchUpdate(d.objs.HqUid, keys, vals); err != nil {
			return fmt.Errorf("write uid selectors: %w", err)
		}
	}
	// cgroup
	{
		var old []hostqosHqCgKey
		var k hostqosHqCgKey
		var v hostqosHqBitmap
		it := d.objs.HqCg.Iterate()
		for it.Next(&k, &v) {
			if k.Buf == uint64(buf) {
				old = append(old, k)
			}
		}
		if err := it.Err(); err != nil {
			return fmt.Errorf("list cgroup selectors: %w", err)
		}
		if err := batchDelete(d.objs.HqCg, old); err != nil {
			return fmt.Errorf("clear cgroup selectors: %w", err)
		}
		keys := make([]hostqosHqCgKey, 0, len(c.cg))
		vals := make([]hostqosHqBitmap, 0, len(c.cg))
		for id, b := range c.cg {
			keys = append(keys, hostqosHqCgKey{Buf: uint64(buf), Id: id})
			vals = append(vals, hostqosHqBitmap{W: *b})
		}
		if err := batchUpdate(d.objs.HqCg, keys, vals); err != nil {
			return fmt.Errorf("write cgroup selectors: %w", err)
		}
	}
	return nil
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
