package traffic

import (
	"context"
	"math"
	"math/rand/v2"
	"time"

	"github.com/hostqos/hostqos/internal/policy"
)

// ParetoConfig describes bursty cross traffic as in the Q-Pod seed (§5.1,
// Figure 23): time is cut into aggregation intervals (the seed: 2 s); in each
// the source sends CBR at a rate drawn from a Pareto distribution
// F(x) = 1 - (K/x)^Alpha, x ≥ K (the seed: K = 40 Mbit/s, Alpha = 1.05),
// capped at Cap (the seed: the 155 Mbit/s link). With OffProb > 0 an interval
// is silent with that probability, which makes it an on/off source.
//
// K is the Pareto scale — the smallest on-rate — not the mean: the mean of
// the capped distribution is CappedParetoMean(K, Alpha, Cap).
type ParetoConfig struct {
	To       string
	From     string
	Size     int     // UDP payload bytes (default 1200)
	K        uint64  // scale, bits/s (IP packet bytes)
	Alpha    float64 // shape, > 0
	Cap      uint64  // cap, bits/s (≥ K)
	Interval time.Duration
	OffProb  float64
	Duration time.Duration
	Seed     uint64
	DSCP     int
	Flow     uint32
}

// IntervalRate is one aggregation interval of a Pareto run.
type IntervalRate struct {
	StartS    float64 `json:"start_s"`
	TargetBps float64 `json:"target_bps"`
	SentBps   float64 `json:"sent_bps"`
}

// ParetoResult is what the Pareto source sent.
type ParetoResult struct {
	SendResult
	K               float64        `json:"k_bps"`
	Alpha           float64        `json:"alpha"`
	Cap             float64        `json:"cap_bps"`
	IntervalS       float64        `json:"interval_s"`
	Seed            uint64         `json:"seed"`
	ExpectedMeanBps float64        `json:"expected_mean_bps"`
	Trace           []IntervalRate `json:"trace"`
}

// CappedParetoMean is E[min(X, c)] for X ~ Pareto(k, alpha), c ≥ k:
// k + (k - k^α c^(1-α)) / (α - 1), and k(1 + ln(c/k)) for α = 1.
func CappedParetoMean(k, alpha, c float64) float64 {
	if c <= k {
		return c
	}
	if math.Abs(alpha-1) < 1e-12 {
		return k * (1 + math.Log(c/k))
	}
	return k + (k-math.Pow(k, alpha)*math.Pow(c, 1-alpha))/(alpha-1)
}

// paretoDraws yields the per-interval rates of a run, repeatable per seed.
type paretoDraws struct {
	rng *rand.Rand
	cfg ParetoConfig
}

func newParetoDraws(cfg ParetoConfig) *paretoDraws {
	return &paretoDraws{rng: rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)), cfg: cfg}
}

func (p *paretoDraws) next() float64 {
	u := 1 - p.rng.Float64() // (0, 1]
	off := p.rng.Float64() < p.cfg.OffProb
	if off {
		return 0
	}
	x := float64(p.cfg.K) / math.Pow(u, 1/p.cfg.Alpha)
	return math.Min(x, float64(p.cfg.Cap))
}

// ParetoRates returns the first n interval rates the config would use.
func ParetoRates(cfg ParetoConfig, n int) []float64 {
	d := newParetoDraws(cfg)
	out := make([]float64, n)
	for i := range out {
		out[i] = d.next()
	}
	return out
}

func (cfg *ParetoConfig) normalize() error {
	if err := checkHostPort("to", cfg.To); err != nil {
		return err
	}
	if cfg.K == 0 {
		return fieldErr("k", "", "missing", "give a positive rate (the seed used 40mbit)")
	}
	if cfg.Cap == 0 {
		return fieldErr("cap", "", "missing", "give a rate at least k, normally the bottleneck link rate")
	}
	if cfg.Cap < cfg.K {
		return fieldErr("cap", cfg.Cap, "below k "+policy.Rate(cfg.K).String(), "give a cap at least k, normally the bottleneck link rate")
	}
	if !(cfg.Alpha > 0) || cfg.Alpha > MaxAlpha {
		return fieldErr("alpha", cfg.Alpha, "out of range", "use a shape in (0, 100]; the seed used 1.05")
	}
	if cfg.OffProb < 0 || cfg.OffProb >= 1 {
		return fieldErr("off_prob", cfg.OffProb, "out of range", "use a probability in [0, 1)")
	}
	if cfg.Size == 0 {
		cfg.Size = 1200
	}
	if err := checkSize("size", cfg.Size); err != nil {
		return err
	}
	if cfg.Interval == 0 {
		cfg.Interval = 2 * time.Second
	}
	if cfg.Interval < MinInterval || cfg.Interval > MaxInterval {
		return fieldErr("interval", cfg.Interval, "out of range", "use 1ms..1h; the seed used 2s")
	}
	if err := checkDuration("duration", cfg.Duration); err != nil {
		return err
	}
	return checkDSCP(cfg.DSCP)
}

// SendPareto runs the bursty source.
func SendPareto(ctx context.Context, cfg ParetoConfig) (*ParetoResult, error) {
	if err := cfg.normalize(); err != nil {
		return nil, err
	}
	c, err := dialUDP(ctx, cfg.To, cfg.From, cfg.DSCP)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	f := newUDPFlow(c, cfg.To, cfg.Flow, cfg.DSCP, cfg.Size)
	f.res.Size = cfg.Size
	res := &ParetoResult{
		K: float64(cfg.K), Alpha: cfg.Alpha, Cap: float64(cfg.Cap), IntervalS: cfg.Interval.Seconds(), Seed: cfg.Seed,
		ExpectedMeanBps: math.Round((1 - cfg.OffProb) * CappedParetoMean(float64(cfg.K), cfg.Alpha, float64(cfg.Cap))),
	}
	draws := newParetoDraws(cfg)
	pktBits := float64(8 * (cfg.Size + f.ipOver))
	start := time.Now()
	end := start.Add(cfg.Duration)
	for is := start; is.Before(end) && ctx.Err() == nil; is = is.Add(cfg.Interval) {
		ie := minTime(end, is.Add(cfg.Interval))
		rate := draws.next()
		before := f.res.IPBytes
		if rate > 0 {
			p := pacer{next: is, interval: time.Duration(float64(time.Second) * pktBits / rate)}
			for p.wait(ctx) && time.Now().Before(ie) {
				f.send(cfg.Size, 0)
			}
		} else if !sleepUntil(ctx, ie) {
			break
		}
		span := ie.Sub(is).Seconds()
		res.Trace = append(res.Trace, IntervalRate{
			StartS:    round3(is.Sub(start).Seconds()),
			TargetBps: math.Round(rate),
			SentBps:   math.Round(float64((f.res.IPBytes-before)*8) / span),
		})
	}
	res.SendResult = *f.finish(start, 0)
	return res, nil
}
