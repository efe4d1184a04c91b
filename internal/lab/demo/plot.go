package demo

import (
	"bytes"
	"fmt"
	"html"
	"image"
	"image/color"
	"image/png"
	"math"
	"os"
	"strconv"
	"strings"
)

// Figure is a set of panels stacked vertically that share the x axis. One
// layout is drawn by two painters: SVG text and a PNG raster (our own
// 5×7 bitmap font, image/png to encode).
type Figure struct {
	Title  string
	XLabel string
	Panels []Panel
	Notes  []string // caption lines under the plot
}

// Panel is one plot area.
type Panel struct {
	Title string // includes the unit, e.g. "voice packet rate (pkt/s)"
	// XLabel gives the panel its own x axis (range and label) instead of
	// the figure's shared one.
	XLabel     string
	Series     []Series
	YMin, YMax float64 // YMax = 0: automatic (from YMin)
	XMin, XMax float64 // XMax = 0: automatic
	// Segments draws each series' consecutive points pairwise as separate
	// horizontal bars (x[2i]..x[2i+1] at y[2i]) instead of one line.
	Segments bool
}

// Series is one line.
type Series struct {
	Name   string
	Color  color.RGBA
	Dashed bool
	Points bool // draw markers instead of a line
	X, Y   []float64
}

var (
	colWith    = color.RGBA{0, 130, 60, 255}
	colWithout = color.RGBA{205, 40, 40, 255}
	colCross   = color.RGBA{120, 120, 120, 255}
	colOffered = color.RGBA{30, 30, 30, 255}
	colBlue    = color.RGBA{30, 90, 200, 255}
	colGrid    = color.RGBA{225, 225, 225, 255}
	colAxis    = color.RGBA{60, 60, 60, 255}
	colWhite   = color.RGBA{255, 255, 255, 255}
)

const (
	figW      = 960
	panelH    = 250
	marginL   = 80
	marginR   = 30
	titleH    = 44
	panelTop  = 28 // panel title band
	panelBot  = 26 // x tick labels
	noteLineH = 16
)

type anchor int

const (
	left anchor = iota
	middle
	right
)

type painter interface {
	rect(x, y, w, h float64, fill color.RGBA)
	polyline(pts [][2]float64, c color.RGBA, width float64, dashed bool)
	marker(x, y float64, c color.RGBA)
	text(x, y float64, s string, big bool, c color.RGBA, a anchor)
}

func (pn *Panel) bottom() float64 {
	if pn.XLabel != "" {
		return panelBot + 20
	}
	return panelBot
}

func (f *Figure) height() int {
	h := float64(titleH + 24 + len(f.Notes)*noteLineH + 10)
	for i := range f.Panels {
		h += panelTop + panelH + f.Panels[i].bottom()
	}
	return int(h)
}

func (f *Figure) draw(p painter) {
	h := float64(f.height())
	p.rect(0, 0, figW, h, colWhite)
	p.text(figW/2, 20, f.Title, true, colAxis, middle)
	y0 := float64(titleH)
	xmin, xmax := xRange(f.Panels)
	for _, pn := range f.Panels {
		pmin, pmax := xmin, xmax
		if pn.XLabel != "" {
			pmin, pmax = xRange([]Panel{pn})
		}
		if pn.XMax > pn.XMin {
			pmin, pmax = pn.XMin, pn.XMax
		}
		drawPanel(p, pn, marginL, y0+panelTop, figW-marginL-marginR, panelH, pmin, pmax)
		if pn.XLabel != "" {
			p.text(marginL+(figW-marginL-marginR)/2, y0+panelTop+panelH+panelBot+8, pn.XLabel, false, colAxis, middle)
		}
		y0 += panelTop + panelH + pn.bottom()
	}
	if f.XLabel != "" {
		p.text(marginL+(figW-marginL-marginR)/2, y0+6, f.XLabel, false, colAxis, middle)
	}
	y0 += 24
	for _, n := range f.Notes {
		p.text(marginL, y0+noteLineH/2, n, false, colAxis, left)
		y0 += noteLineH
	}
}

func xRange(panels []Panel) (float64, float64) {
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, pn := range panels {
		for _, s := range pn.Series {
			for _, x := range s.X {
				lo, hi = math.Min(lo, x), math.Max(hi, x)
			}
		}
	}
	if math.IsInf(lo, 0) {
		return 0, 1
	}
	if lo > 0 {
		lo = 0
	}
	if hi <= lo {
		hi = lo + 1
	}
	return lo, hi
}

func drawPanel(p painter, pn Panel, x, y, w, h, xmin, xmax float64) {
	ymin, ymax := pn.YMin, pn.YMax
	if ymax <= ymin {
		ymax = ymin
		for _, s := range pn.Series {
			for _, v := range s.Y {
				if !math.IsNaN(v) {
					ymax = math.Max(ymax, v)
				}
			}
		}
		if ymax <= ymin {
			ymax = ymin + 1
		}
		ymax += (ymax - ymin) * 0.08
	}
	yt := niceTicks(ymin, ymax, 5)
	ymax = math.Max(ymax, yt[len(yt)-1])
	xt := niceTicks(xmin, xmax, 10)
	sx := func(v float64) float64 { return x + (v-xmin)/(xmax-xmin)*w }
	sy := func(v float64) float64 {
		v = math.Max(ymin, math.Min(ymax, v))
		return y + h - (v-ymin)/(ymax-ymin)*h
	}
	p.text(x, y-panelTop/2, pn.Title, false, colAxis, left)
	for _, t := range yt {
		p.polyline([][2]float64{{x, sy(t)}, {x + w, sy(t)}}, colGrid, 1, false)
		p.text(x-6, sy(t), fmtTick(t), false, colAxis, right)
	}
	for _, t := range xt {
		if t < xmin || t > xmax {
			continue
		}
		p.polyline([][2]float64{{sx(t), y}, {sx(t), y + h}}, colGrid, 1, false)
		p.text(sx(t), y+h+12, fmtTick(t), false, colAxis, middle)
	}
	p.polyline([][2]float64{{x, y}, {x, y + h}, {x + w, y + h}}, colAxis, 1, false)
	for _, s := range pn.Series {
		switch {
		case pn.Segments:
			for i := 0; i+1 < len(s.X) && i+1 < len(s.Y); i += 2 {
				p.polyline([][2]float64{{sx(s.X[i]), sy(s.Y[i])}, {sx(s.X[i+1]), sy(s.Y[i+1])}}, s.Color, 2, s.Dashed)
			}
		case s.Points:
			for i := range min(len(s.X), len(s.Y)) {
				if !math.IsNaN(s.Y[i]) {
					p.marker(sx(s.X[i]), sy(s.Y[i]), s.Color)
				}
			}
		default:
			var pts [][2]float64
			for i := range min(len(s.X), len(s.Y)) {
				if math.IsNaN(s.Y[i]) {
					if len(pts) > 0 {
						p.polyline(pts, s.Color, 2, s.Dashed)
					}
					pts = nil
					continue
				}
				pts = append(pts, [2]float64{sx(s.X[i]), sy(s.Y[i])})
			}
			if len(pts) > 0 {
				p.polyline(pts, s.Color, 2, s.Dashed)
			}
		}
	}
	// Legend, top right, one entry per line.
	ly := y + 12
	for _, s := range pn.Series {
		if s.Name == "" {
			continue
		}
		lx := x + w - 300
		if s.Points {
			p.marker(lx+11, ly, s.Color)
		} else {
			p.polyline([][2]float64{{lx, ly}, {lx + 22, ly}}, s.Color, 2, s.Dashed)
		}
		p.text(lx+28, ly, s.Name, false, colAxis, left)
		ly += 15
	}
}

// niceTicks returns ticks at 1, 2 or 5 × 10^k covering [lo, hi].
func niceTicks(lo, hi float64, n int) []float64 {
	span := hi - lo
	if span <= 0 {
		return []float64{lo}
	}
	raw := span / float64(n)
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := mag
	for _, m := range []float64{1, 2, 5, 10} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	var out []float64
	for t := math.Floor(lo/step) * step; t <= hi+step*0.999; t += step {
		if t >= lo-step*1e-9 {
			out = append(out, math.Round(t/step)*step)
		}
		if len(out) > 100 {
			break
		}
	}
	return out
}

func fmtTick(v float64) string {
	if math.Abs(v) >= 1e6 && math.Mod(v, 1e5) == 0 {
		return strconv.FormatFloat(v/1e6, 'f', -1, 64) + "M"
	}
	if math.Abs(v-math.Round(v)) < 1e-9 {
		return strconv.FormatFloat(math.Round(v), 'f', -1, 64)
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}

// ---- SVG ----

type svgPainter struct{ b bytes.Buffer }

func rgb(c color.RGBA) string { return fmt.Sprintf("#%02x%02x%02x", c.R, c.G, c.B) }

func (s *svgPainter) rect(x, y, w, h float64, fill color.RGBA) {
	fmt.Fprintf(&s.b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"/>`+"\n", x, y, w, h, rgb(fill))
}

func (s *svgPainter) polyline(pts [][2]float64, c color.RGBA, width float64, dashed bool) {
	var sb strings.Builder
	for i, p := range pts {
		if i > 0 {
			sb.WriteByte(' ')
		}
		fmt.Fprintf(&sb, "%.1f,%.1f", p[0], p[1])
	}
	dash := ""
	if dashed {
		dash = ` stroke-dasharray="6,4"`
	}
	fmt.Fprintf(&s.b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="%.1f"%s/>`+"\n", sb.String(), rgb(c), width, dash)
}

func (s *svgPainter) marker(x, y float64, c color.RGBA) {
	fmt.Fprintf(&s.b, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>`+"\n", x, y, rgb(c))
}

func (s *svgPainter) text(x, y float64, t string, big bool, c color.RGBA, a anchor) {
	size := 12
	if big {
		size = 17
	}
	an := [...]string{"start", "middle", "end"}[a]
	fmt.Fprintf(&s.b, `<text x="%.1f" y="%.1f" font-family="sans-serif" font-size="%d" fill="%s" text-anchor="%s" dominant-baseline="middle">%s</text>`+"\n",
		x, y, size, rgb(c), an, html.EscapeString(t))
}

// SVG renders the figure as an SVG document.
func (f *Figure) SVG() []byte {
	s := &svgPainter{}
	h := f.height()
	fmt.Fprintf(&s.b, `<?xml version="1.0" encoding="UTF-8"?>`+"\n"+`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d">`+"\n", figW, h, figW, h)
	fmt.Fprintf(&s.b, "<title>%s</title>\n", html.EscapeString(f.Title))
	f.draw(s)
	s.b.WriteString("</svg>\n")
	return s.b.Bytes()
}

// ---- PNG ----

type rasterPainter struct{ img *image.RGBA }

func (r *rasterPainter) set(x, y int, c color.RGBA) {
	if image.Pt(x, y).In(r.img.Rect) {
		r.img.SetRGBA(x, y, c)
	}
}

func (r *rasterPainter) rect(x, y, w, h float64, fill color.RGBA) {
	for j := int(y); j < int(y+h); j++ {
		for i := int(x); i < int(x+w); i++ {
			r.set(i, j, fill)
		}
	}
}

// polyline stamps a square brush along each segment; dashes are 6 px on,
// 4 px off along the path.
func (r *rasterPainter) polyline(pts [][2]float64, c color.RGBA, width float64, dashed bool) {
	wi := max(1, int(math.Round(width)))
	lo, hi := -(wi-1)/2, wi/2
	along := 0.0
	stamp := func(x, y float64) {
		xi, yi := int(math.Round(x)), int(math.Round(y))
		for j := lo; j <= hi; j++ {
			for i := lo; i <= hi; i++ {
				r.set(xi+i, yi+j, c)
			}
		}
	}
	if len(pts) == 1 {
		stamp(pts[0][0], pts[0][1])
	}
	for k := 1; k < len(pts); k++ {
		x0, y0, x1, y1 := pts[k-1][0], pts[k-1][1], pts[k][0], pts[k][1]
		d := math.Hypot(x1-x0, y1-y0)
		steps := int(math.Ceil(d * 2))
		for s := 0; s <= steps; s++ {
			t := 0.0
			if steps > 0 {
				t = float64(s) / float64(steps)
			}
			pos := along + t*d
			if dashed && math.Mod(pos, 10) >= 6 {
				continue
			}
			stamp(x0+(x1-x0)*t, y0+(y1-y0)*t)
		}
		along += d
	}
}

func (r *rasterPainter) marker(x, y float64, c color.RGBA) {
	xi, yi := int(math.Round(x)), int(math.Round(y))
	for j := -3; j <= 3; j++ {
		for i := -3; i <= 3; i++ {
			if i*i+j*j <= 9 {
				r.set(xi+i, yi+j, c)
			}
		}
	}
}

func (r *rasterPainter) text(x, y float64, s string, big bool, c color.RGBA, a anchor) {
	scale := 1
	if big {
		scale = 2
	}
	runes := []rune(s)
	if big && len(runes)*(glyphW+1)*scale > figW-20 {
		scale = 1
	}
	adv := (glyphW + 1) * scale
	w := len(runes)*adv - scale
	x0 := int(math.Round(x))
	switch a {
	case middle:
		x0 -= w / 2
	case right:
		x0 -= w
	}
	y0 := int(math.Round(y)) - glyphH*scale/2
	for k, ch := range runes {
		g := glyph(ch)
		for row := 0; row < glyphH; row++ {
			for col := 0; col < glyphW; col++ {
				if g[row][col] != '#' {
					continue
				}
				for dy := 0; dy < scale; dy++ {
					for dx := 0; dx < scale; dx++ {
						r.set(x0+k*adv+col*scale+dx, y0+row*scale+dy, c)
					}
				}
			}
		}
	}
}

// PNG renders the figure as a PNG image.
func (f *Figure) PNG() ([]byte, error) {
	r := &rasterPainter{img: image.NewRGBA(image.Rect(0, 0, figW, f.height()))}
	f.draw(r)
	var b bytes.Buffer
	if err := png.Encode(&b, r.img); err != nil {
		return nil, fmt.Errorf("encode PNG: %w", err)
	}
	return b.Bytes(), nil
}

// writeFigure writes base.svg and base.png and returns both paths.
func writeFigure(f *Figure, base string) ([]string, error) {
	svgPath, pngPath := base+".svg", base+".png"
	if err := os.WriteFile(svgPath, f.SVG(), 0o644); err != nil {
		return nil, fmt.Errorf("write plot %s: %w", svgPath, err)
	}
	data, err := f.PNG()
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(pngPath, data, 0o644); err != nil {
		return nil, fmt.Errorf("write plot %s: %w", pngPath, err)
	}
	return []string{pngPath, svgPath}, nil
}
