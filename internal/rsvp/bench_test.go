package rsvp

import (
	"net/netip"
	"runtime"
	"syscall"
	"testing"
	"time"
)

type nopInstall struct{}

func (nopInstall) Install(FlowKey, Flowspec) error { return nil }
func (nopInstall) Remove(FlowKey)                  {}

// BenchmarkRouterRefresh10k: one router holding 10,000 sessions (a path
// and a reservation each); one op is one refresh period's work for all of
// them: decode, handle and re-encode each session's Path and Resv refresh,
// and the timer scan. Reports the CPU per refresh period and the memory
// per session. (Sockets are not included: see BenchmarkReserveAcrossRouter.)
func BenchmarkRouterRefresh10k(b *testing.B) {
	const sessions = 10000
	local := func(dst netip.Addr) (netip.Addr, bool, error) {
		if dst.As4()[2] == 1 {
			return addrR1, false, nil
		}
		return addrR2, false, nil
	}
	var ms0, ms1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms0)
	n := NewNode(Config{Local: local, Install: nopInstall{}, Refresh: 30 * time.Second, Router: true})
	now := time.Unix(1000, 0)
	var paths, resvs [][]byte
	for i := range sessions {
		sess := Session{Dest: netip.AddrFrom4([4]byte{198, 18, 2, byte(2 + i%200)}), Proto: 17, Port: uint16(5000 + i)}
		snd := Filter{Src: addrS, Port: uint16(4000 + i%1000)}
		ts := testTspec
		fs := Flowspec{Service: ServiceCL, Tspec: ts}
		p := &Message{Type: Path, TTL: 64, Session: sess, Hop: &Hop{Addr: addrS}, Refresh: 30000, Sender: &Sender{Template: snd, Tspec: &ts}}
		r := &Message{Type: Resv, TTL: 64, Session: sess, Hop: &Hop{Addr: sess.Dest}, Refresh: 30000, Style: StyleFF,
			Flows: []FlowDesc{{Flowspec: &fs, Filters: []Filter{snd}}}}
		pb, err := p.Encode()
		if err != nil {
			b.Fatal(err)
		}
		rb, err := r.Encode()
		if err != nil {
			b.Fatal(err)
		}
		paths, resvs = append(paths, pb), append(resvs, rb)
		n.Handle(p, addrS, now)
		n.Handle(r, sess.Dest, now)
	}
	runtime.GC()
	runtime.ReadMemStats(&ms1)
	if p, r := n.Counts(); p != sessions || r != sessions {
		b.Fatalf("%d paths, %d reservations", p, r)
	}
	msgBytes := 0
	for i := range paths {
		msgBytes += len(paths[i]) + len(resvs[i])
	}
	b.ResetTimer()
	for b.Loop() {
		now = now.Add(30 * time.Second)
		for i := range paths {
			for _, raw := range [][]byte{paths[i], resvs[i]} {
				m, err := Decode(raw)
				if err != nil {
					b.Fatal(err)
				}
				for _, o := range n.Handle(m, m.Hop.Addr, now) {
					if _, err := o.Msg.Encode(); err != nil {
						b.Fatal(err)
					}
				}
			}
		}
		n.Tick(now)
	}
	perPeriod := b.Elapsed().Seconds() / float64(b.N)
	b.ReportMetric(perPeriod*1e3, "ms-CPU/refresh-period")
	b.ReportMetric(perPeriod/30*100, "%CPU@R=30s")
	b.ReportMetric(float64(ms1.HeapAlloc-ms0.HeapAlloc-uint64(msgBytes))/sessions, "B-state/session")
	b.ReportMetric(perPeriod/sessions*1e9, "ns/session-refresh")
}

// BenchmarkReserveAcrossRouter (root): sender — router — receiver in three
// namespaces with agents on real raw sockets. One op: the receiver's
// Reserve until the reservation is installed on the sender (reported as
// reserve-to-active), then RemoveReservation until it is gone on the
// router and the sender (remove-to-gone). The installers are in-memory:
// the engine's own install time (the RSVP QoS Manager's Table IV) comes on top.
func BenchmarkReserveAcrossRouter(b *testing.B) {
	snd, rtr, rcv := threeNodes(b, time.Second)
	sess := Session{Dest: rcv.addr, Proto: 17, Port: 5004}
	k := FlowKey{sess, Filter{Src: snd.addr, Port: 4000}}
	outs, err := snd.agent.Node.Sender(k, testTspec, time.Now())
	if err != nil {
		b.Fatal(err)
	}
	snd.agent.Send(outs)
	for end := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		if p, _ := rcv.agent.Node.Counts(); p == 1 {
			break
		}
		if time.Now().After(end) {
			b.Fatal("no Path at the receiver")
		}
	}
	fs := Flowspec{Service: ServiceCL, Tspec: testTspec}
	var reserve, remove time.Duration
	for b.Loop() {
		t0 := time.Now()
		outs, err := rcv.agent.Node.Reserve(sess, StyleFF, fs, []Filter{k.Sender}, false, t0)
		if err != nil {
			b.Fatal(err)
		}
		rcv.agent.Send(outs)
		for !snd.inst.has(k) {
			runtime.Gosched()
		}
		t1 := time.Now()
		rcv.agent.Send(rcv.agent.Node.RemoveReservation(k))
		for snd.inst.has(k) || rtr.inst.has(k) {
			runtime.Gosched()
		}
		reserve += t1.Sub(t0)
		remove += time.Since(t1)
	}
	b.ReportMetric(float64(reserve.Microseconds())/float64(b.N), "µs-reserve-to-active")
	b.ReportMetric(float64(remove.Microseconds())/float64(b.N), "µs-remove-to-gone")
}

// BenchmarkViewPageFull: one page of 1,000 of a full table (65,536 path
// states of a router): what one RSVP listing costs the daemon, reported as
// CPU time (the wall time of a shared machine says little).
func BenchmarkViewPageFull(b *testing.B) {
	n := NewNode(Config{Local: func(dst netip.Addr) (netip.Addr, bool, error) { return addrR2, false, nil },
		Install: nopInstall{}, Refresh: 30 * time.Second, Router: true})
	now := time.Unix(1000, 0)
	ts := testTspec
	for i := range MaxState {
		sess := Session{Dest: netip.AddrFrom4([4]byte{198, 18, 2, byte(i % 250)}), Proto: 17, Port: uint16(i)}
		m := &Message{Type: Path, TTL: 1, Session: sess, Hop: &Hop{Addr: addrS}, Refresh: 30000,
			Sender: &Sender{Template: Filter{Src: addrS, Port: uint16(i % 7)}, Tspec: &ts}}
		n.Handle(m, addrS, now)
	}
	if p, _ := n.Counts(); p != MaxState {
		b.Fatalf("%d path states", p)
	}
	var r0, r1 syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &r0)
	for b.Loop() {
		if pg := n.View(nil, 30000, 1000); len(pg.Paths) != 1000 {
			b.Fatal(len(pg.Paths))
		}
	}
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &r1)
	cpu := time.Duration(syscall.TimevalToNsec(r1.Utime) - syscall.TimevalToNsec(r0.Utime) + syscall.TimevalToNsec(r1.Stime) - syscall.TimevalToNsec(r0.Stime))
	b.ReportMetric(float64(cpu.Milliseconds())/float64(b.N), "ms-CPU/op")
}
