package load

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"html/template"
	"image/color"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"github.com/shop-example/shop/harness/k6compat"
)

var (
	medColor    = color.RGBA{R: 0x3b, G: 0x6e, B: 0xa8, A: 0xff}
	p95Color    = color.RGBA{R: 0xd9, G: 0x6b, B: 0x2b, A: 0xff}
	failedColor = color.RGBA{R: 0xc0, A: 0xff}
)

// endpointRow is one line of the report's table.
type endpointRow struct {
	Name                              string
	Requests                          int
	PerSecond, Failed                 string
	Avg, Med, P95, P99, Max, Statuses string
}

// writeReport writes a static HTML page that needs nothing from the
// network: the summary, latency and requests per second over time (SVG
// drawn with gonum/plot, as the benchmarks' charts), and a table of each
// endpoint's requests.
func writeReport(w io.Writer, res *k6compat.Result) error {
	r := newRun(res)
	latency, rps, err := r.charts()
	if err != nil {
		return err
	}
	var summary bytes.Buffer
	writeSummary(&summary, res)
	return reportPage.Execute(w, map[string]any{
		"Start":     res.Start.Format("2006-01-02 15:04:05 MST"),
		"Duration":  clock(res.Duration),
		"Latency":   latency,
		"RPS":       rps,
		"Endpoints": r.endpoints(),
		"Summary":   summary.String(),
		"Passed":    exitCode(res) == nil,
	})
}

// perSecondBuckets groups a metric's samples by the second of the run
// they fell in.
func (r run) perSecondBuckets(name string) [][]k6compat.Sample {
	var out [][]k6compat.Sample
	for _, s := range r.byName[name].Samples {
		i := max(0, int(s.Time.Sub(r.Start).Seconds()))
		for len(out) <= i {
			out = append(out, nil)
		}
		out[i] = append(out[i], s)
	}
	return out
}

// charts draws the request duration (median and p95 of each second) and
// the requests per second (and failed ones), as SVG data URIs.
func (r run) charts() (latency, rps template.URL, err error) {
	var med, p95 plotter.XYs
	for i, b := range r.perSecondBuckets("http_req_duration") {
		if len(b) == 0 {
			continue
		}
		v := k6compat.Metric{Type: "trend", Samples: b}.Values(nil)
		x := float64(i) + 0.5
		med = append(med, plotter.XY{X: x, Y: v["med"]})
		p95 = append(p95, plotter.XY{X: x, Y: v["p(95)"]})
	}
	if latency, err = lineChart("Request duration, each second", "ms", []series{{"median", med, medColor}, {"p(95)", p95, p95Color}}); err != nil {
		return "", "", err
	}
	var all, failed plotter.XYs
	for i, b := range r.perSecondBuckets("http_req_failed") {
		bad := 0
		for _, s := range b {
			if s.Value != 0 {
				bad++
			}
		}
		all = append(all, plotter.XY{X: float64(i) + 0.5, Y: float64(len(b))})
		failed = append(failed, plotter.XY{X: float64(i) + 0.5, Y: float64(bad)})
	}
	if len(all) == 0 { // http_req_failed off: count http_reqs instead
		for i, b := range r.perSecondBuckets("http_reqs") {
			all = append(all, plotter.XY{X: float64(i) + 0.5, Y: float64(len(b))})
		}
	}
	rps, err = lineChart("Requests per second", "requests", []series{{"requests", all, medColor}, {"failed (http_req_failed)", failed, failedColor}})
	return latency, rps, err
}

type series struct {
	name  string
	xys   plotter.XYs
	color color.Color
}

func lineChart(title, unit string, ss []series) (template.URL, error) {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "seconds since the start"
	p.Y.Label.Text = unit
	p.Y.Min = 0
	p.Add(plotter.NewGrid())
	for _, s := range ss {
		if len(s.xys) == 0 {
			continue
		}
		l, err := plotter.NewLine(s.xys)
		if err != nil {
			return "", fmt.Errorf("chart %s: %w", title, err)
		}
		l.Color = s.color
		l.Width = vg.Points(1.5)
		p.Add(l)
		p.Legend.Add(s.name, l)
	}
	p.Legend.Top = true
	wt, err := p.WriterTo(24*vg.Centimeter, 9*vg.Centimeter, "svg")
	if err != nil {
		return "", fmt.Errorf("chart %s: %w", title, err)
	}
	var b bytes.Buffer
	if _, err := wt.WriteTo(&b); err != nil {
		return "", fmt.Errorf("chart %s: %w", title, err)
	}
	return template.URL("data:image/svg+xml;base64," + base64.StdEncoding.EncodeToString(b.Bytes())), nil
}

// endpoints are the request statistics of each endpoint, busiest first.
func (r run) endpoints() []endpointRow {
	durations := map[string][]k6compat.Sample{}
	statuses := map[string]map[string]int{}
	for _, s := range r.byName["http_req_duration"].Samples {
		e := endpointOf(s.Tags)
		durations[e] = append(durations[e], s)
		if statuses[e] == nil {
			statuses[e] = map[string]int{}
		}
		statuses[e][s.Tags["status"]]++
	}
	failed := map[string][2]int{} // failed, judged
	for _, s := range r.byName["http_req_failed"].Samples {
		e := endpointOf(s.Tags)
		f := failed[e]
		f[1]++
		if s.Value != 0 {
			f[0]++
		}
		failed[e] = f
	}
	var rows []endpointRow
	for e, ss := range durations {
		v := k6compat.Metric{Type: "trend", IsTime: true, Samples: ss}.Values(nil)
		var st []string
		for _, code := range slices.Sorted(maps.Keys(statuses[e])) {
			st = append(st, code+" ×"+strconv.Itoa(statuses[e][code]))
		}
		f := failed[e]
		failedText := "–"
		if f[1] > 0 {
			failedText = fmt.Sprintf("%d (%s)", f[0], pct(float64(f[0])/float64(f[1])))
		}
		rows = append(rows, endpointRow{
			Name: e, Requests: len(ss), PerSecond: num(r.perSecond(float64(len(ss)))), Failed: failedText,
			Avg: ms(v["avg"]), Med: ms(v["med"]), P95: ms(v["p(95)"]), P99: ms(v["p(99)"]), Max: ms(v["max"]),
			Statuses: strings.Join(st, ", "),
		})
	}
	slices.SortFunc(rows, func(a, b endpointRow) int {
		if a.Requests != b.Requests {
			return b.Requests - a.Requests
		}
		return strings.Compare(a.Name, b.Name)
	})
	return rows
}

var reportPage = template.Must(template.New("report").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<title>shop load: {{if .Passed}}passed{{else}}FAILED{{end}}, {{.Start}}</title>
<style>
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 1100px; padding: 0 1em; color: #222; }
h1 { font-size: 1.4em; } h2 { font-size: 1.1em; margin-top: 2em; }
.ok { color: #2a7a2a; } .bad { color: #c00000; }
table { border-collapse: collapse; width: 100%; font-variant-numeric: tabular-nums; }
th, td { padding: .3em .6em; border-bottom: 1px solid #ddd; text-align: right; }
th:first-child, td:first-child, td.statuses { text-align: left; }
img { max-width: 100%; }
pre { background: #f6f6f6; padding: 1em; overflow-x: auto; font-size: 12px; }
</style></head><body>
<h1>shop load — <span class="{{if .Passed}}ok{{else}}bad{{end}}">{{if .Passed}}every threshold held{{else}}the run failed{{end}}</span></h1>
<p>Started {{.Start}}, ran {{.Duration}} (setup and teardown included).</p>
<h2>Latency over time</h2>
<img alt="request duration over time" src="{{.Latency}}">
<h2>Requests per second</h2>
<img alt="requests per second over time" src="{{.RPS}}">
<h2>Endpoints</h2>
<table>
<tr><th>endpoint</th><th>requests</th><th>req/s</th><th>failed</th><th>avg</th><th>med</th><th>p(95)</th><th>p(99)</th><th>max</th><th>statuses</th></tr>
{{range .Endpoints}}<tr><td>{{.Name}}</td><td>{{.Requests}}</td><td>{{.PerSecond}}</td><td>{{.Failed}}</td><td>{{.Avg}}</td><td>{{.Med}}</td><td>{{.P95}}</td><td>{{.P99}}</td><td>{{.Max}}</td><td class="statuses">{{.Statuses}}</td></tr>
{{end}}</table>
<h2>Summary</h2>
<pre>{{.Summary}}</pre>
</body></html>
`))
