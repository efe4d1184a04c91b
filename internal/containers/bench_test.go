package containers

import (
	"fmt"
	"log/slog"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/hostqos/hostqos/internal/testutil"
)

// benchNetns makes n named namespaces, each with a veth into ns, removed
// at cleanup, and returns the glob matching them.
func benchNetns(b *testing.B, ns *testutil.NetNS, n int) string {
	b.Helper()
	prefix := "hqct-" + testutil.RandHex(4) + "-"
	var add, veth, del strings.Builder
	for i := range n {
		name := fmt.Sprintf("%s%03d", prefix, i)
		fmt.Fprintf(&add, "netns add %s\n", name)
		fmt.Fprintf(&veth, "link add hqb%03d type veth peer name eth0 netns %s\n", i, name)
		fmt.Fprintf(&del, "netns del %s\n", name)
	}
	b.Cleanup(func() {
		cmd := exec.Command("ip", "-force", "-batch", "-")
		cmd.Stdin = strings.NewReader(del.String())
		_ = cmd.Run()
	})
	for _, c := range []*exec.Cmd{exec.Command("ip", "-batch", "-"), ns.Command("ip", "-batch", "-")} {
		if c.Args[0] == "ip" {
			c.Stdin = strings.NewReader(add.String())
		} else {
			c.Stdin = strings.NewReader(veth.String())
		}
		if out, err := c.CombinedOutput(); err != nil {
			b.Fatalf("%v: %v\n%s", c.Args, err, out)
		}
	}
	return prefix + "*"
}

// BenchmarkScan200 is the cost of the watcher's scans with 200 containers
// (bare namespaces with a veth each, and this machine's cgroup tree): an
// event's scan (cgroups walked, namespaces cached) and the backstop's
// (every namespace read again, runtimes asked again). Idle CPU is the
// backstop's cost per Interval.
func BenchmarkScan200(b *testing.B) {
	ns := testutil.NewNetNS(b)
	glob := benchNetns(b, ns, 200)
	for _, refresh := range []bool{false, true} {
		b.Run(fmt.Sprintf("refresh=%v", refresh), func(b *testing.B) {
			ns.MustDo(b, func() error {
				s, err := newScanner(Config{NetnsNames: []string{glob}}.withDefaults(), slog.New(slog.DiscardHandler))
				if err != nil {
					return err
				}
				defer s.close()
				s.scan(true)
				if len(s.cur) < 200 {
					return fmt.Errorf("found %d containers, want 200", len(s.cur))
				}
				b.ResetTimer()
				start := time.Now()
				for range b.N {
					if refresh {
						for _, info := range s.ns {
							info.dirty = true
						}
					}
					s.scan(refresh)
				}
				per := time.Since(start) / time.Duration(b.N)
				b.ReportMetric(float64(per.Microseconds())/1000, "ms/scan")
				if refresh {
					b.ReportMetric(100*per.Seconds()/(10*time.Second).Seconds(), "%cpu@10s")
				}
				return nil
			})
		})
	}
}
