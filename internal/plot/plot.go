// Package plot draws the project's figures (the demo, the real-time
// channel bench, and any later one) with gonum.org/v1/plot in one house
// style: Liberation Sans from gonum's bundled fonts (no system fonts are
// read), lower-case text, one set of colours and line styles, a grid, the
// legend in a column right of the plot, and every figure saved as PNG and
// SVG side by side.
//
// A Figure is a title, panels stacked vertically and aligned on their
// plot areas, and caption lines (notes) under them. Callers describe what
// to draw (series, ranges, labels); this package decides how it looks.
//
// House style for the text: titles, axis labels, legend entries and notes
// are written in lower case, units keep their symbols (Mbit/s, KB/s, ms).
// The package does not change the text it is given; it is the caller's to
// write.
package plot

import (
	"bytes"
	"fmt"
	"image/color"
	"math"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode"

	gonum "gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

// Colours of the house style. The demo's meanings: Green is "with
// hostqos", Red "without", Grey cross traffic, Black an offered load or a
// limit, Blue anything else.
var (
	Green = color.RGBA{0, 130, 60, 255}
	Red   = color.RGBA{205, 40, 40, 255}
	Grey  = color.RGBA{120, 120, 120, 255}
	Black = color.RGBA{30, 30, 30, 255}
	Blue  = color.RGBA{30, 90, 200, 255}

	gridColour = color.RGBA{225, 225, 225, 255}
	axisColour = color.RGBA{60, 60, 60, 255}
	legendBack = color.RGBA{255, 255, 255, 255}
)

// palette colours series that have no meaning of their own (Cycle).
var palette = []color.RGBA{
	{31, 119, 180, 255}, {214, 39, 40, 255}, {44, 160, 44, 255}, {255, 127, 14, 255},
	{148, 103, 189, 255}, {140, 86, 75, 255}, {227, 119, 194, 255}, {127, 127, 127, 255},
}

// Cycle returns the i-th colour of the palette for series without a
// meaning of their own (channel 0, 1, …); it wraps around.
func Cycle(i int) color.Color {
	return palette[((i%len(palette))+len(palette))%len(palette)]
}

// Sizes of the house style. Lengths are in points (1/72 inch); PNGs are
// rendered at DPI dots per inch.
const (
	DPI = 100

	// DefaultWidth and DefaultPanelHeight size a Figure that does not set
	// its own.
	DefaultWidth       = 11 * vg.Inch
	DefaultPanelHeight = 2.8 * vg.Inch

	titleSize  = 14
	panelSize  = 11
	labelSize  = 10
	tickSize   = 9
	legendSize = 10
	noteSize   = 9

	lineWidth  = 1.5
	markRadius = 2.5
	pad        = 8 // points between the figure's bands and its edge
)

// lineDashes is the dash pattern of a Dashed series.
var lineDashes = []vg.Length{vg.Points(6), vg.Points(4)}

// sans is the house font: Liberation Sans from gonum's bundled collection,
// which gonum/plot registers in font.DefaultCache.
var sans = font.Font{Typeface: "Liberation", Variant: "Sans"}

func textStyle(size vg.Length) text.Style {
	return text.Style{
		Color:   axisColour,
		Font:    font.From(sans, size),
		XAlign:  draw.XLeft,
		YAlign:  draw.YBottom,
		Handler: gonum.DefaultTextHandler,
	}
}

// Marks says how a series is drawn.
type Marks int

const (
	// Line joins the points with a line (the default).
	Line Marks = iota
	// Points draws a marker at each point and no line.
	Points
	// LinePoints draws both.
	LinePoints
)

// Series is one set of points in a panel.
type Series struct {
	Name   string // legend entry; empty: none
	Color  color.Color
	Dashed bool
	Marks  Marks
	// X and Y are the points. A NaN in Y leaves a gap: the line breaks
	// there and no marker is drawn.
	X, Y []float64
	// Lo, when set, makes the series a band: the area between Lo and Y
	// (a range, such as a mean and a peak) is filled with a translucent
	// shade of Color, no line drawn; a NaN in either leaves a gap.
	Lo []float64
}

// Panel is one plot area.
type Panel struct {
	Title  string // e.g. "voice packet rate (pkt/s)"
	YLabel string
	// XLabel gives the panel its own x axis (range and label) instead of
	// the figure's shared one.
	XLabel string
	Series []Series
	// XMin, XMax fix the x range when XMax > XMin.
	XMin, XMax float64
	// YMax fixes the top of the y axis when > 0; otherwise it is the
	// largest value plus a little room. The bottom is 0 or the smallest
	// value if that is negative (then a dashed line marks 0).
	YMax float64
	// Segments draws each series' points pairwise as separate lines
	// (x[2i],y[2i])–(x[2i+1],y[2i+1]) instead of one line.
	Segments bool
}

// Figure is a title, panels stacked vertically and aligned on their plot
// areas, and notes under them.
type Figure struct {
	Title string
	// XLabel labels the x axis the panels without an XLabel of their own
	// share (same range); it is drawn under the last of them.
	XLabel string
	// XFromZero starts x axes at 0 (or the smallest x if negative)
	// rather than at the smallest x, as for a time since the start.
	XFromZero bool
	// XClock, when set, says the x values are times (Unix seconds): the
	// ticks fall on round times of day in this location and are
	// labelled with them (15:04, or 15:04:05, or the date for long
	// ranges).
	XClock *time.Location
	Panels []Panel
	Notes  []string // caption lines under the panels

	Width       vg.Length // 0: DefaultWidth
	PanelHeight vg.Length // 0: DefaultPanelHeight
}

func (f *Figure) size() (w, h vg.Length) {
	w, ph := f.Width, f.PanelHeight
	if w <= 0 {
		w = DefaultWidth
	}
	if ph <= 0 {
		ph = DefaultPanelHeight
	}
	top, bottom := f.bands()
	return w, top + bottom + ph*vg.Length(max(1, len(f.Panels)))
}

// bands returns the heights of the title band and the notes band.
func (f *Figure) bands() (top, bottom vg.Length) {
	top, bottom = pad, pad
	if f.Title != "" {
		top += textStyle(titleSize).Height(f.Title) + 1.5*pad
	}
	if len(f.Notes) > 0 {
		bottom += noteLine()*vg.Length(len(f.Notes)) + pad/2
	}
	return top, bottom
}

func noteLine() vg.Length { return textStyle(noteSize).Height("x") * 1.35 }

// legend builds the legend of one panel in the house style.
func legend(pn *Panel) gonum.Legend {
	l := gonum.NewLegend()
	l.TextStyle = textStyle(legendSize)
	l.Left, l.Top = true, true
	l.ThumbnailWidth = vg.Points(24)
	l.Padding = vg.Points(3)
	for i := range pn.Series {
		s := &pn.Series[i]
		if s.Name == "" {
			continue
		}
		l.Add(s.Name, thumbs(s)...)
	}
	return l
}

func (s *Series) lineStyle() draw.LineStyle {
	ls := draw.LineStyle{Color: s.Color, Width: vg.Points(lineWidth)}
	if s.Color == nil {
		ls.Color = Black
	}
	if s.Dashed {
		ls.Dashes = lineDashes
	}
	return ls
}

func (s *Series) glyphStyle() draw.GlyphStyle {
	return draw.GlyphStyle{Color: s.lineStyle().Color, Radius: vg.Points(markRadius), Shape: draw.CircleGlyph{}}
}

func thumbs(s *Series) []gonum.Thumbnailer {
	var t []gonum.Thumbnailer
	if s.Lo != nil {
		return []gonum.Thumbnailer{&plotter.Polygon{Color: s.bandColor()}}
	}
	if s.Marks != Points {
		t = append(t, &plotter.Line{LineStyle: s.lineStyle()})
	}
	if s.Marks != Line {
		t = append(t, &plotter.Scatter{GlyphStyle: s.glyphStyle()})
	}
	return t
}

// legendWidth is the width of the legend column: the widest legend of
// any panel, or 0 if no series has a name.
func (f *Figure) legendWidth() vg.Length {
	var w vg.Length
	for i := range f.Panels {
		l := legend(&f.Panels[i])
		r := l.Rectangle(draw.Canvas{})
		w = max(w, r.Max.X-r.Min.X)
	}
	if w == 0 {
		return 0
	}
	// 15 % more than Liberation Sans needs, for an SVG viewer that falls
	// back to a wider font.
	return w*1.15 + 2*pad
}

// bandColor is the fill of a band: the series' colour, translucent, so
// that bands that overlap both show.
func (s *Series) bandColor() color.Color {
	r, g, b, _ := s.lineStyle().Color.RGBA()
	return color.NRGBA{uint8(r >> 8), uint8(g >> 8), uint8(b >> 8), 80}
}

// ranges returns the data range of the panels' series (NaN skipped).
func ranges(pns []Panel) (xmin, xmax, ymin, ymax float64) {
	xmin, ymin = math.Inf(1), math.Inf(1)
	xmax, ymax = math.Inf(-1), math.Inf(-1)
	for _, pn := range pns {
		for _, s := range pn.Series {
			for i := range min(len(s.X), len(s.Y)) {
				x, y := s.X[i], s.Y[i]
				if math.IsNaN(x) || math.IsNaN(y) || math.IsInf(x, 0) || math.IsInf(y, 0) {
					continue
				}
				xmin, xmax = math.Min(xmin, x), math.Max(xmax, x)
				ymin, ymax = math.Min(ymin, y), math.Max(ymax, y)
				if i < len(s.Lo) && !math.IsNaN(s.Lo[i]) && !math.IsInf(s.Lo[i], 0) {
					ymin, ymax = math.Min(ymin, s.Lo[i]), math.Max(ymax, s.Lo[i])
				}
			}
		}
	}
	return xmin, xmax, ymin, ymax
}

// xRange is the x range of a panel: fixed, its own, or the figure's.
func (f *Figure) xRange(pn *Panel) (lo, hi float64) {
	if pn.XMax > pn.XMin {
		return pn.XMin, pn.XMax
	}
	var shared []Panel
	if pn.XLabel != "" {
		shared = []Panel{*pn}
	} else {
		for _, p := range f.Panels {
			if p.XLabel == "" {
				shared = append(shared, p)
			}
		}
	}
	lo, hi, _, _ = ranges(shared)
	if math.IsInf(lo, 0) {
		return 0, 1
	}
	if f.XFromZero && lo > 0 {
		lo = 0
	}
	if hi <= lo {
		hi = lo + 1
	}
	return lo, hi
}

func yRange(pn *Panel) (lo, hi float64) {
	_, _, lo, hi = ranges([]Panel{*pn})
	if math.IsInf(lo, 0) {
		lo, hi = 0, 1
	}
	lo = math.Min(0, lo)
	if pn.YMax > 0 {
		return lo, pn.YMax
	}
	if hi <= lo {
		hi = lo + 1
	}
	return lo, hi + (hi-lo)*0.08
}

// ticks is the house tick marker: about n labelled ticks at a step of 1,
// 2 or 5 × 10^k, and an unlabelled one halfway between.
type ticks int

func (n ticks) Ticks(lo, hi float64) []gonum.Tick {
	raw := (hi - lo) / float64(n)
	if !(raw > 0) || math.IsInf(raw, 0) {
		return gonum.DefaultTicks{}.Ticks(lo, hi)
	}
	exp := math.Floor(math.Log10(raw))
	mag := math.Pow(10, exp)
	// The step of 1, 2, 5 or 10 × 10^k nearest to the raw one.
	step, prec, best := mag, max(0, int(-exp)), math.Inf(1)
	for _, m := range []float64{1, 2, 5, 10} {
		if d := math.Abs(math.Log(m * mag / raw)); d < best {
			step, best = m*mag, d
			prec = max(0, int(-exp))
			if m == 10 {
				prec = max(0, int(-exp)-1)
			}
		}
	}
	var out []gonum.Tick
	for i := math.Ceil(lo/step - 1e-9); i*step <= hi+step*1e-9; i++ {
		v := i * step
		if i == math.Ceil(lo/step-1e-9) && v-step/2 >= lo {
			out = append(out, gonum.Tick{Value: v - step/2})
		}
		if math.Abs(v) < step*1e-9 {
			v = 0 // not -0
		}
		out = append(out, gonum.Tick{Value: v, Label: strconv.FormatFloat(v, 'f', prec, 64)})
		if v+step/2 <= hi {
			out = append(out, gonum.Tick{Value: v + step/2})
		}
		if len(out) > 100 {
			break
		}
	}
	return out
}

// newPlot builds one panel as a gonum plot in the house style.
func (f *Figure) newPlot(pn *Panel, xlabel string) (*gonum.Plot, error) {
	p := gonum.New()
	p.Title.Text = pn.Title
	p.Title.TextStyle = textStyle(panelSize)
	p.Title.TextStyle.XAlign = draw.XCenter
	p.Title.TextStyle.YAlign = draw.YTop
	p.Title.Padding = vg.Points(4)
	for _, ax := range []*gonum.Axis{&p.X, &p.Y} {
		ax.Label.TextStyle = textStyle(labelSize)
		ax.Label.TextStyle.XAlign = draw.XCenter
		ax.Tick.Label = textStyle(tickSize)
		ax.Color, ax.Tick.Color = axisColour, axisColour
		ax.Padding = 0
	}
	p.X.Tick.Marker, p.Y.Tick.Marker = ticks(10), ticks(5)
	if f.XClock != nil && pn.XLabel == "" {
		p.X.Tick.Marker = clockTicks{loc: f.XClock, n: 8}
	}
	p.X.Tick.Label.XAlign, p.X.Tick.Label.YAlign = draw.XCenter, draw.YTop
	p.Y.Tick.Label.XAlign, p.Y.Tick.Label.YAlign = draw.XRight, draw.YCenter
	p.X.Label.Text, p.Y.Label.Text = xlabel, pn.YLabel

	g := plotter.NewGrid()
	g.Vertical = draw.LineStyle{Color: gridColour, Width: vg.Points(0.7)}
	g.Horizontal = g.Vertical
	p.Add(g)

	xlo, xhi := f.xRange(pn)
	ylo, yhi := yRange(pn)
	if ylo < 0 {
		zero := plotter.XYs{{X: xlo, Y: 0}, {X: xhi, Y: 0}}
		l, err := plotter.NewLine(zero)
		if err != nil {
			return nil, fmt.Errorf("draw zero line: %w", err)
		}
		l.LineStyle = draw.LineStyle{Color: axisColour, Width: vg.Points(0.7), Dashes: []vg.Length{vg.Points(3), vg.Points(2)}}
		p.Add(l)
	}
	// Bands first, under every line.
	for i := range pn.Series {
		if pn.Series[i].Lo == nil {
			continue
		}
		if err := addBand(p, &pn.Series[i]); err != nil {
			return nil, fmt.Errorf("draw band %q: %w", pn.Series[i].Name, err)
		}
	}
	for i := range pn.Series {
		if pn.Series[i].Lo != nil {
			continue
		}
		if err := addSeries(p, &pn.Series[i], pn.Segments); err != nil {
			return nil, fmt.Errorf("draw series %q: %w", pn.Series[i].Name, err)
		}
	}
	p.X.Min, p.X.Max = xlo, xhi
	p.Y.Min, p.Y.Max = ylo, yhi
	return p, nil
}

// addBand fills the area between a band's Lo and Y, a polygon per run of
// points without NaN.
func addBand(p *gonum.Plot, s *Series) error {
	n := min(len(s.X), len(s.Y), len(s.Lo))
	ok := func(i int) bool {
		for _, v := range []float64{s.X[i], s.Y[i], s.Lo[i]} {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				return false
			}
		}
		return true
	}
	for i := 0; i < n; {
		if !ok(i) {
			i++
			continue
		}
		j := i
		for j < n && ok(j) {
			j++
		}
		if j-i >= 2 {
			var ring plotter.XYs
			for k := i; k < j; k++ {
				ring = append(ring, plotter.XY{X: s.X[k], Y: s.Y[k]})
			}
			for k := j - 1; k >= i; k-- {
				ring = append(ring, plotter.XY{X: s.X[k], Y: s.Lo[k]})
			}
			pg, err := plotter.NewPolygon(ring)
			if err != nil {
				return err
			}
			pg.Color, pg.LineStyle = s.bandColor(), draw.LineStyle{}
			p.Add(pg)
		}
		i = j
	}
	return nil
}

// addSeries adds a series' lines and markers: a line per run of points
// without NaN (or per pair with segments).
func addSeries(p *gonum.Plot, s *Series, segments bool) error {
	n := min(len(s.X), len(s.Y))
	ok := func(i int) bool {
		return !math.IsNaN(s.X[i]) && !math.IsNaN(s.Y[i]) && !math.IsInf(s.X[i], 0) && !math.IsInf(s.Y[i], 0)
	}
	var runs []plotter.XYs
	switch {
	case segments:
		for i := 0; i+1 < n; i += 2 {
			if ok(i) && ok(i+1) {
				runs = append(runs, plotter.XYs{{X: s.X[i], Y: s.Y[i]}, {X: s.X[i+1], Y: s.Y[i+1]}})
			}
		}
	default:
		var run plotter.XYs
		for i := range n {
			if !ok(i) {
				if len(run) > 0 {
					runs = append(runs, run)
				}
				run = nil
				continue
			}
			run = append(run, plotter.XY{X: s.X[i], Y: s.Y[i]})
		}
		if len(run) > 0 {
			runs = append(runs, run)
		}
	}
	for _, r := range runs {
		// A lone point of a line is drawn as a dot, or it would vanish.
		if s.Marks != Points && (len(r) > 1 || s.Marks == LinePoints) {
			l, err := plotter.NewLine(r)
			if err != nil {
				return err
			}
			l.LineStyle = s.lineStyle()
			p.Add(l)
		}
		if s.Marks != Line || len(r) == 1 {
			sc, err := plotter.NewScatter(r)
			if err != nil {
				return err
			}
			sc.GlyphStyle = s.glyphStyle()
			if s.Marks == Line {
				sc.GlyphStyle.Radius = vg.Points(lineWidth)
			}
			p.Add(sc)
		}
	}
	return nil
}

// draw draws the figure onto a canvas of f.size().
func (f *Figure) draw(dc draw.Canvas) error {
	dc.SetColor(color.White)
	dc.Fill(dc.Rectangle.Path())
	top, bottom := f.bands()
	if f.Title != "" {
		ts := textStyle(titleSize)
		ts.Color = Black
		ts.XAlign, ts.YAlign = draw.XCenter, draw.YTop
		dc.FillText(ts, vg.Point{X: dc.Center().X, Y: dc.Max.Y - pad}, f.Title)
	}
	if len(f.Panels) == 0 {
		return nil
	}

	// The figure's shared x label goes under the last panel that shares
	// the axis.
	lastShared := -1
	for i := range f.Panels {
		if f.Panels[i].XLabel == "" {
			lastShared = i
		}
	}
	plots := make([][]*gonum.Plot, len(f.Panels))
	for i := range f.Panels {
		xl := f.Panels[i].XLabel
		if i == lastShared {
			xl = f.XLabel
		}
		p, err := f.newPlot(&f.Panels[i], xl)
		if err != nil {
			return fmt.Errorf("draw panel %q: %w", f.Panels[i].Title, err)
		}
		plots[i] = []*gonum.Plot{p}
	}
	lw := f.legendWidth()
	area := draw.Crop(dc, pad, -pad-lw, bottom, -top)
	tiles := draw.Tiles{Rows: len(f.Panels), Cols: 1, PadY: vg.Points(10)}
	canvases := gonum.Align(plots, tiles, area)
	var left vg.Length
	for i, row := range plots {
		p, c := row[0], canvases[i][0]
		p.Draw(c)
		da := p.DataCanvas(c)
		left = da.Min.X
		if lw == 0 {
			continue
		}
		l := legend(&f.Panels[i])
		lc := draw.Canvas{Canvas: dc, Rectangle: vg.Rectangle{
			Min: vg.Point{X: da.Max.X + pad, Y: da.Min.Y},
			Max: vg.Point{X: dc.Max.X - pad, Y: da.Max.Y},
		}}
		r := l.Rectangle(lc)
		lc.SetColor(legendBack)
		lc.Fill(r.Path())
		l.Draw(lc)
	}
	ns := textStyle(noteSize)
	ns.YAlign = draw.YTop
	y := dc.Min.Y + bottom - pad/2
	for _, n := range f.Notes {
		dc.FillText(ns, vg.Point{X: left, Y: y}, n)
		y -= noteLine()
	}
	return nil
}

// unitSymbol matches the unit symbols that keep their case in lower-case
// text: bit/s, kbit/s, Mbit/s, Gbit/s, B, KB, MB, GB (and their /s).
var unitSymbol = regexp.MustCompile(`\b[kMG]?bit/s\b|\b[KMG]?B(/s)?\b`)

// Lower returns s in lower case but for its unit symbols (Mbit/s, KB/s
// keep their case), for text that is also shown elsewhere in its own case.
func Lower(s string) string {
	var b strings.Builder
	last := 0
	for _, m := range unitSymbol.FindAllStringIndex(s, -1) {
		b.WriteString(strings.ToLower(s[last:m[0]]))
		b.WriteString(s[m[0]:m[1]])
		last = m[1]
	}
	b.WriteString(strings.ToLower(s[last:]))
	return b.String()
}

// NotLowerCase returns the figure's texts (title, panel titles, axis
// labels, legend entries, notes) that break the house style: a capital
// letter outside a unit symbol. Tests call it on the figures they draw.
func (f *Figure) NotLowerCase() []string {
	texts := append([]string{f.Title, f.XLabel}, f.Notes...)
	for _, pn := range f.Panels {
		texts = append(texts, pn.Title, pn.XLabel, pn.YLabel)
		for _, s := range pn.Series {
			texts = append(texts, s.Name)
		}
	}
	var bad []string
	for _, t := range texts {
		if strings.IndexFunc(unitSymbol.ReplaceAllString(t, ""), unicode.IsUpper) >= 0 {
			bad = append(bad, t)
		}
	}
	return bad
}

// PNG renders the figure as a PNG image.
func (f *Figure) PNG() ([]byte, error) {
	w, h := f.size()
	c := vgimg.NewWith(vgimg.UseWH(w, h), vgimg.UseDPI(DPI))
	if err := f.draw(draw.New(c)); err != nil {
		return nil, err
	}
	var b bytes.Buffer
	if _, err := (vgimg.PngCanvas{Canvas: c}).WriteTo(&b); err != nil {
		return nil, fmt.Errorf("encode PNG: %w", err)
	}
	return b.Bytes(), nil
}

// SVG renders the figure as an SVG document. The font is not embedded (it
// would add about 550 KB to each file): the text asks for Liberation Sans,
// then Arial and Helvetica, which have the same metrics, then any
// sans-serif font; the legend column leaves room for a wider one.
func (f *Figure) SVG() ([]byte, error) {
	w, h := f.size()
	c := vgsvg.New(w, h)
	if err := f.draw(draw.New(c)); err != nil {
		return nil, err
	}
	var b bytes.Buffer
	if _, err := c.WriteTo(&b); err != nil {
		return nil, fmt.Errorf("encode SVG: %w", err)
	}
	return bytes.ReplaceAll(b.Bytes(), []byte("font-family:Liberation Sans;"),
		[]byte("font-family:'Liberation Sans',Arial,Helvetica,sans-serif;")), nil
}

// Save writes the figure as base.png and base.svg side by side and
// returns both paths (PNG first).
func Save(f *Figure, base string) ([]string, error) {
	pngData, err := f.PNG()
	if err != nil {
		return nil, fmt.Errorf("draw plot %s: %w", base, err)
	}
	svgData, err := f.SVG()
	if err != nil {
		return nil, fmt.Errorf("draw plot %s: %w", base, err)
	}
	pngPath, svgPath := base+".png", base+".svg"
	if err := os.WriteFile(pngPath, pngData, 0o644); err != nil {
		return nil, fmt.Errorf("write plot %s: %w", pngPath, err)
	}
	if err := os.WriteFile(svgPath, svgData, 0o644); err != nil {
		return nil, fmt.Errorf("write plot %s: %w", svgPath, err)
	}
	return []string{pngPath, svgPath}, nil
}
