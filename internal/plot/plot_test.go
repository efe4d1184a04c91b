package plot

import (
	"bytes"
	"encoding/xml"
	"errors"
	"image/color"
	"image/png"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gonum.org/v1/plot/vg"
)

func testFigure() *Figure {
	return &Figure{
		Title: "test → figure", XLabel: "time (s)", XFromZero: true,
		Notes: []string{"a note: 1.5 ms ≥ 0, α × 2"},
		Panels: []Panel{
			{Title: "rate (pkt/s)", YMax: 4, Series: []Series{
				{Name: "a", Color: Green, X: []float64{0.5, 1, 2, 3, 4}, Y: []float64{1, 3, math.NaN(), 2, 5}},
				{Name: "b, dashed", Color: Red, Dashed: true, X: []float64{1, 3}, Y: []float64{2, 2}},
				{Name: "lone point", Color: Blue, X: []float64{1, 2, 3}, Y: []float64{math.NaN(), 1, math.NaN()}},
			}},
			{Title: "bars", Segments: true, XLabel: "own axis", Series: []Series{{Name: "s", Color: Blue, X: []float64{0, 2, 1, 3}, Y: []float64{1, 1, 2, 2}}}},
			{Title: "points", YLabel: "laxity (ms)", Series: []Series{
				{Name: "p", Marks: Points, Color: Cycle(0), X: []float64{1, 2}, Y: []float64{-0.5, 1}},
				{Name: "lp", Marks: LinePoints, Color: Cycle(9), X: []float64{1, 2}, Y: []float64{0.5, 2}},
			}},
			{Title: "empty"},
		},
	}
}

// TestSave draws a figure with every kind of series, gaps, a negative
// value and an empty panel, and checks both files: the PNG decodes at the
// figure's size, the SVG parses and has lines and text in the house font.
func TestSave(t *testing.T) {
	f := testFigure()
	base := filepath.Join(t.TempDir(), "fig")
	files, err := Save(f, base)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 2 || files[0] != base+".png" || files[1] != base+".svg" {
		t.Fatalf("Save returned %v, want %s.png and %s.svg", files, base, base)
	}
	data, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("%s: %v", files[0], err)
	}
	w, h := f.size()
	wantW, wantH := int(math.Ceil(w.Dots(DPI))), int(math.Ceil(h.Dots(DPI)))
	if b := img.Bounds(); abs(b.Dx()-wantW) > 1 || abs(b.Dy()-wantH) > 1 {
		t.Errorf("PNG is %dx%d, want %dx%d", b.Dx(), b.Dy(), wantW, wantH)
	}
	// The PNG is not blank: the lines are in the image.
	greens := 0
	for y := img.Bounds().Min.Y; y < img.Bounds().Max.Y; y++ {
		for x := img.Bounds().Min.X; x < img.Bounds().Max.X; x++ {
			r, g, b, _ := img.At(x, y).RGBA()
			if r>>8 < 40 && g>>8 > 100 && b>>8 < 100 {
				greens++
			}
		}
	}
	if greens < 50 {
		t.Errorf("PNG has %d green pixels; the green series is missing", greens)
	}

	data, err = os.ReadFile(files[1])
	if err != nil {
		t.Fatal(err)
	}
	paths, texts := 0, map[string]bool{}
	d := xml.NewDecoder(bytes.NewReader(data))
	inText := false
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("SVG is not XML: %v", err)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			switch tok.Name.Local {
			case "path":
				paths++
			case "text":
				inText = true
				for _, a := range tok.Attr {
					if a.Name.Local == "style" && !strings.Contains(a.Value, "Liberation Sans") {
						t.Errorf("SVG text style %q: not the house font", a.Value)
					}
				}
			}
		case xml.CharData:
			if inText {
				texts[string(tok)] = true
			}
		case xml.EndElement:
			inText = false
		}
	}
	if paths < 10 {
		t.Errorf("SVG has %d paths; want the lines", paths)
	}
	for _, s := range []string{"test → figure", "rate (pkt/s)", "time (s)", "own axis", "laxity (ms)", "b, dashed", "a note: 1.5 ms ≥ 0, α × 2"} {
		if !texts[s] {
			t.Errorf("SVG lacks the text %q", s)
		}
	}
}

func TestRanges(t *testing.T) {
	f := testFigure()
	// Shared x axis: panels 0, 2 and 3 (no own label) from 0 (XFromZero)
	// to the largest x among them.
	if lo, hi := f.xRange(&f.Panels[0]); lo != 0 || hi != 4 {
		t.Errorf("shared x range = %v..%v, want 0..4", lo, hi)
	}
	if lo, hi := f.xRange(&f.Panels[1]); lo != 0 || hi != 3 {
		t.Errorf("own x range = %v..%v, want 0..3", lo, hi)
	}
	f.XFromZero = false
	if lo, hi := f.xRange(&f.Panels[0]); lo != 0.5 || hi != 4 {
		t.Errorf("shared x range without XFromZero = %v..%v, want 0.5..4", lo, hi)
	}
	if lo, hi := yRange(&f.Panels[0]); lo != 0 || hi != 4 {
		t.Errorf("fixed y range = %v..%v, want 0..4", lo, hi)
	}
	if lo, hi := yRange(&f.Panels[2]); lo != -0.5 || hi <= 2 {
		t.Errorf("y range with a negative value = %v..%v, want -0.5..>2", lo, hi)
	}
	if lo, hi := yRange(&f.Panels[3]); lo != 0 || hi <= 0 {
		t.Errorf("empty panel's y range = %v..%v", lo, hi)
	}
}

func TestSizes(t *testing.T) {
	f := &Figure{Title: "one", Panels: []Panel{{}}, Width: 5 * vg.Inch, PanelHeight: 3 * vg.Inch}
	w, h := f.size()
	if w != 5*vg.Inch || h <= 3*vg.Inch || h > 4*vg.Inch {
		t.Errorf("size = %v x %v", w, h)
	}
	if _, err := f.PNG(); err != nil {
		t.Fatal(err)
	}
}

func abs(i int) int {
	if i < 0 {
		return -i
	}
	return i
}

func TestTicks(t *testing.T) {
	for _, c := range []struct {
		n      ticks
		lo, hi float64
		want   string
	}{
		{5, 0, 97, "0 20 40 60 80"},
		{10, 0, 21.3, "0 2 4 6 8 10 12 14 16 18 20"},
		{5, -0.5, 2.2, "-0.5 0.0 0.5 1.0 1.5 2.0"},
		{5, 1, 3, "1.0 1.5 2.0 2.5 3.0"},
		{5, 0, 1.25, "0.0 0.2 0.4 0.6 0.8 1.0 1.2"},
		{10, 0, 6000, "0 500 1000 1500 2000 2500 3000 3500 4000 4500 5000 5500 6000"},
		{5, 0, 1e6, "0 200000 400000 600000 800000 1000000"},
	} {
		var got []string
		for _, tk := range c.n.Ticks(c.lo, c.hi) {
			if tk.Label != "" {
				got = append(got, tk.Label)
			}
		}
		if g := strings.Join(got, " "); g != c.want {
			t.Errorf("ticks(%d).Ticks(%v, %v) = %q, want %q", c.n, c.lo, c.hi, g, c.want)
		}
	}
}

func TestNotLowerCase(t *testing.T) {
	f := &Figure{Title: "cross traffic (Mbit/s), 5 KB/s, 64 kbit/s, 3 MB", Notes: []string{"Pareto source"},
		Panels: []Panel{{Title: "ok", YLabel: "laxity (ms)", Series: []Series{{Name: "with hostqos (voice → EF)"}, {Name: "ch0 (be)"}}}}}
	got := f.NotLowerCase()
	want := []string{"Pareto source", "with hostqos (voice → EF)"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("NotLowerCase() = %q, want %q", got, want)
	}
	if got, want := Lower("Fig. 8: Rmax (best effort 3000 KB/s, 10 Mbit/s)"), "fig. 8: rmax (best effort 3000 KB/s, 10 Mbit/s)"; got != want {
		t.Errorf("Lower = %q, want %q", got, want)
	}
	if bad := testFigure().NotLowerCase(); len(bad) > 0 {
		t.Errorf("test figure: %q", bad)
	}
}

// TestCheckFile: a figure written by Save passes CheckFile; a truncated PNG,
// an SVG without lines and another file type do not.
func TestCheckFile(t *testing.T) {
	dir := t.TempDir()
	f := &Figure{Title: "t", Panels: []Panel{{Title: "p", Series: []Series{{Name: "a", X: []float64{0, 1}, Y: []float64{0, 1}, Color: Green}}}}}
	files, err := Save(f, filepath.Join(dir, "fig"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range files {
		if _, err := CheckFile(p); err != nil {
			t.Error(err)
		}
	}
	bad := map[string]string{"cut.png": "\x89PNG\r\n", "empty.svg": `<svg xmlns="http://www.w3.org/2000/svg"></svg>`, "x.txt": "x"}
	for name, content := range bad {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := CheckFile(p); err == nil {
			t.Errorf("%s passed", name)
		}
	}
}

// TestClockTicks: an axis of times is marked at round times of day in the
// figure's location, labelled as a clock shows them — minutes for a range
// of hours, seconds for a range of a minute, dates beyond some days.
func TestClockTicks(t *testing.T) {
	loc := time.FixedZone("x", 90*60) // an offset that is not whole hours
	at := func(s string) float64 {
		v, err := time.ParseInLocation("2006-01-02 15:04:05", s, loc)
		if err != nil {
			t.Fatal(err)
		}
		return float64(v.Unix())
	}
	for _, c := range []struct {
		from, to string
		want     []string
	}{
		{"2026-01-02 14:07:00", "2026-01-02 16:07:00", []string{"14:15", "14:30", "14:45", "15:00", "15:15", "15:30", "15:45", "16:00"}},
		{"2026-01-02 14:07:03", "2026-01-02 14:07:48", []string{"14:07:05", "14:07:10", "14:07:15", "14:07:20", "14:07:25", "14:07:30", "14:07:35", "14:07:40", "14:07:45"}},
		{"2026-01-02 00:00:00", "2026-01-20 00:00:00", []string{"2026-01-03", "2026-01-05", "2026-01-07", "2026-01-09", "2026-01-11", "2026-01-13", "2026-01-15", "2026-01-17", "2026-01-19"}},
	} {
		var got []string
		for _, tk := range (clockTicks{loc: loc, n: 8}).Ticks(at(c.from), at(c.to)) {
			if tk.Label != "" {
				got = append(got, tk.Label)
			}
		}
		if strings.Join(got, " ") != strings.Join(c.want, " ") {
			t.Errorf("%s … %s: ticks %q, want %q", c.from, c.to, got, c.want)
		}
	}
}

// TestBand: a band series fills the area between its Lo and Y in a
// translucent shade of its colour, under the lines, and counts in the y
// range.
func TestBand(t *testing.T) {
	f := &Figure{XClock: time.UTC, Panels: []Panel{{Title: "rate", Series: []Series{
		{Name: "mean", Color: Green, X: []float64{0, 60, 120}, Y: []float64{1, 1, 1}},
		{Name: "up to the busiest second", Color: Green, X: []float64{0, 60, 120}, Lo: []float64{1, 1, 1}, Y: []float64{3, 5, math.NaN()}},
	}}}}
	data, err := f.PNG()
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	// The band's shade is green over white: light, greener than red and
	// blue.
	shaded := 0
	for y := img.Bounds().Min.Y; y < img.Bounds().Max.Y; y++ {
		for x := img.Bounds().Min.X; x < img.Bounds().Max.X; x++ {
			c := color.RGBAModel.Convert(img.At(x, y)).(color.RGBA)
			if c.G > 150 && c.G < 250 && int(c.G) > int(c.R)+30 && int(c.G) > int(c.B)+30 {
				shaded++
			}
		}
	}
	if shaded < 500 {
		t.Errorf("%d pixels of the band's shade; the band is not filled", shaded)
	}
	if _, _, _, hi := ranges(f.Panels); hi != 5 {
		t.Errorf("y range up to %v, want the band's top, 5", hi)
	}
}
