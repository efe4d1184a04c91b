package plot

import (
	"math"
	"time"

	gonum "gonum.org/v1/plot"
)

// clockTicks marks an axis of times (Unix seconds) at round times of day
// in loc: about n labelled ticks at the step of clockSteps nearest to
// range/n, and an unlabelled one halfway between.
type clockTicks struct {
	loc *time.Location
	n   int
}

// clockSteps are the steps clock ticks may take, in seconds.
var clockSteps = []int64{1, 2, 5, 10, 15, 30, 60, 2 * 60, 5 * 60, 10 * 60, 15 * 60, 30 * 60,
	3600, 2 * 3600, 3 * 3600, 6 * 3600, 12 * 3600, 86400, 2 * 86400, 7 * 86400, 14 * 86400, 28 * 86400}

func (c clockTicks) Ticks(lo, hi float64) []gonum.Tick {
	if !(hi > lo) || math.IsInf(hi-lo, 0) {
		return gonum.DefaultTicks{}.Ticks(lo, hi)
	}
	raw := (hi - lo) / float64(max(1, c.n))
	step, best := clockSteps[0], math.Inf(1)
	for _, s := range clockSteps {
		if d := math.Abs(math.Log(float64(s) / raw)); d < best {
			step, best = s, d
		}
	}
	layout := "15:04"
	switch {
	case step < 60:
		layout = "15:04:05"
	case step >= 86400:
		layout = "2006-01-02"
	case hi-lo > 86400:
		layout = "01-02 15:04"
	}
	// Round times are counted in local time: shift by the zone's offset
	// at the start of the range.
	_, off := time.Unix(int64(lo), 0).In(c.loc).Zone()
	first := int64(math.Ceil((lo+float64(off))/float64(step)))*step - int64(off)
	var out []gonum.Tick
	if half := float64(first) - float64(step)/2; half >= lo {
		out = append(out, gonum.Tick{Value: half})
	}
	for v := first; float64(v) <= hi && len(out) < 200; v += step {
		out = append(out, gonum.Tick{Value: float64(v), Label: time.Unix(v, 0).In(c.loc).Format(layout)})
		if h := float64(v) + float64(step)/2; h <= hi {
			out = append(out, gonum.Tick{Value: h})
		}
	}
	return out
}
