package qsock

import (
	"os"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/hostqos/hostqos/internal/datapath"
)

// TestTxtimeConstantsAgree: the per-message flags are one set of values —
// the datapath's enum hq_txtime, package qsock's, the public C header's
// QSOCK_TXTIME_* and the Python module's TXTIME_* — and the scheduler numbers are the
// API's order.
func TestTxtimeConstantsAgree(t *testing.T) {
	want := map[string]uint64{
		"DEADLINE": datapath.TxtDeadline, "NON_DROPPABLE": datapath.TxtNoDrop,
		"FRAME_START": datapath.TxtFrameStart, "FRAME_END": datapath.TxtFrameEnd,
		"PRIO_SHIFT": datapath.TxtPrioShift, "PRIO_MASK": datapath.TxtPrioMask, "MARK": datapath.TxtMark,
	}
	goVals := map[string]uint64{"DEADLINE": txtDeadline, "NON_DROPPABLE": txtNoDrop, "FRAME_START": txtFrameStart,
		"FRAME_END": txtFrameEnd, "PRIO_SHIFT": txtPrioShift, "PRIO_MASK": txtPrioMask, "MARK": txtMark}
	for k, v := range want {
		if goVals[k] != v {
			t.Errorf("qsock's %s = %#x, the datapath's %#x", k, goVals[k], v)
		}
	}
	if ^txtTimeMask != datapath.TxtFlags {
		t.Errorf("time mask %#x, flags %#x", txtTimeMask, datapath.TxtFlags)
	}
	files := map[string]*regexp.Regexp{
		"../libhostqos/include/hostqos/qsock.h": regexp.MustCompile(`(?m)^#define QSOCK_TXTIME_([A-Z_]+)\s+\(?(0x[0-9a-fA-F]+|[0-9]+)u?`),
	}
	if py, _ := os.ReadDir("../python/hostqos"); py != nil {
		for _, e := range py {
			files["../python/hostqos/"+e.Name()] = regexp.MustCompile(`(?m)^TXTIME_([A-Z_]+)\s*=\s*(0x[0-9a-fA-F]+|[0-9]+)`)
		}
	}
	for path, re := range files {
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		for _, m := range re.FindAllStringSubmatch(string(b), -1) {
			w, ok := want[m[1]]
			if !ok {
				continue
			}
			v, err := strconv.ParseUint(m[2], 0, 64)
			if err != nil || v != w {
				t.Errorf("%s: %s = %s, the datapath's is %#x", path, m[1], m[2], w)
			}
		}
	}
	for i, n := range []Scheduler{FIFO, DWCS, EDFLossy, EDFLossless} {
		if got := []uint32{datapath.SchedFIFO, datapath.SchedDWCS, datapath.SchedEDFLossy, datapath.SchedEDFLossless}[i]; got != uint32(i+1) {
			t.Errorf("scheduler %s is %d in the datapath, %d in the API's order", n, got, i+1)
		}
	}
}

// TestTxtimeWord: a deadline rounds down to 256 ns with the flags beside
// it; without one, the send time.
func TestTxtimeWord(t *testing.T) {
	now := time.Now()
	mono := uint64(5_000_000_123)
	w := txtimeWord(now, mono, &Flags{Deadline: now.Add(time.Millisecond), NonDroppable: true, FrameStart: true, FrameEnd: true, DropPriority: 5})
	if w&txtTimeMask != (mono+1_000_000)&txtTimeMask || w&0xff != txtMark|txtDeadline|txtNoDrop|txtFrameStart|txtFrameEnd|5<<txtPrioShift {
		t.Errorf("word %#x", w)
	}
	w = txtimeWord(now, mono, &Flags{DropPriority: 9})
	if w&txtTimeMask != mono&txtTimeMask || w&0xff != txtMark|1<<txtPrioShift {
		t.Errorf("no deadline: word %#x", w)
	}
}
