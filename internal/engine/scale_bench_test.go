package engine

import (
	"fmt"
	"strings"
	"testing"

	"github.com/hostqos/hostqos/internal/policy"
)

// scaleConfig is a config of links managed links (all shaped) and rules
// UDP port rules.
func scaleConfig(links, rules int) string {
	var b strings.Builder
	for i := 0; i < links; i++ {
		fmt.Fprintf(&b, "[[link]]\nname = \"link%d\"\negress_rate = \"100mbit\"\n\n", i)
	}
	for i := 0; i < rules; i++ {
		fmt.Fprintf(&b, "[[rule]]\nname = \"r%d\"\nproto = \"udp\"\nrport = %d\nclass = \"bulk\"\n\n", i, 1+i%60000)
	}
	return b.String()
}

func BenchmarkAddRule100x10k(b *testing.B) {
	env := newEnv(b, scaleConfig(100, 10000))
	for i := 0; i < 100; i++ {
		env.k.Ifindexes[fmt.Sprintf("link%d", i)] = 10 + i
	}
	e := env.start(b)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r := rule(fmt.Sprintf("add%d", i))
		r.RPort = policy.PortRange{From: 61000, To: 61000}
		if _, err := e.AddRule(ctx, root, r, false); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRescan100x10k is the idle cost of the rescan's sync (every
// second): 100 shaped links and 10,000 rules, nothing changed.
func BenchmarkRescan100x10k(b *testing.B) {
	env := newEnv(b, scaleConfig(100, 10000))
	for i := 0; i < 100; i++ {
		env.k.Ifindexes[fmt.Sprintf("link%d", i)] = 10 + i
	}
	e := env.start(b)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		e.Rescan()
	}
}

// BenchmarkTick100x10k is the idle daemon's work each second: 100 shaped
// links and 10,000 rules, nothing changed and nothing asking for a
// derive.
func BenchmarkTick100x10k(b *testing.B) {
	env := newEnv(b, scaleConfig(100, 10000))
	for i := 0; i < 100; i++ {
		env.k.Ifindexes[fmt.Sprintf("link%d", i)] = 10 + i
	}
	e := env.start(b)
	e.Tick() // the first audit
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		e.Tick()
	}
}
