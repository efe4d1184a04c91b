package datapath

import "testing"

func TestAutoFlowTable(t *testing.T) {
	const gib = 1 << 30
	for _, c := range []struct {
		mem  uint64
		want int
	}{
		{24 * gib, MaxAutoFlowTable},
		{4 * gib, 131072},
		{2 * gib, 65536},
		{1 * gib, 32768},
		{512 << 20, 16384},
		{64 << 20, MinAutoFlowTable},
	} {
		if got := AutoFlowTable(c.mem); got != c.want {
			t.Errorf("AutoFlowTable(%d MiB) = %d, want %d", c.mem>>20, got, c.want)
		}
	}
	if m, err := MemTotal(); err != nil || m == 0 {
		t.Fatalf("MemTotal = %d, %v", m, err)
	}
}
