package datapath

import (
	"math/rand/v2"
	"net/netip"
)

// randomRules makes n rules, of which apps have an exe selector, drawn from
// small pools of prefixes, ports, protocols and DSCPs so that rules of
// many shapes overlap, after rules per remote host and port (one shape,
// many keys). Each rule's classid names its index. The scale benchmark
// times a copy of it (dpbench.RandomPolicy, see
// TestRandomPolicyIsTheReferencePolicy).
func randomRules(rng *rand.Rand, n, apps int) []Rule {
	v4 := []string{"198.18.0.0/15", "198.18.0.0/16", "198.18.1.0/24", "198.18.1.128/25", "198.19.5.0/24", "198.18.1.7/32", "198.19.5.9/32", "0.0.0.0/0"}
	v6 := []string{"2001:db8::/32", "2001:db8:1::/48", "2001:db8:1::/64", "2001:db8:1::7/128", "2001:db8:2::/47", "::/0"}
	ports := [][2]uint16{{53, 0}, {80, 0}, {443, 0}, {5000, 0}, {5000, 5010}, {1024, 65535}, {80, 80}, {0, 1023}, {5005, 6000}}
	protos := []uint8{6, 17, 1, 58, 47}
	pick := func(p float64) bool { return rng.Float64() < p }
	rules := make([]Rule, 0, n)
	for i := 0; i < n; i++ {
		r := Rule{Slot: uint16(i), DSCPIn: -1, DSCP: -1, ClassID: 0x10000 + uint32(i) + 1}
		switch {
		case apps > 0 && i%(n/apps+1) == 0:
			r.Exes = []FileID{{Dev: 1, Ino: uint64(i + 1)}}
			apps--
		case i < n*2/5:
			// Per-host rules first: one shape, many keys.
			r.Proto = 6
			r.Remote = netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 18, byte(rng.IntN(4)), byte(rng.IntN(256))}), 32)
			r.RPortFrom = uint16(5000 + rng.IntN(20))
		default:
			fams := v4
			if pick(0.4) {
				fams = v6
			}
			if pick(0.8) {
				r.Local = netip.MustParsePrefix(fams[rng.IntN(len(fams))])
			}
			if pick(0.8) {
				r.Remote = netip.MustParsePrefix(fams[rng.IntN(len(fams))])
			}
			if pick(0.8) {
				r.Proto = protos[rng.IntN(len(protos))]
			}
			if pick(0.6) {
				p := ports[rng.IntN(len(ports))]
				r.LPortFrom, r.LPortTo = p[0], p[1]
			}
			if pick(0.7) {
				p := ports[rng.IntN(len(ports))]
				r.RPortFrom, r.RPortTo = p[0], p[1]
			}
			if pick(0.15) {
				r.DSCPIn = []int8{0, 10, 46}[rng.IntN(3)]
			}
		}
		rules = append(rules, r)
	}
	return rules
}

// RandomRules lets the external test TestRandomPolicyIsTheReferencePolicy
// compare randomRules with the lab's copy.
var RandomRules = randomRules
