package load

import (
	"bytes"
	"fmt"
	"html/template"
	"image/color"
	"io"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot/plotter"

	"github.com/shop-example/shop/harness/k6compat"
)

var (
	medColor       = color.RGBA{R: 0x3b, G: 0x6e, B: 0xa8, A: 0xff}
	p95Color       = color.RGBA{R: 0xd9, G: 0x6b, B: 0x2b, A: 0xff}
	failedColor    = color.RGBA{R: 0xc0, A: 0xff}
	thresholdColor = color.RGBA{R: 0x6b, G: 0x21, B: 0xa8, A: 0xff}
	vusColor       = color.RGBA{R: 0x2a, G: 0x7a, B: 0x2a, A: 0xff}
)

// endpointRow is one line of the report's table.
type endpointRow struct {
	Name                              string
	Requests                          int
	PerSecond, Failed                 string
	Avg, Med, P95, P99, Max, Statuses string
}

// writeReport writes a static HTML page that needs nothing from the
// network, laid out as a k6 user expects its web dashboard's report: the
// summary, virtual users and iterations over time, latency over time with
// the duration thresholds drawn on it, requests per second (SVG drawn with
// gonum/plot, as the benchmarks' charts), and a table of each endpoint's
// requests.
func writeReport(w io.Writer, res *k6compat.Result) error {
	r := newRun(res)
	vus, err := r.vusChart()
	if err != nil {
		return err
	}
	latency, rps, err := r.charts()
	if err != nil {
		return err
	}
	var summary bytes.Buffer
	writeSummary(&summary, res)
	return reportPage.Execute(w, map[string]any{
		"Start":     res.Start.Format("2006-01-02 15:04:05 MST"),
		"Duration":  clock(res.Duration),
		"Font":      template.CSS(chartFamily),
		"VUs":       vus,
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

// vusChart draws the virtual users running (k6's vus gauge, as steps) and
// the iterations completed each second.
func (r run) vusChart() (chart, error) {
	var vus plotter.XYs
	for _, s := range r.byName["vus"].Samples {
		x := max(0, s.Time.Sub(r.Start).Seconds())
		vus = append(vus, plotter.XY{X: x, Y: s.Value})
	}
	if len(vus) > 0 {
		vus = append(plotter.XYs{{X: 0, Y: 0}}, vus...)
		vus = append(vus, plotter.XY{X: r.Duration.Seconds(), Y: vus[len(vus)-1].Y})
	}
	var iters plotter.XYs
	for i, b := range r.perSecondBuckets("iterations") {
		iters = append(iters, plotter.XY{X: float64(i) + 0.5, Y: float64(len(b))})
	}
	return lineChart("Virtual users and iterations", "seconds since the start", "VUs; iterations per second",
		[]series{{name: "VUs", xys: vus, color: vusColor, steps: true}, {name: "iterations per second", xys: iters, color: medColor}})
}

// durationThreshold matches a threshold on a trend in milliseconds that
// can be drawn as a line: "p(95)<500", "avg <= 200".
var durationThreshold = regexp.MustCompile(`^\s*(avg|min|max|med|p\([0-9.]+\))\s*(<=|<|>=|>|==)\s*([0-9.]+)\s*$`)

// charts draws the request duration (median and p95 of each second, with
// the thresholds on http_req_duration as dashed lines) and the requests
// per second (and failed ones).
func (r run) charts() (latency, rps chart, err error) {
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
	lat := []series{{name: "median", xys: med, color: medColor}, {name: "p(95)", xys: p95, color: p95Color}}
	for _, th := range r.Thresholds {
		m := durationThreshold.FindStringSubmatch(th.Expr)
		if th.Name != "http_req_duration" || m == nil {
			continue
		}
		limit, _ := strconv.ParseFloat(m[3], 64)
		state, c := "held", thresholdColor
		if !th.OK {
			state, c = "crossed", failedColor
		}
		lat = append(lat, series{name: fmt.Sprintf("threshold %s %s: %s", th.Metric, th.Expr, state),
			xys: plotter.XYs{{X: 0, Y: limit}, {X: r.Duration.Seconds(), Y: limit}}, color: c, dashed: true})
	}
	if latency, err = lineChart("Request duration, each second", "seconds since the start", "ms", lat); err != nil {
		return chart{}, chart{}, err
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
	rps, err = lineChart("Requests per second", "seconds since the start", "requests",
		[]series{{name: "requests", xys: all, color: medColor}, {name: "failed (http_req_failed)", xys: failed, color: failedColor}})
	return latency, rps, err
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
body { font: 14px/1.45 {{.Font}}; margin: 2em auto; max-width: 1100px; padding: 0 1em; color: #222; }
h1 { font-size: 1.4em; } h2 { font-size: 1.1em; margin-top: 2em; }
.ok { color: #2a7a2a; } .bad { color: #c00000; }
table { border-collapse: collapse; width: 100%; font-variant-numeric: tabular-nums; }
th, td { padding: .3em .6em; border-bottom: 1px solid #ddd; text-align: right; }
th:first-child, td:first-child, td.statuses { text-align: left; }
svg.chart { display: block; width: 100%; height: auto; overflow: visible; }
ul.legend { list-style: none; display: flex; flex-wrap: wrap; gap: .2em 1.5em; padding: 0; margin: .5em 0; }
ul.legend li { display: inline-flex; align-items: center; gap: .4em; }
ul.legend .key { display: inline-block; width: 1.8em; border-top: 2px solid; }
ul.legend .key.dashed { border-top-style: dashed; }
pre { background: #f6f6f6; padding: 1em; overflow-x: auto; font-size: 12px; }
</style></head><body>
<h1>shop load — <span class="{{if .Passed}}ok{{else}}bad{{end}}">{{if .Passed}}every threshold held{{else}}the run failed{{end}}</span></h1>
<p>Started {{.Start}}, ran {{.Duration}} (setup and teardown included).</p>
{{define "chart"}}<ul class="legend">{{range .Legend}}<li><span class="key{{if .Dashed}} dashed{{end}}" style="border-color: {{.Color}}"></span>{{.Name}}</li>{{end}}</ul>
{{.SVG}}{{end}}
<h2>Virtual users and iterations</h2>
{{template "chart" .VUs}}
<h2>Latency over time</h2>
{{template "chart" .Latency}}
<h2>Requests per second</h2>
{{template "chart" .RPS}}
<h2>Endpoints</h2>
<table>
<tr><th>endpoint</th><th>requests</th><th>req/s</th><th>failed</th><th>avg</th><th>med</th><th>p(95)</th><th>p(99)</th><th>max</th><th>statuses</th></tr>
{{range .Endpoints}}<tr><td>{{.Name}}</td><td>{{.Requests}}</td><td>{{.PerSecond}}</td><td>{{.Failed}}</td><td>{{.Avg}}</td><td>{{.Med}}</td><td>{{.P95}}</td><td>{{.P99}}</td><td>{{.Max}}</td><td class="statuses">{{.Statuses}}</td></tr>
{{end}}</table>
<h2>Summary</h2>
<pre>{{.Summary}}</pre>
</body></html>
`))
