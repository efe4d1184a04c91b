package lab

import (
	"fmt"
	"os"
	"runtime"
	"strings"
)

// Host describes the machine a measurement was made on; the demo and the
// benchmarks print it with every result.
type Host struct {
	Kernel string `json:"kernel"`
	CPU    string `json:"cpu"`
	Cores  int    `json:"cores"`
}

func (h Host) String() string {
	return fmt.Sprintf("Linux %s, %s, %d cores", h.Kernel, h.CPU, h.Cores)
}

// HostInfo reads the kernel release, the CPU model (/proc/cpuinfo) and the
// number of online cores; what cannot be read is "unknown".
func HostInfo() Host {
	h := Host{Kernel: "unknown", CPU: "unknown", Cores: runtime.NumCPU()}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		h.Kernel = strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				h.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	return h
}

// LoadAverage is the 1, 5 and 15 minute load averages as /proc/loadavg
// prints them, or nil when it cannot be read: other load skews every
// measurement on a shared machine.
func LoadAverage() []string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return nil
	}
	if f := strings.Fields(string(b)); len(f) >= 3 {
		return f[:3]
	}
	return nil
}
