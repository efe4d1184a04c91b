package datapath

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// The per-message attributes of a qsocket reach the classifier as the
// SCM_TXTIME value the libraries pass (docs/qsockets.md, "Per-message
// attributes"). Its flags are defined once for the BPF side; the public C
// header and the Python module spell them again for applications.
// TestTxtimeWireAgrees checks that all of them agree, and that the C
// library's and the Python module's encoders give the same value as the
// encoding says for a table of messages (with and without deadlines,
// frames, non-droppable, every drop priority).
func TestTxtimeWireAgrees(t *testing.T) {
	want := map[string]uint64{ // the BPF side's (enum hq_txtime)
		"HAS_DEADLINE":  TxtDeadline,
		"NON_DROPPABLE": TxtNoDrop,
		"FRAME_START":   TxtFrameStart,
		"FRAME_END":     TxtFrameEnd,
		"PRIO_SHIFT":    TxtPrioShift,
		"PRIO_MASK":     TxtPrioMask,
		"MARKER":        TxtMark,
		"FLAGS_MASK":    TxtFlags,
	}
	spec := map[string]uint64{ // the encoding, bit by bit
		"HAS_DEADLINE": 0x01, "NON_DROPPABLE": 0x02, "FRAME_START": 0x04, "FRAME_END": 0x08,
		"PRIO_SHIFT": 4, "PRIO_MASK": 0x70, "MARKER": 0x80, "FLAGS_MASK": 0xff,
	}
	for name, v := range spec {
		if want[name] != v {
			t.Errorf("enum hq_txtime: %s = %#x, the encoding says %#x", name, want[name], v)
		}
	}
	root := filepath.Join("..", "..")
	hdr := filepath.Join(root, "libhostqos", "include", "hostqos", "qsock.h")
	py := filepath.Join(root, "python", "hostqos", "__init__.py")
	c := constants(t, hdr, `(?m)^#define QSOCK_TXTIME_(\w+)\s+(0x[0-9a-fA-F]+|\d+)u?\b`)
	p := constants(t, py, `(?m)^TXTIME_(\w+) = (0x[0-9a-fA-F]+|\d+)$`)
	for name, v := range want {
		if c[name] != v {
			t.Errorf("%s: QSOCK_TXTIME_%s = %#x, want %#x", hdr, name, c[name], v)
		}
		if p[name] != v {
			t.Errorf("%s: TXTIME_%s = %#x, want %#x", py, name, p[name], v)
		}
	}
	if len(c) != len(want) || len(p) != len(want) {
		t.Errorf("the header has %d QSOCK_TXTIME_* constants, the Python module %d TXTIME_*; want %d each", len(c), len(p), len(want))
	}

	type msg struct {
		dlSec, dlNsec int64 // deadline; 0, 0: none
		flags         uint32
		prio          uint8
		now           int64
	}
	msgs := []msg{
		{0, 0, 0, 0, 1_000_000_123},
		{12, 500_000_000, 0x1, 0, 5},
		{3600, 125_000_000, 0x2 | 0x4, 3, 7},
		{86400, 999_999_999, 0x4, 7, 9},
		{0, 0, 0x1 | 0x2 | 0x4, 5, 123_456_789_012},
	}
	for pr := uint8(0); pr <= 7; pr++ {
		msgs = append(msgs, msg{7, 256 * int64(pr), 0, pr, 0})
	}
	encode := func(m msg) uint64 {
		dl := m.dlSec*1e9 + m.dlNsec
		w := uint64(m.now)
		if dl > 0 {
			w = uint64(dl)
		}
		w = w&^want["FLAGS_MASK"] | want["MARKER"]
		if dl > 0 {
			w |= want["HAS_DEADLINE"]
		}
		for qpf, bit := range map[uint32]uint64{0x1: want["NON_DROPPABLE"], 0x2: want["FRAME_START"], 0x4: want["FRAME_END"]} {
			if m.flags&qpf != 0 {
				w |= bit
			}
		}
		return w | uint64(m.prio)<<want["PRIO_SHIFT"]&want["PRIO_MASK"]
	}

	// The C library's encoder, compiled with the system C compiler.
	if cc, err := exec.LookPath("cc"); err != nil {
		t.Logf("no C compiler: the C library's encoder is not checked")
	} else {
		src, err := filepath.Abs(filepath.Join(root, "libhostqos", "src", "qsock.c"))
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		fmt.Fprintf(&b, "#include %q\nint main(void)\n{\n\tstruct packet_flags pf;\n", src)
		for _, m := range msgs {
			fmt.Fprintf(&b, "\tmemset(&pf, 0, sizeof(pf));\n\tpf.deadline.tv_sec = %d;\n\tpf.deadline.tv_nsec = %d;\n", m.dlSec, m.dlNsec)
			fmt.Fprintf(&b, "\tpf.flags = %d;\n\tpf.drop_priority = %d;\n", m.flags, m.prio)
			fmt.Fprintf(&b, "\tprintf(\"%%llu\\n\", (unsigned long long)txtime_word(&pf, %dLL));\n", m.now)
		}
		b.WriteString("\treturn 0;\n}\n")
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "wire.c"), []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		inc, _ := filepath.Abs(filepath.Join(root, "libhostqos", "include"))
		bin := filepath.Join(dir, "wire")
		if out, err := exec.Command(cc, "-std=gnu11", "-I", inc, "-o", bin, filepath.Join(dir, "wire.c"), "-lpthread").CombinedOutput(); err != nil {
			t.Fatalf("compile the C encoder: %v\n%s", err, out)
		}
		compare(t, "C library", run(t, exec.Command(bin)), msgs, func(i int) uint64 { return encode(msgs[i]) })
	}

	// The Python module's encoder.
	if _, err := exec.LookPath("python3"); err != nil {
		t.Logf("no python3: the Python module's encoder is not checked")
		return
	}
	var b strings.Builder
	b.WriteString("import hostqos\n")
	for _, m := range msgs {
		dl := "None"
		if m.dlSec != 0 || m.dlNsec != 0 {
			dl = fmt.Sprintf("%d.%09d", m.dlSec, m.dlNsec)
		}
		fmt.Fprintf(&b, "print(hostqos.txtime_word(hostqos.PacketFlags(deadline=%s, flags=%d, drop_priority=%d), %d))\n", dl, m.flags, m.prio, m.now)
	}
	pyc := exec.Command("python3", "-c", b.String())
	pyc.Env = append(os.Environ(), "PYTHONPATH="+filepath.Join(root, "python"))
	compare(t, "Python module", run(t, pyc), msgs, func(i int) uint64 { return encode(msgs[i]) })
}

func constants(t *testing.T, file, re string) map[string]uint64 {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]uint64{}
	for _, m := range regexp.MustCompile(re).FindAllStringSubmatch(string(b), -1) {
		v, err := strconv.ParseUint(m[2], 0, 64)
		if err != nil {
			t.Fatalf("%s: %s = %s: %v", file, m[1], m[2], err)
		}
		out[m[1]] = v
	}
	return out
}

func run(t *testing.T, cmd *exec.Cmd) []string {
	t.Helper()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", cmd.Path, err, out)
	}
	return strings.Fields(string(out))
}

func compare[M any](t *testing.T, who string, got []string, msgs []M, want func(int) uint64) {
	t.Helper()
	if len(got) != len(msgs) {
		t.Fatalf("%s: %d values for %d messages: %q", who, len(got), len(msgs), got)
	}
	for i := range msgs {
		v, err := strconv.ParseUint(got[i], 10, 64)
		if err != nil || v != want(i) {
			t.Errorf("%s: message %d %+v: SCM_TXTIME %s, want %d (%#x)", who, i, msgs[i], got[i], want(i), want(i))
		}
	}
}
