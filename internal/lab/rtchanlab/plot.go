package rtchanlab

import (
	"github.com/hostqos/hostqos/internal/plot"
	"gonum.org/v1/plot/vg"
)

// Series is one line of a chart.
type Series struct {
	Name string
	X, Y []float64
}

// Chart is a line chart with a marker at each point, drawn with
// gonum.org/v1/plot in the project's house style (lower-case text, one
// colour per series).
type Chart struct {
	Title, XLabel, YLabel string
	Series                []Series
}

func (c Chart) figure() *plot.Figure {
	pn := plot.Panel{YLabel: plot.Lower(c.YLabel)}
	for i, s := range c.Series {
		pn.Series = append(pn.Series, plot.Series{Name: plot.Lower(s.Name), Color: plot.Cycle(i), Marks: plot.LinePoints, X: s.X, Y: s.Y})
	}
	return &plot.Figure{
		Title:       plot.Lower(c.Title),
		XLabel:      plot.Lower(c.XLabel),
		Panels:      []plot.Panel{pn},
		Width:       8 * vg.Inch,
		PanelHeight: 4.6 * vg.Inch,
	}
}

// SVG renders the chart as an SVG document.
func (c Chart) SVG() ([]byte, error) { return c.figure().SVG() }

// PNG renders the chart as a PNG image.
func (c Chart) PNG() ([]byte, error) { return c.figure().PNG() }
