package policy

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
)

// wireRank is what a DiffServ network following RFC 4594 (as updated by
// RFC 8622) does with a mark, relative to best effort: -1 below it, 0 best
// effort, +1 above it. LE and CS1 are low-priority data; every AF class
// (AF1x is High-Throughput Data), EF, VOICE-ADMIT and CS2..CS7 get more
// than best effort; an unknown code point is forwarded as best effort
// (RFC 2474).
func wireRank(d DSCP) int {
	switch {
	case d == 1 || d == 8: // LE, CS1
		return -1
	case d == 0:
		return 0
	case d == 46 || d == 44: // EF, VOICE-ADMIT
		return 1
	case d%8 == 0: // CS2..CS7
		return 1
	case d>>3 >= 1 && d>>3 <= 4 && d&1 == 0 && d&6 != 0: // AFxy
		return 1
	}
	return 0
}

func sign(x int) int {
	switch {
	case x < 0:
		return -1
	case x > 0:
		return 1
	}
	return 0
}

// TestDefaultClassesMeanTheSameOnTheWire: a built-in class below default
// on the host is marked for less than best effort in the network, one
// above default for more, so a router does not promote what the host
// holds back (the demo's neighbour lost three quarters of its traffic to
// the client's bulk when bulk was AF11).
func TestDefaultClassesMeanTheSameOnTheWire(t *testing.T) {
	p := DefaultPolicy()
	def, ok := p.Class(DefaultClassName)
	if !ok || def.DSCP != 0 {
		t.Fatalf("class default: %+v, want CS0", def)
	}
	for _, c := range p.Classes {
		// A lower priority number is served first: host rank is the
		// opposite sign of the difference.
		host := sign(def.Priority - c.Priority)
		if wire := wireRank(c.DSCP); wire != host {
			t.Errorf("class %s: priority %d (default %d) but DSCP %s is treated %+d against best effort by DiffServ networks",
				c.Name, c.Priority, def.Priority, c.DSCP, wire)
		}
	}
	// Low-priority data is marked LE (RFC 8622), not the deprecated CS1.
	for _, name := range []string{"bulk", "scavenger"} {
		if c, _ := p.Class(name); c.DSCP != 1 || c.DSCP.String() != "LE" {
			t.Errorf("class %s: DSCP %s, want LE (1)", name, c.DSCP)
		}
	}
	// A class set by name only takes the built-in's mark.
	c := NewClass("bulk")
	c.FillDefaults()
	if c.DSCP != 1 || c.Priority != 4 {
		t.Errorf("bulk filled from defaults: %+v, want LE, priority 4", c)
	}
}

func TestWireRank(t *testing.T) {
	for _, c := range []struct {
		name string
		want int
	}{
		{"LE", -1}, {"CS1", -1}, {"CS0", 0}, {"AF11", 1}, {"AF13", 1}, {"AF41", 1}, {"CS2", 1}, {"CS7", 1}, {"EF", 1}, {"VA", 1}, {"3", 0}, {"63", 0},
	} {
		d, err := ParseDSCP(c.name)
		if err != nil {
			t.Fatal(err)
		}
		if got := wireRank(d); got != c.want {
			t.Errorf("wireRank(%s = %d) = %d, want %d", c.name, d, got, c.want)
		}
	}
}

// TestDocsDefaultClasses keeps the built-in class tables of docs/config.md
// and docs/concepts.md true, and checks that the classes concepts.md
// suggests load and mean the same on the host and the wire.
func TestDocsDefaultClasses(t *testing.T) {
	for _, doc := range []string{"config.md", "concepts.md"} {
		data, err := os.ReadFile("../../docs/" + doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range DefaultClasses() {
			mark := fmt.Sprintf("%s (%d)", c.DSCP, int(c.DSCP))
			found := false
			for _, line := range strings.Split(string(data), "\n") {
				cells := strings.Split(line, "|")
				if len(cells) < 4 || strings.Trim(strings.TrimSpace(cells[1]), "`") != c.Name {
					continue
				}
				var hasMark, hasPrio bool
				for _, cell := range cells[2:] {
					cell = strings.TrimSpace(cell)
					hasMark = hasMark || cell == mark
					first, _, _ := strings.Cut(cell, ",")
					hasPrio = hasPrio || first == strconv.Itoa(c.Priority)
				}
				found = found || (hasMark && hasPrio)
			}
			if !found {
				t.Errorf("docs/%s: no table row for class %s with DSCP %s and priority %d", doc, c.Name, mark, c.Priority)
			}
		}
	}
	data, err := os.ReadFile("../../docs/concepts.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := tomlBlocks(string(data))
	if len(blocks) == 0 {
		t.Fatal("docs/concepts.md: no TOML example")
	}
	for _, b := range blocks {
		p, err := Load([]byte(b), "docs/concepts.md")
		if err != nil {
			t.Fatalf("docs/concepts.md example: %v\n%s", err, b)
		}
		def, _ := p.Class(DefaultClassName)
		for _, c := range p.Classes {
			if wire, host := wireRank(c.DSCP), sign(def.Priority-c.Priority); wire != host {
				t.Errorf("docs/concepts.md example: class %s, priority %d, DSCP %s does not mean the same on the wire", c.Name, c.Priority, c.DSCP)
			}
		}
	}
}
