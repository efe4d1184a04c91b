package rtchanlab

import (
	"fmt"
	"time"

	"github.com/hostqos/hostqos/rtchan"
)

// KB is the kilobyte of the seed's Table 3 (message size 60 KB, rates in
// KB/s).
const KB = 1024

// Load is one channel of an experiment: its spec and its traffic generator.
// Real-time generators emit bursts of Burst messages (default Bmax) every
// Burst·Imin/RateFactor, a linear bounded arrival process that honours the
// spec when RateFactor is 1 and violates R_max by that factor otherwise.
// Best-effort generators emit bursts of Burst messages at an average of
// OfferedBps bytes per second.
type Load struct {
	Spec       rtchan.Spec   `json:"spec"`
	MsgSize    int           `json:"msg_size"`
	Burst      int           `json:"burst,omitempty"`
	RateFactor float64       `json:"rate_factor,omitempty"`
	OfferedBps float64       `json:"offered_bps,omitempty"`
	Phase      time.Duration `json:"phase_ns,omitempty"`
}

// Experiment is a run of the seed's methodology: a workload on the null
// device, measured over TotalPackets transmitted packets with the first
// Warmup and last Cooldown ignored.
type Experiment struct {
	Name         string
	Params       rtchan.Params
	Policy       rtchan.Policy
	Loads        []Load
	TotalPackets int
	Warmup       int
	Cooldown     int

	hook func(rtchan.SimPacket) // tests: sees every transmitted packet
}

// ChannelResult is one channel's steady-state performance in a run.
type ChannelResult struct {
	Name       string  `json:"name"`
	BestEffort bool    `json:"best_effort,omitempty"`
	OfferedKBs float64 `json:"offered_kbs"`
	// ThroughputKBs counts packets completing transmission in the window.
	ThroughputKBs float64       `json:"throughput_kbs"`
	Packets       uint64        `json:"packets"`
	Msgs          uint64        `json:"msgs"`
	MinLaxity     time.Duration `json:"min_laxity_ns"`
	MeanLaxity    time.Duration `json:"mean_laxity_ns"`
	MaxLaxity     time.Duration `json:"max_laxity_ns"`
	Misses        uint64        `json:"misses"`       // packets past their deadline
	MsgMisses     uint64        `json:"msg_misses"`   // messages past their deadline
	Drops         uint64        `json:"drops"`        // packets dropped
	MsgDrops      uint64        `json:"msg_drops"`    // messages dropped
	TotalDrops    uint64        `json:"total_drops"`  // packets dropped over the whole run
	TotalMisses   uint64        `json:"total_misses"` // packets late over the whole run
}

// Result is the outcome of one Experiment.
type Result struct {
	Name     string                `json:"name"`
	Window   time.Duration         `json:"window_ns"`
	Duration time.Duration         `json:"duration_ns"`
	CPUUtil  float64               `json:"cpu_util"`
	LinkUtil float64               `json:"link_util"`
	Channels []ChannelResult       `json:"channels"`
	Bounds   []rtchan.ChannelBound `json:"bounds,omitempty"`
}

// Table3 returns the seed's Table 3 workload (rtchan.SeedSpecs) with
// best-effort channel 3 offered beKBs KB/s: each channel sends 60 KB
// messages, from fixed phases so that runs are deterministic.
func Table3(beKBs float64) []Load {
	phases := []time.Duration{0, 3100 * time.Microsecond, 7300 * time.Microsecond, 1700 * time.Microsecond}
	var out []Load
	for i, sp := range rtchan.SeedSpecs() {
		l := Load{Spec: sp, MsgSize: sp.Mmax, Phase: phases[i]}
		if sp.BestEffort {
			l.OfferedBps = beKBs * KB
		}
		out = append(out, l)
	}
	return out
}

// SeedExperiment is the seed's section 5 setup: Table 2b parameters, the
// evaluation policy, the Table 3 workload, 32K packets with the first and
// last 2K ignored.
func SeedExperiment(name string, beKBs float64) Experiment {
	return Experiment{
		Name:         name,
		Params:       rtchan.SeedParams(),
		Policy:       rtchan.DefaultPolicy(),
		Loads:        Table3(beKBs),
		TotalPackets: 32 * 1024,
		Warmup:       2 * 1024,
		Cooldown:     2 * 1024,
	}
}

type chAcc struct {
	bytes, pkts, msgs, misses, msgMisses, drops, msgDrops uint64
	minLax, maxLax                                        time.Duration
	sumLax                                                int64
	hasLax                                                bool
}

// Run executes the experiment in virtual time.
func (e Experiment) Run() (Result, error) {
	if e.TotalPackets <= e.Warmup+e.Cooldown {
		return Result{}, fmt.Errorf("run experiment %q: total packets %d must exceed warmup+cooldown", e.Name, e.TotalPackets)
	}
	s, err := rtchan.NewSim(e.Params, e.Policy)
	if err != nil {
		return Result{}, fmt.Errorf("run experiment %q: %w", e.Name, err)
	}
	res := Result{Name: e.Name}
	var specs []rtchan.Spec
	for _, l := range e.Loads {
		specs = append(specs, l.Spec)
	}
	res.Bounds, _ = e.Params.Analyze(specs)
	ids := make([]rtchan.ChannelID, len(e.Loads))
	for i, l := range e.Loads {
		id, err := s.Create("", l.Spec)
		if err != nil {
			return Result{}, fmt.Errorf("run experiment %q: %w", e.Name, err)
		}
		ids[i] = id
	}
	acc := make([]chAcc, len(e.Loads))
	var count int
	var tStart, tEnd time.Duration
	inWindow := false
	s.Trace(rtchan.SimTrace{
		Packet: func(p rtchan.SimPacket) {
			if e.hook != nil {
				e.hook(p)
			}
			count++
			if count == e.Warmup {
				tStart, inWindow = p.Done, true
				return
			}
			if count == e.TotalPackets-e.Cooldown {
				tEnd = p.Done
			}
			if count > e.TotalPackets-e.Cooldown {
				inWindow = false
			}
			if !inWindow {
				return
			}
			a := &acc[p.Channel]
			a.pkts++
			a.bytes += uint64(p.Size)
			if !p.BestEffort && p.Done > p.Deadline {
				a.misses++
			}
		},
		Message: func(m rtchan.Message) {
			if !inWindow {
				return
			}
			a := &acc[m.Channel]
			a.msgs++
			if m.BestEffort {
				return
			}
			if m.Laxity < 0 {
				a.msgMisses++
			}
			a.sumLax += int64(m.Laxity)
			if !a.hasLax || m.Laxity < a.minLax {
				a.minLax = m.Laxity
			}
			if !a.hasLax || m.Laxity > a.maxLax {
				a.maxLax = m.Laxity
			}
			a.hasLax = true
		},
		Drop: func(d rtchan.SimDrop) {
			if !inWindow {
				return
			}
			a := &acc[d.Channel]
			a.drops += uint64(d.Packets)
			if d.Packets == d.Of {
				a.msgDrops++
			}
		},
	})
	for i, l := range e.Loads {
		id := ids[i]
		l := l
		burst := l.Burst
		if burst <= 0 {
			burst = l.Spec.Bmax
		}
		var period time.Duration
		if l.Spec.BestEffort {
			if l.OfferedBps <= 0 {
				continue
			}
			period = time.Duration(float64(burst*l.MsgSize) / l.OfferedBps * float64(time.Second))
		} else {
			f := l.RateFactor
			if f <= 0 {
				f = 1
			}
			period = time.Duration(float64(time.Duration(burst)*l.Spec.MinInterval()) / f)
		}
		if period <= 0 {
			return Result{}, fmt.Errorf("run experiment %q: channel %q generates at an infinite rate", e.Name, l.Spec.Name)
		}
		var gen func(k int64)
		gen = func(k int64) {
			for j := 0; j < burst; j++ {
				_ = s.SendSize(id, l.MsgSize, nil)
			}
			s.At(l.Phase+time.Duration(k+1)*period, func() { gen(k + 1) })
		}
		s.At(l.Phase, func() { gen(0) })
	}
	const limit = 24 * time.Hour
	s.RunWhile(func() bool { return count < e.TotalPackets && s.Now() < limit })
	if count < e.TotalPackets {
		return Result{}, fmt.Errorf("run experiment %q: only %d of %d packets transmitted", e.Name, count, e.TotalPackets)
	}
	res.Window = tEnd - tStart
	res.Duration = s.Now()
	cpu, link := s.Busy()
	res.CPUUtil = float64(cpu) / float64(res.Duration)
	res.LinkUtil = float64(link) / float64(res.Duration)
	secs := res.Window.Seconds()
	for i, l := range e.Loads {
		a := acc[i]
		st, _ := s.Stats(ids[i])
		cr := ChannelResult{
			Name:          l.Spec.Name,
			BestEffort:    l.Spec.BestEffort,
			ThroughputKBs: float64(a.bytes) / KB / secs,
			Packets:       a.pkts,
			Msgs:          a.msgs,
			MinLaxity:     a.minLax,
			MaxLaxity:     a.maxLax,
			Misses:        a.misses,
			MsgMisses:     a.msgMisses,
			Drops:         a.drops,
			MsgDrops:      a.msgDrops,
			TotalDrops:    st.PktsDropped,
			TotalMisses:   st.Misses,
		}
		if l.Spec.BestEffort {
			cr.OfferedKBs = l.OfferedBps / KB
		} else {
			f := l.RateFactor
			if f <= 0 {
				f = 1
			}
			cr.OfferedKBs = f * float64(l.MsgSize) / KB / l.Spec.MinInterval().Seconds()
		}
		if a.msgs > 0 && !l.Spec.BestEffort {
			cr.MeanLaxity = time.Duration(a.sumLax / int64(a.msgs))
		}
		res.Channels = append(res.Channels, cr)
	}
	return res, nil
}
