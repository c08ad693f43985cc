package bench

import (
	"fmt"
	"image/color"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

var (
	hotColor     = color.RGBA{R: 0xd9, G: 0x6b, B: 0x2b, A: 0xff}
	spreadColor  = color.RGBA{R: 0x3b, G: 0x6e, B: 0xa8, A: 0xff}
	anomalyColor = color.RGBA{R: 0xc0, A: 0xff}
)

// writeChart draws one panel per flow: a bar per strategy and case (its
// median throughput through HTTP), with the audits' anomaly count (over
// every run) in red above every bar that has any. It writes path as SVG and the same chart as PNG beside it.
func writeChart(path string, results []cellResult) error {
	var panels [][]*plot.Plot
	for _, f := range strategyFlows() {
		p, err := flowPanel(f, results)
		if err != nil {
			return fmt.Errorf("chart %s: %w", f.name, err)
		}
		if p != nil {
			panels = append(panels, []*plot.Plot{p})
		}
	}
	if len(panels) == 0 {
		return nil
	}
	w, h := 26*vg.Centimeter, vg.Length(len(panels))*9*vg.Centimeter
	tiles := draw.Tiles{Rows: len(panels), Cols: 1, PadX: vg.Centimeter, PadY: vg.Centimeter,
		PadTop: vg.Centimeter / 2, PadBottom: vg.Centimeter / 2, PadLeft: vg.Centimeter / 2, PadRight: vg.Centimeter / 2}

	svg := vgsvg.New(w, h)
	drawPanels(panels, tiles, draw.New(svg))
	if err := writeTo(path, svg); err != nil {
		return err
	}
	img := vgimg.New(w, h)
	drawPanels(panels, tiles, draw.New(img))
	return writeTo(strings.TrimSuffix(path, ".svg")+".png", vgimg.PngCanvas{Canvas: img})
}

func drawPanels(panels [][]*plot.Plot, tiles draw.Tiles, dc draw.Canvas) {
	canvases := plot.Align(panels, tiles, dc)
	for i := range panels {
		panels[i][0].Draw(canvases[i][0])
	}
}

func writeTo(path string, c io.WriterTo) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("chart: %w", err)
	}
	if _, err := c.WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("chart: %w", err)
	}
	return f.Close()
}

// flowPanel is the grouped bar chart of one flow, or nil if it did not run.
func flowPanel(f flowSpec, results []cellResult) (*plot.Plot, error) {
	rates := map[string]plotter.Values{hot: make(plotter.Values, len(strategyNames)), spread: make(plotter.Values, len(strategyNames))}
	marks := map[string]plotter.XYLabels{}
	ran, top := false, 0.0
	for _, r := range results {
		if r.flow != f.name {
			continue
		}
		ran = true
		i := slices.Index(strategyNames, r.strategy)
		m := marks[r.shape]
		switch {
		case r.na != "":
			m.XYs, m.Labels = append(m.XYs, plotter.XY{X: float64(i)}), append(m.Labels, "n/a")
		case r.anomalies() > 0:
			rates[r.shape][i], top = r.rate(), max(top, r.rate())
			m.XYs, m.Labels = append(m.XYs, plotter.XY{X: float64(i), Y: r.rate()}), append(m.Labels, strconv.Itoa(r.anomalies()))
		default:
			rates[r.shape][i], top = r.rate(), max(top, r.rate())
		}
		marks[r.shape] = m
	}
	if !ran {
		return nil, nil
	}
	p := plot.New()
	p.Title.Text = f.title + " — through HTTP, median of the runs; red: anomalies the audits found"
	p.Y.Label.Text = f.unit
	p.Y.Min, p.Y.Max = 0, max(top, 1)*1.1 // room for the marks above the highest bar
	p.NominalX(strategyNames...)
	p.Legend.Top = true
	width := vg.Points(18)
	for _, c := range []struct {
		shape  string
		offset vg.Length
		color  color.Color
	}{{hot, -width / 2, hotColor}, {spread, width / 2, spreadColor}} {
		bars, err := plotter.NewBarChart(rates[c.shape], width)
		if err != nil {
			return nil, err
		}
		bars.Offset, bars.Color, bars.LineStyle.Width = c.offset, c.color, 0
		p.Add(bars)
		p.Legend.Add(c.shape, bars)
		if len(marks[c.shape].XYs) == 0 {
			continue
		}
		labels, err := plotter.NewLabels(marks[c.shape])
		if err != nil {
			return nil, err
		}
		labels.Offset = vg.Point{X: c.offset, Y: vg.Points(2)}
		for i := range labels.TextStyle {
			if marks[c.shape].Labels[i] != "n/a" {
				labels.TextStyle[i].Color = anomalyColor
			}
			labels.TextStyle[i].XAlign = draw.XCenter
		}
		p.Add(labels)
	}
	return p, nil
}
