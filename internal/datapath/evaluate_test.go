package datapath

import (
	"net/netip"
	"testing"
)

// TestCheckRuleSaysWhichSelector: the reference evaluation names each
// selector of a rule that fails, leaves undecided those on what the
// subject does not know, and matches app selectors as sock_create's
// identity would (cgroups by ancestor, up to the recorded levels and the
// socket's own).
func TestCheckRuleSaysWhichSelector(t *testing.T) {
	uid := uint32(1000)
	key := FlowKey{Proto: 6, Local: netip.MustParseAddrPort("198.18.0.1:40000"), Remote: netip.MustParseAddrPort("198.18.0.2:443")}
	id := &Identity{PID: 7, UID: 1000, Comm: "curl", Exe: FileID{Dev: 8, Ino: 9}, Cgroups: []uint64{1, 20, 300}}
	deep := &Identity{Comm: "x", Cgroups: []uint64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}}
	full := Subject{Key: &key, DSCP: 0, Ident: id}
	cases := []struct {
		name              string
		r                 Rule
		s                 Subject
		failed, undecided Selectors
	}{
		{"all match", Rule{Exes: []FileID{{8, 9}}, Comm: "curl", UID: &uid, Cgroups: []CgroupRef{{ID: 20}}, Proto: 6,
			Remote: netip.MustParsePrefix("198.18.0.0/24"), RPortFrom: 443, DSCPIn: -1}, full, 0, 0},
		{"comm and rport fail", Rule{Comm: "wget", Proto: 6, RPortFrom: 80, DSCPIn: -1}, full, SelComm | SelRPort, 0},
		{"port range holds 443", Rule{RPortFrom: 400, RPortTo: 500, DSCPIn: -1}, full, 0, 0},
		{"IPv6 prefix never holds IPv4", Rule{Local: netip.MustParsePrefix("::/0"), DSCPIn: -1}, full, SelLocal, 0},
		{"IPv4-mapped prefix is IPv4's", Rule{Remote: netip.MustParsePrefix("::ffff:198.18.0.0/112"), DSCPIn: -1}, full, 0, 0},
		{"ICMP rule holds ICMPv6", Rule{Proto: 1, DSCPIn: -1}, Subject{Key: &FlowKey{Proto: 58}, DSCP: 0, NoIdent: true}, 0, 0},
		{"no identity: app selectors fail", Rule{Comm: "curl", DSCPIn: -1}, Subject{Key: &key, NoIdent: true}, SelComm, 0},
		{"unknown identity: undecided", Rule{Comm: "curl", UID: &uid, DSCPIn: -1}, Subject{Key: &key}, 0, SelComm | SelUID},
		{"exe known, comm not", Rule{Exes: []FileID{{8, 9}}, Comm: "curl", DSCPIn: -1},
			Subject{Key: &key, Ident: &Identity{Exe: FileID{8, 9}}, Unknown: SelComm}, 0, SelComm},
		{"no flow: flow selectors undecided", Rule{Comm: "curl", Proto: 17, DSCPIn: 46}, Subject{DSCP: -1, Ident: id}, 0, SelProto | SelDSCPIn},
		{"partial flow: the parts not known are undecided", Rule{Proto: 17, Remote: netip.MustParsePrefix("198.18.0.0/24"), RPortFrom: 53, LPortFrom: 5, DSCPIn: -1},
			Subject{Key: &FlowKey{Proto: 6, Remote: netip.MustParseAddrPort("0.0.0.0:53")}, NoIdent: true, Unknown: SelRemote | SelLPort}, SelProto, SelRemote | SelLPort},
		{"known portless protocol: ports are 0", Rule{LPortFrom: 5, DSCPIn: -1}, Subject{Key: &FlowKey{Proto: 1}, Unknown: SelLPort | SelRPort}, SelLPort, 0},
		{"DSCP known", Rule{DSCPIn: 46}, Subject{Key: &key, DSCP: 10}, SelDSCPIn, 0},
		{"cgroup at level 8 is not recorded", Rule{Cgroups: []CgroupRef{{ID: 9}}, DSCPIn: -1}, Subject{Key: &key, Ident: deep}, SelCgroup, 0},
		{"own cgroup always is", Rule{Cgroups: []CgroupRef{{ID: 10}}, DSCPIn: -1}, Subject{Key: &key, Ident: deep}, 0, 0},
		{"ports of ICMP are 0", Rule{LPortFrom: 5, DSCPIn: -1}, Subject{Key: &FlowKey{Proto: 1, Local: netip.MustParseAddrPort("198.18.0.1:5")}}, SelLPort, 0},
	}
	for _, c := range cases {
		got := CheckRule(&c.r, &c.s)
		if got.Failed != c.failed || got.Undecided != c.undecided {
			t.Errorf("%s: failed %q undecided %q, want %q and %q", c.name, got.Failed, got.Undecided, c.failed, c.undecided)
		}
	}
	rules := []Rule{{Comm: "wget", DSCPIn: -1}, {Proto: 6, DSCPIn: -1}, {DSCPIn: -1}}
	if i := Evaluate(rules, &full); i != 1 {
		t.Errorf("Evaluate = %d, want the first that matches (1)", i)
	}
}
