package integration

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestStatHundredThousandFlows: without any flag the daemon's flow table
// holds 100,000 IPv4 flows, and `hostqos stat flows` answers with all of
// them (the table shows the first 50 and counts the others).
func TestStatHundredThousandFlows(t *testing.T) {
	parallel(t)
	e := newEnv(t)
	e.startDaemon()
	e.hostqos("link", "set", e.iface())
	// One datagram from each of two ports to each of 50,000 ports.
	const perSocket, flows = 50000, 100000
	err := e.client.Do(func() error {
		for range 2 {
			c, err := net.ListenPacket("udp4", clientV4.Addr().String()+":0")
			if err != nil {
				return err
			}
			for p := 1; p <= perSocket; p++ {
				to := &net.UDPAddr{IP: serverV4.Addr().AsSlice(), Port: p}
				if _, err := c.WriteTo([]byte("x"), to); err != nil {
					time.Sleep(time.Millisecond) // a full send buffer: retry once
					_, _ = c.WriteTo([]byte("x"), to)
				}
			}
			c.Close()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := e.status().Counts.Flows; n < flows*99/100 {
		t.Fatalf("the flow table holds %d flows after %d were made", n, flows)
	}
	t0 := time.Now()
	out := e.hostqos("stat", "flows")
	took := time.Since(t0)
	// The table shows the first 50 and says how many more there are.
	var more int
	if i := strings.LastIndex(out, "\n("); i < 0 {
		t.Fatalf("stat flows names no further flows:\n%s", out)
	} else if _, err := fmt.Sscanf(out[i+2:], "%d more", &more); err != nil {
		t.Fatalf("stat flows: %v in %q", err, out[i+1:])
	}
	if more+50 < flows*99/100 {
		t.Errorf("stat flows answered %d flows, want about %d", more+50, flows)
	}
	t.Logf("stat flows of %d flows: %v (the CLI, with the table printed); BPF maps of the daemon: %d MiB (memlock)",
		flows, took.Round(time.Millisecond), mapMemlock(e.d.PID())>>20)
}

// mapMemlock is the kernel memory of the BPF maps process pid holds.
func mapMemlock(pid int) uint64 {
	dir := fmt.Sprintf("/proc/%d/fdinfo", pid)
	ents, _ := os.ReadDir(dir)
	seen := map[string]bool{}
	var sum uint64
	for _, ent := range ents {
		data, err := os.ReadFile(filepath.Join(dir, ent.Name()))
		if err != nil || !strings.Contains(string(data), "map_type:") {
			continue
		}
		var id string
		var mem uint64
		for _, l := range strings.Split(string(data), "\n") {
			k, v, _ := strings.Cut(l, ":")
			switch k {
			case "map_id":
				id = strings.TrimSpace(v)
			case "memlock":
				mem, _ = strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			}
		}
		if id != "" && !seen[id] {
			seen[id] = true
			sum += mem
		}
	}
	return sum
}
