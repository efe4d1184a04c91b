package traffic

import (
	"math"
	"math/rand/v2"
	"sort"
	"time"
)

// Summary describes a set of latency samples in milliseconds.
type Summary struct {
	N    uint64  `json:"n"`
	Min  float64 `json:"min_ms"`
	Mean float64 `json:"mean_ms"`
	P50  float64 `json:"p50_ms"`
	P90  float64 `json:"p90_ms"`
	P99  float64 `json:"p99_ms"`
	Max  float64 `json:"max_ms"`
}

// Percentile returns the p-th percentile (0 < p <= 100) of sorted values by
// the nearest-rank method: the smallest value such that at least p% of the
// values are less than or equal to it. It returns 0 for no values.
func Percentile(sorted []float64, p float64) float64 {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	if p <= 0 {
		return sorted[0]
	}
	rank := int(math.Ceil(p / 100 * float64(n)))
	if rank < 1 {
		rank = 1
	}
	if rank > n {
		rank = n
	}
	return sorted[rank-1]
}

// maxSamples bounds the memory of one Recorder; beyond it the percentiles
// come from a uniform reservoir sample while N, min, mean and max stay exact.
const maxSamples = 200_000

// Recorder accumulates latency samples with bounded memory.
type Recorder struct {
	samples []float64 // milliseconds
	n       uint64
	sum     float64
	min     float64
	max     float64
	rng     *rand.Rand
}

// Add records one sample.
func (r *Recorder) Add(d time.Duration) {
	ms := float64(d) / float64(time.Millisecond)
	r.n++
	r.sum += ms
	if r.n == 1 || ms < r.min {
		r.min = ms
	}
	if r.n == 1 || ms > r.max {
		r.max = ms
	}
	if len(r.samples) < maxSamples {
		r.samples = append(r.samples, ms)
		return
	}
	if r.rng == nil {
		r.rng = rand.New(rand.NewPCG(1, 2))
	}
	if j := r.rng.Uint64N(r.n); j < maxSamples {
		r.samples[j] = ms
	}
}

// N is the number of samples recorded.
func (r *Recorder) N() uint64 { return r.n }

// Summary computes the summary of all samples so far.
func (r *Recorder) Summary() Summary {
	if r.n == 0 {
		return Summary{}
	}
	s := append([]float64(nil), r.samples...)
	sort.Float64s(s)
	return Summary{
		N:    r.n,
		Min:  round3(r.min),
		Mean: round3(r.sum / float64(r.n)),
		P50:  round3(Percentile(s, 50)),
		P90:  round3(Percentile(s, 90)),
		P99:  round3(Percentile(s, 99)),
		Max:  round3(r.max),
	}
}

// Merge adds every sample of o to r (o's reservoir if it overflowed).
func (r *Recorder) Merge(o *Recorder) {
	if o.n == 0 {
		return
	}
	for _, ms := range o.samples {
		if len(r.samples) < maxSamples {
			r.samples = append(r.samples, ms)
		}
	}
	if r.n == 0 || o.min < r.min {
		r.min = o.min
	}
	if r.n == 0 || o.max > r.max {
		r.max = o.max
	}
	r.n += o.n
	r.sum += o.sum
}

func round3(v float64) float64 { return math.Round(v*1000) / 1000 }

// Jitter is the RFC 3550 interarrival jitter estimator: for consecutive
// packets i, j with transit times (arrival - send timestamp) the difference
// D = transit_j - transit_i updates J += (|D| - J)/16.
type Jitter struct {
	j           float64 // nanoseconds
	prevTransit int64
	have        bool
}

// Add feeds the transit time of the next packet in arrival order.
func (j *Jitter) Add(transit time.Duration) {
	t := int64(transit)
	if !j.have {
		j.prevTransit, j.have = t, true
		return
	}
	d := float64(t - j.prevTransit)
	j.prevTransit = t
	j.j += (math.Abs(d) - j.j) / 16
}

// Value is the current jitter estimate.
func (j *Jitter) Value() time.Duration { return time.Duration(j.j) }

// Millis is the current jitter estimate in milliseconds.
func (j *Jitter) Millis() float64 { return round3(j.j / 1e6) }
