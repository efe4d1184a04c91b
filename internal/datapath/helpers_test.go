package datapath

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"reflect"
	"sync"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/hostqos/hostqos/internal/shaper"
	"github.com/hostqos/hostqos/internal/testutil"
)

// openTest returns a datapath for a test. Loading one verifies every
// program (seconds of the verifier's time each), so a test that needs no
// pin directory of its own and no logger of its own gets one the package's
// tests share, one per flow table size and clock: before each test it is
// reset to what a fresh Open gives (every map emptied or zeroed, the
// policy state zeroed, what the datapath remembers of it forgotten).
// Anything else gets its own, closed at cleanup.
func openTest(t testing.TB, opts Options) *Datapath {
	t.Helper()
	testutil.NeedRoot(t)
	if opts.BPFFSDir == "" && opts.Logger == nil {
		return sharedDatapath(t, opts)
	}
	if opts.BPFFSDir == "" {
		opts.BPFFSDir = testutil.TempPinDir(t)
	}
	d, err := Open(opts)
	if err != nil {
		t.Fatalf("open datapath: %v", err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// shared holds the datapaths openTest shares; TestMain closes them.
var shared struct {
	sync.Mutex
	dps map[Options]*sharedDP
}

type sharedDP struct {
	d      *Datapath
	remove func() error // the pin directory
}

func TestMain(m *testing.M) {
	code := m.Run()
	shared.Lock()
	for _, s := range shared.dps {
		s.d.Close()
		if err := s.remove(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	shared.Unlock()
	os.Exit(code)
}

func sharedDatapath(t testing.TB, opts Options) *Datapath {
	t.Helper()
	if opts.FlowTableSize == DefaultFlowTable {
		opts.FlowTableSize = 0
	}
	shared.Lock()
	defer shared.Unlock()
	if s := shared.dps[opts]; s != nil {
		if s.d.mem != nil { // not closed by a test
			if err := s.d.resetForTest(); err != nil {
				t.Fatalf("reset the shared datapath: %v", err)
			}
			return s.d
		}
		delete(shared.dps, opts)
		if err := s.remove(); err != nil {
			t.Fatal(err)
		}
	}
	dir, remove := testutil.PinDir(t)
	o := opts
	o.BPFFSDir = dir
	d, err := Open(o)
	if err != nil {
		_ = remove()
		t.Fatalf("open datapath: %v", err)
	}
	if shared.dps == nil {
		shared.dps = map[Options]*sharedDP{}
	}
	shared.dps[opts] = &sharedDP{d: d, remove: remove}
	return d
}

// resetForTest brings an open datapath back to the state Open leaves: every
// hash map emptied, every array zeroed (socket storage belongs to the
// sockets, which tests close), the policy state zeroed, and what Apply,
// the download limits, the flow reader and the rule-counter span remember
// forgotten. Links a test attached are detached.
func (d *Datapath) resetForTest() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	for i, l := range d.tcx {
		l.Close()
		delete(d.tcx, i)
	}
	for i, l := range d.tcxIn {
		l.Close()
		delete(d.tcxIn, i)
	}
	maps := reflect.ValueOf(&d.objs.hostqosMaps).Elem()
	for i := 0; i < maps.NumField(); i++ {
		m, ok := maps.Field(i).Interface().(*ebpf.Map)
		if !ok || m == nil {
			continue
		}
		if err := clearMap(m); err != nil {
			return fmt.Errorf("clear map %s: %w", maps.Type().Field(i).Name, err)
		}
	}
	clear(d.mem)
	// What the Datapath remembers of the kernel's state (a field added to
	// it that caches such state must be forgotten here too).
	d.bufs = [2]*bufState{}
	d.placed = nil
	d.inLast = nil
	d.readerMu.Lock()
	d.reader = nil
	d.readerMu.Unlock()
	d.span.mu.Lock()
	d.span.applied, d.span.counted, d.span.known = 0, 0, false
	d.span.mu.Unlock()
	return nil
}

// clearMap deletes every entry of a hash map and zeroes every element of
// an array.
func clearMap(m *ebpf.Map) error {
	bytesOf := func(n int) reflect.Type { return reflect.ArrayOf(n, reflect.TypeOf(byte(0))) }
	switch m.Type() {
	case ebpf.Hash, ebpf.LRUHash, ebpf.LRUCPUHash, ebpf.PerCPUHash:
		kt := bytesOf(int(m.KeySize()))
		var keys []any
		var prev any // nil: the first key
		for {
			next := reflect.New(kt).Interface()
			if err := m.NextKey(prev, next); err != nil {
				if errors.Is(err, ebpf.ErrKeyNotExist) {
					break
				}
				return err
			}
			keys = append(keys, next)
			prev = next
		}
		for _, k := range keys {
			if err := m.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
				return err
			}
		}
	case ebpf.Array, ebpf.PerCPUArray:
		n := int(m.MaxEntries())
		keys := make([]uint32, n)
		for i := range keys {
			keys[i] = uint32(i)
		}
		vals := n
		if m.Type() == ebpf.PerCPUArray {
			ncpu, err := ebpf.PossibleCPU()
			if err != nil {
				return err
			}
			vals *= ncpu
		}
		zero := reflect.MakeSlice(reflect.SliceOf(bytesOf(int(m.ValueSize()))), vals, vals).Interface()
		if _, err := m.BatchUpdate(keys, zero, nil); err != nil {
			return err
		}
	}
	return nil
}

func pfx(s string) netip.Prefix { return netip.MustParsePrefix(s) }
func addr(s string) netip.Addr  { return netip.MustParseAddr(s) }

// tosOf returns the IPv4 TOS / IPv6 traffic class of an Ethernet frame.
func tosOf(frame []byte) uint8 {
	ip := frame[14:]
	if binary.BigEndian.Uint16(frame[12:]) == 0x0800 {
		return ip[1]
	}
	return ip[0]<<4 | ip[1]>>4
}

func netipAP(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }

// attachAsDaemon attaches d's classifiers (egress and ingress) to ifindex
// (in the caller's network namespace) by the path the daemon's auto mode
// takes on this kernel: TCX where the kernel has it (6.6), else cls_bpf
// filters on a clsact qdisc (scripts/kernel-vm.sh runs such tests on 6.1
// and 5.15).
func attachAsDaemon(d *Datapath, ifindex int) error {
	if HaveTCX() {
		return d.AttachLink(ifindex)
	}
	fd, _, err := d.EgressProgramFD(ifindex)
	if err != nil {
		return err
	}
	if _, err = shaper.AttachBPF(ifindex, shaper.Egress, fd); err != nil {
		return err
	}
	if fd, _, err = d.IngressProgramFD(ifindex); err != nil {
		return err
	}
	_, err = shaper.AttachBPF(ifindex, shaper.Ingress, fd)
	return err
}
