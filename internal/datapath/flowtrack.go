package datapath

import (
	"cmp"
)

// Tracking flows from walk to walk.
//
// The history recorder follows every flow of the table from one walk to
// the next: it needs each flow's counters at its previous walk (to add
// the new traffic to the flow's app) and must learn of the flows that
// left the table (to record them). Rather than a second per-flow table of
// its own, it keeps what it remembers (a FlowMemo) in the reader's record
// of the flow, which a rescan carries over to the flow's new record; the
// records of tracked flows that a rescan no longer finds are kept until
// the tracker's next walk. That costs the memo's bytes per flow, not a
// second key, map entry and copy of the flow's owner per flow.

// FlowMemo is what the tracker of the flow table (TrackFlows) remembers
// of a flow between its walks.
type FlowMemo struct {
	// Seen is false the first time the tracker meets the flow.
	Seen bool
	// Counters and LastSeenNS are the flow's as of the tracker's last walk.
	Counters
	LastSeenNS uint64
	// Mark is the tracker's own (the history recorder: the LastSeenNS at
	// which it recorded the flow).
	Mark uint64
}

// maxGone bounds the records of gone flows kept for the tracker: beyond
// it (the tracker has not walked for a long time) the oldest are dropped.
const maxGone = 1 << 17

func bySlot(a, b flowRec) int {
	if c := cmp.Compare(a.ref.Slot, b.ref.Slot); c != 0 {
		return c
	}
	return cmp.Compare(a.ref.Tag, b.ref.Tag)
}

// trackID identifies a flow across slots: its key and first packet.
type trackID struct {
	key   FlowKey
	first uint64
}

// carry moves the memos of the previous scan's records (old) to this
// scan's (recs), both sorted by slot and tag: a flow that kept its counter
// slot (same slot and tag) is matched by a merge of the two; one that
// moved to another slot by its key and first-seen time. Tracked flows of
// old found in neither way are gone: their records join r.gone. Called
// with r.mu held.
func (r *FlowReader) carry(old, recs []flowRec) {
	var lostOld, lostNew []int
	i := 0
	for j := range recs {
		n := &recs[j]
		for i < len(old) && bySlot(old[i], *n) < 0 {
			if old[i].memo.Seen {
				lostOld = append(lostOld, i)
			}
			i++
		}
		if n.ref.Tag != 0 && i < len(old) && old[i].ref.Slot == n.ref.Slot && old[i].ref.Tag == n.ref.Tag {
			n.memo = old[i].memo
			i++
			continue
		}
		lostNew = append(lostNew, j)
	}
	for ; i < len(old); i++ {
		if old[i].memo.Seen {
			lostOld = append(lostOld, i)
		}
	}
	if len(lostOld) == 0 {
		return
	}
	if len(lostNew) > 0 {
		byID := make(map[trackID]int, len(lostOld))
		for _, i := range lostOld {
			byID[trackID{old[i].key, old[i].firstNS}] = i
		}
		for _, j := range lostNew {
			id := trackID{recs[j].key, recs[j].firstNS}
			if i, ok := byID[id]; ok {
				recs[j].memo = old[i].memo
				old[i].memo.Seen = false // matched
				delete(byID, id)
			}
		}
	}
	for _, i := range lostOld {
		if old[i].memo.Seen {
			r.gone = append(r.gone, old[i])
		}
	}
	if over := len(r.gone) - maxGone; over > 0 {
		r.gone = append(r.gone[:0], r.gone[over:]...)
	}
}

// Track calls fn for every flow in the table with the tracker's memo of
// it, which fn updates (a flow met for the first time has a zero memo),
// until fn returns false; then, if fn walked them all, gone for every
// tracked flow that left the table since, with its memo and its record
// as of the tracker's last walk (Counters and LastSeenNS from the memo).
// One tracker per reader: a second one would see the first one's memos.
func (r *FlowReader) Track(fn func(Flow, *FlowMemo) bool, gone func(Flow, FlowMemo)) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.refresh(false); err != nil {
		return err
	}
	m := r.d.fctr.Load()
	var f Flow
	for i := range r.recs {
		fr := &r.recs[i]
		m.flow(fr, r.gen, &f)
		if !fn(f, &fr.memo) {
			return nil
		}
	}
	for i := range r.gone {
		fr := &r.gone[i]
		gone(Flow{Key: fr.key, RuleSlot: fr.rule, Gen: fr.gen, PID: fr.pid, Comm: fr.comm, UID: fr.uid,
			Counters: fr.memo.Counters, FirstSeenNS: fr.firstNS, LastSeenNS: fr.memo.LastSeenNS}, fr.memo)
	}
	clear(r.gone)
	r.gone = r.gone[:0]
	if cap(r.gone) > 4096 {
		r.gone = nil // a burst of evictions: give its buffer back
	}
	return nil
}

// TrackFlows is Track on the datapath's own reader (the one Flows uses).
func (d *Datapath) TrackFlows(fn func(Flow, *FlowMemo) bool, gone func(Flow, FlowMemo)) error {
	d.readerMu.Lock()
	if d.reader == nil {
		d.reader = d.NewFlowReader()
	}
	r := d.reader
	d.readerMu.Unlock()
	return r.Track(fn, gone)
}
