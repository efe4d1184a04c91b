package datapath

import (
	"errors"
	"fmt"
	"io"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

const (
	flowRecSize = int(unsafe.Sizeof(hostqosHqFlowKey{}) + unsafe.Sizeof(hostqosHqFlow{}))
	ctrRecSize  = int(unsafe.Sizeof(hostqosHqCtrRec{})) // struct hq_ctr_rec
	dumpBufSize = 1 << 20
)

// dump runs a map-element iterator, attached by attach unless *it is set
// already, and calls fn for each fixed-size record it writes. The record's
// memory is only valid during the call.
func dump(it **link.Iter, bufp *[]uint64, attach func() (*link.Iter, error), recSize int, fn func(rec []byte) bool) error {
	if *it == nil {
		var err error
		if *it, err = attach(); err != nil {
			return err
		}
	}
	rd, err := (*it).Open()
	if err != nil {
		return fmt.Errorf("open map iterator: %w", err)
	}
	defer rd.Close()
	// Records are multiples of 8 bytes; the buffer is 8-byte aligned, so
	// records can be viewed in place as their Go structs.
	if *bufp == nil {
		*bufp = make([]uint64, dumpBufSize/8)
	}
	b := unsafe.Slice((*byte)(unsafe.Pointer(&(*bufp)[0])), dumpBufSize)
	have := 0
	for {
		n, err := rd.Read(b[have:])
		have += n
		off := 0
		for ; have-off >= recSize; off += recSize {
			if !fn(b[off : off+recSize]) {
				return nil
			}
		}
		have = copy(b, b[off:have])
		if errors.Is(err, io.EOF) || (err == nil && n == 0) {
			if have != 0 {
				return fmt.Errorf("read map iterator: %d trailing bytes", have)
			}
			return nil
		}
		if err != nil {
			return fmt.Errorf("read map iterator: %w", err)
		}
	}
}

// dumpFlows dumps the IPv4 flow table, then the IPv6 one. Both iterator
// programs write the key in full form (struct hq_flow_key), so the records
// have one layout.
func (d *Datapath) dumpFlows(fn func(*hostqosHqFlowKey, *hostqosHqFlow) bool) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	more := true
	rec := func(rec []byte) bool {
		k := (*hostqosHqFlowKey)(unsafe.Pointer(&rec[0]))
		v := (*hostqosHqFlow)(unsafe.Pointer(&rec[unsafe.Sizeof(hostqosHqFlowKey{})]))
		more = fn(k, v)
		return more
	}
	tables := []struct {
		it   **link.Iter
		prog *ebpf.Program
		m    *ebpf.Map
		name string
	}{
		{&d.flowIter4, d.objs.HqIterFlows4, d.objs.HqFlows4, "IPv4"},
		{&d.flowIter6, d.objs.HqIterFlows6, d.objs.HqFlows6, "IPv6"},
	}
	// Attach both iterators before reading either, so that a failure
	// (and the caller's fallback to batch lookups) reports no flow twice.
	for _, t := range tables {
		if *t.it != nil {
			continue
		}
		it, err := link.AttachIter(link.IterOptions{Program: t.prog, Map: t.m})
		if err != nil {
			return fmt.Errorf("attach %s flow table iterator: %w", t.name, err)
		}
		*t.it = it
	}
	for _, t := range tables {
		err := dump(t.it, &d.dumpBuf, nil, flowRecSize, rec)
		if err != nil || !more {
			return err
		}
	}
	return nil
}

func (d *Datapath) dumpRuleCounters(out []Counters) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return dump(&d.ctrIter, &d.dumpBuf, func() (*link.Iter, error) {
		it, err := link.AttachIter(link.IterOptions{Program: d.objs.HqIterRuleCtr, Map: d.objs.HqRuleCtr})
		if err != nil {
			return nil, fmt.Errorf("attach rule counter iterator: %w", err)
		}
		return it, nil
	}, ctrRecSize, func(rec []byte) bool {
		r := (*hostqosHqCtrRec)(unsafe.Pointer(&rec[0]))
		if r.Slot < uint32(MaxRules) {
			out[r.Slot] = Counters{Packets: r.Packets, Bytes: r.Bytes, Drops: r.Drops}
		}
		return true
	})
}
