package load

import (
	"bytes"
	"fmt"
	"html/template"
	"image/color"
	"math"
	"regexp"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

// The charts' text is Liberation Sans, which gonum/plot measures its
// labels with; the report's page sets its text in the same family (or in
// Arimo or Arial, which have its metrics), so the charts and the page
// read as one.
var (
	chartFont   = font.Font{Typeface: "Liberation", Variant: "Sans"}
	chartFamily = `"Liberation Sans", Arimo, Arial, Helvetica, sans-serif`
)

// series is one line of a chart, named in the chart's legend; dashed for
// a threshold.
type series struct {
	name   string
	xys    plotter.XYs
	color  color.Color
	dashed bool
	steps  bool // drawn as steps, for a gauge
}

// chart is an SVG drawn by gonum/plot, to be put in the page as it is
// (not as an image: it takes the page's font), and its legend, drawn by
// the page above it, clear of the data.
type chart struct {
	SVG    template.HTML
	Legend []legendItem
}

type legendItem struct {
	Name   string
	Color  string // CSS
	Dashed bool
}

// lineChart draws ss, titled title for screen readers, on one axis that starts at zero and ends at a round
// tick above the highest point, with round ticks on both axes.
func lineChart(title, xLabel, yLabel string, ss []series) (chart, error) {
	p := plot.New()
	for _, f := range []*font.Font{&p.Title.TextStyle.Font, &p.X.Label.TextStyle.Font, &p.Y.Label.TextStyle.Font,
		&p.X.Tick.Label.Font, &p.Y.Tick.Label.Font, &p.Legend.TextStyle.Font} {
		f.Typeface, f.Variant = chartFont.Typeface, chartFont.Variant
	}
	// The page's heading names the chart: no title inside it.
	p.X.Label.Text = xLabel
	p.Y.Label.Text = yLabel
	p.Add(plotter.NewGrid())
	var c chart
	xMax, yMax := 1.0, 0.0
	for _, s := range ss {
		if len(s.xys) == 0 {
			continue
		}
		l, err := plotter.NewLine(s.xys)
		if err != nil {
			return chart{}, fmt.Errorf("chart %s: %w", title, err)
		}
		l.Color = s.color
		l.Width = vg.Points(1.5)
		if s.dashed {
			l.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
		}
		if s.steps {
			l.StepStyle = plotter.PostStep
		}
		p.Add(l)
		for _, xy := range s.xys {
			xMax, yMax = math.Max(xMax, xy.X), math.Max(yMax, xy.Y)
		}
		c.Legend = append(c.Legend, legendItem{Name: s.name, Color: cssColor(s.color), Dashed: s.dashed})
	}
	p.X.Min, p.Y.Min = 0, 0
	xStep, yStep := roundStep(xMax), roundStep(yMax)
	p.X.Max = xStep * math.Ceil(xMax/xStep)
	p.Y.Max = yStep * math.Max(1, math.Ceil(yMax/yStep))
	p.X.Tick.Marker = roundTicks(xStep)
	p.Y.Tick.Marker = roundTicks(yStep)
	canvas := vgsvg.New(24*vg.Centimeter, 9*vg.Centimeter)
	p.Draw(draw.New(canvas))
	var b bytes.Buffer
	if _, err := canvas.WriteTo(&b); err != nil {
		return chart{}, fmt.Errorf("chart %s: %w", title, err)
	}
	c.SVG = template.HTML(inlineSVG(b.String(), title))
	return c, nil
}

// roundStep is the step between ticks for an axis from 0 to max: 1, 2 or
// 5 times a power of ten, so that there are four to ten of them.
func roundStep(max float64) float64 {
	if max <= 0 {
		return 1
	}
	pow := math.Pow(10, math.Floor(math.Log10(max)))
	for _, m := range []float64{0.1, 0.2, 0.5, 1, 2, 5, 10} {
		if step := m * pow; max/step <= 8 {
			return step
		}
	}
	return 10 * pow
}

// roundTicks marks every multiple of step, labelled without trailing
// zeros.
func roundTicks(step float64) plot.Ticker {
	return plot.TickerFunc(func(lo, hi float64) []plot.Tick {
		var ts []plot.Tick
		for v := math.Ceil(lo/step) * step; v <= hi+step/1e6; v += step {
			ts = append(ts, plot.Tick{Value: v, Label: strconv.FormatFloat(math.Round(v/step)*step, 'f', -1, 64)})
		}
		return ts
	})
}

// inlineSVG makes gonum's SVG document an element of the page: without
// the XML prolog, scaled to the page's width, named for screen readers,
// and with the page's family of fonts.
func inlineSVG(doc, title string) string {
	if i := strings.Index(doc, "<svg"); i > 0 {
		doc = doc[i:]
	}
	// In HTML an svg element is SVG by itself: its namespaces, which are
	// URLs, go (the page must name nothing on the network).
	doc = svgNamespace.ReplaceAllString(doc, "")
	doc = strings.Replace(doc, "<svg", `<svg role="img" aria-label="`+template.HTMLEscapeString(title)+`" class="chart"`, 1)
	return strings.ReplaceAll(doc, "font-family:Liberation Sans;", "font-family:"+strings.ReplaceAll(chartFamily, `"`, "'")+";")
}

var svgNamespace = regexp.MustCompile(`\s+xmlns(:\w+)?="[^"]*"`)

func cssColor(c color.Color) string {
	r, g, b, _ := c.RGBA()
	return fmt.Sprintf("#%02x%02x%02x", r>>8, g>>8, b>>8)
}
