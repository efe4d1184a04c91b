package datapath

import (
	"testing"

	"github.com/cilium/ebpf"
)

// The classifier variants for links without an Ethernet header are not
// loaded by Open but on first use; they must load and classify as the
// Ethernet variants do. BPF_PROG_TEST_RUN always takes a frame with an
// Ethernet header and sets the packet's protocol from bytes 12–13, so an
// IPv4 packet whose source address starts 8.0 (0x0800) passes for a bare
// IPv4 packet (test-run only; no such packet is sent anywhere). The kernel
// also wants an IPv4 header's worth of bytes after those 14.
func TestL3ClassifiersLoadOnDemand(t *testing.T) {
	d := openTest(t, Options{})
	if err := d.Apply(testPolicy()); err != nil {
		t.Fatalf("apply: %v", err)
	}
	egress, ingress, err := d.loadL3()
	if err != nil {
		t.Fatalf("load the L3 classifiers: %v", err)
	}
	if again, _, err := d.loadL3(); err != nil || again != egress {
		t.Fatalf("second loadL3: %v, %v (want the same program, loaded once)", again, err)
	}
	// Rule 0 of testPolicy: UDP to 198.18.1.0/24 ports 5000-5010 → EF.
	pkt := BuildFrame(FrameSpec{Src: addr("8.0.0.1"), Dst: addr("198.18.1.9"), Proto: 17, SPort: 1234, DPort: 5003, TOS: 0x01, Payload: 64})[14:]
	var out skBuff
	data := make([]byte, len(pkt)+256)
	ret, err := egress.Run(&ebpf.RunOptions{Data: pkt, DataOut: data, Context: skBuff{}, ContextOut: &out, Repeat: 1})
	if err != nil {
		t.Fatalf("test-run L3 egress: %v", err)
	}
	if int32(ret) != verdictNext || data[1] != 46<<2|1 || out.Priority != 0x10010 {
		t.Errorf("L3 egress: verdict %d, tos %#x, priority %#x; want %d, %#x, %#x", int32(ret), data[1], out.Priority, verdictNext, 46<<2|1, 0x10010)
	}
	if _, err := ingress.Run(&ebpf.RunOptions{Data: pkt, Context: skBuff{}, Repeat: 1}); err != nil {
		t.Fatalf("test-run L3 ingress: %v", err)
	}
	if st, err := d.Stats(); err != nil || st.ParseErrors != 0 {
		t.Errorf("stats %+v, %v: want no parse errors", st, err)
	}
}
