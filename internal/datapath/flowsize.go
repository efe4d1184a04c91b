package datapath

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Flow table sizing when the daemon is not told a size: large enough for
// a busy server by default, but a share of a small host's memory only,
// since the tables' kernel memory is allocated up front.
const (
	// MaxAutoFlowTable is the entries of each flow table on a host with
	// memory to spare: over 100,000 flows of each family.
	MaxAutoFlowTable = 131072
	// MinAutoFlowTable is the least a small host gets.
	MinAutoFlowTable = 16384
	// FlowEntryBytes is the kernel memory one entry of the flow tables
	// costs: an entry in each family's LRU table and two counter slots,
	// measured (memlock) between 65,536 and 131,072 entries.
	FlowEntryBytes = 1300
	// autoFlowShare is the share of the host's memory the tables may
	// take when sized automatically (1/16).
	autoFlowShare = 16
)

// AutoFlowTable is the flow table size for a host with memTotal bytes of
// memory: the largest power of two whose entries take at most a
// sixteenth of it, between MinAutoFlowTable and MaxAutoFlowTable
// (131,072 from about 2.6 GiB up; 65,536 on 2 GiB; 32,768 on 1 GiB).
func AutoFlowTable(memTotal uint64) int {
	n := MaxAutoFlowTable
	for n > MinAutoFlowTable && uint64(n)*FlowEntryBytes > memTotal/autoFlowShare {
		n /= 2
	}
	return n
}

// MemTotal is the host's memory in bytes (/proc/meminfo MemTotal).
func MemTotal() (uint64, error) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, fmt.Errorf("read the host's memory: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		v, ok := strings.CutPrefix(sc.Text(), "MemTotal:")
		if !ok {
			continue
		}
		kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("read the host's memory: MemTotal %q: %w", strings.TrimSpace(v), err)
		}
		return kb * 1024, nil
	}
	return 0, fmt.Errorf("read the host's memory: no MemTotal in /proc/meminfo")
}
