package load

import (
	"bytes"
	"math"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shop-example/shop/harness/k6compat"
)

// reportRun is a run of 12 s made up for the report: VUs ramping 0, 5,
// 10, then 0; iterations and requests each second; latencies around 40
// to 230 ms; a p(95)<500 threshold that held and an avg<100 that did not.
func reportRun() *k6compat.Result {
	start := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	at := func(sec float64) time.Time { return start.Add(time.Duration(sec * float64(time.Second))) }
	var vus, iters, durations, failed, reqs []k6compat.Sample
	for i, n := range []float64{5, 10, 0} {
		vus = append(vus, k6compat.Sample{Time: at(float64(4 * i)), Value: n})
	}
	for sec := 0; sec < 12; sec++ {
		for k := 0; k < 3+sec%4; k++ {
			t := at(float64(sec) + 0.1*float64(k))
			iters = append(iters, k6compat.Sample{Time: t, Value: 1})
			ms := 40 + float64(15*sec+7*k)
			tags := map[string]string{"endpoint": "orders.create", "status": "201"}
			durations = append(durations, k6compat.Sample{Time: t, Value: ms, Tags: tags})
			failed = append(failed, k6compat.Sample{Time: t, Value: float64(k % 3 / 2), Tags: tags})
			reqs = append(reqs, k6compat.Sample{Time: t, Value: 1, Tags: tags})
		}
	}
	return &k6compat.Result{
		Start: start, Duration: 12 * time.Second,
		Metrics: []k6compat.Metric{
			{Name: "vus", Type: "gauge", Samples: vus},
			{Name: "iterations", Type: "counter", Samples: iters},
			{Name: "http_req_duration", Type: "trend", IsTime: true, Samples: durations},
			{Name: "http_req_failed", Type: "rate", Samples: failed},
			{Name: "http_reqs", Type: "counter", Samples: reqs},
		},
		Thresholds: []k6compat.ThresholdResult{
			{Metric: "http_req_duration", Expr: "p(95)<500", Name: "http_req_duration", Value: 220, OK: true},
			{Metric: "http_req_duration", Expr: "avg<100", Name: "http_req_duration", Value: 130, OK: false},
			{Metric: "http_req_failed", Expr: "rate<0.5", Name: "http_req_failed", Value: 0.3, OK: true},
		},
	}
}

var (
	svgElement   = regexp.MustCompile(`(?s)<svg .*?</svg>`)
	svgFontStyle = regexp.MustCompile(`font-family:([^;]+);`)
	// A tick label: text drawn in the axes' 10-point font, a number.
	tickLabel = regexp.MustCompile(`<text[^>]*font-size:10(?:\.0+)?px[^>]*>([-0-9.]+)</text>`)
	legend    = regexp.MustCompile(`(?s)<ul class="legend">(.*?)</ul>`)
)

// TestReport_Charts: the HTML report has what a k6 user reads in k6's
// web dashboard report: VUs and iterations over time, latency over time
// with each duration threshold drawn on it, requests per second; each
// chart in the page itself, its text in the page's family of fonts, its
// ticks round numbers on axes that start at zero and end on a tick, and
// its legend in the page above it, not over the data.
func TestReport_Charts(t *testing.T) {
	var b bytes.Buffer
	if err := writeReport(&b, reportRun()); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	if dir := os.Getenv("SHOP_REPORT_DIR"); dir != "" {
		if err := os.WriteFile(dir+"/report.html", b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if strings.Contains(page, "http://") || strings.Contains(page, "https://") {
		t.Error("the report names something on the network: it must work offline")
	}
	if strings.Contains(page, "data:image") || strings.Contains(page, "<img") {
		t.Error("a chart is an image: its text cannot take the page's font")
	}
	charts := svgElement.FindAllString(page, -1)
	if len(charts) != 3 {
		t.Fatalf("%d charts in the page, want 3 (VUs and iterations, latency, requests)", len(charts))
	}
	for i, title := range []string{"Virtual users and iterations", "Request duration, each second", "Requests per second"} {
		if !strings.Contains(charts[i], `aria-label="`+title+`"`) {
			t.Errorf("chart %d is not %q", i+1, title)
		}
	}

	// One family of fonts, the page's.
	m := regexp.MustCompile(`body \{ font: 14px/1\.45 ([^;]+);`).FindStringSubmatch(page)
	if m == nil {
		t.Fatal("the page sets no font family")
	}
	pageFamily := strings.ReplaceAll(m[1], `"`, "'")
	for i, c := range charts {
		fams := svgFontStyle.FindAllStringSubmatch(c, -1)
		if len(fams) == 0 {
			t.Errorf("chart %d has no text", i+1)
		}
		for _, f := range fams {
			if f[1] != pageFamily {
				t.Errorf("chart %d sets text in %q, the page in %q", i+1, f[1], pageFamily)
				break
			}
		}
	}

	// Round ticks: each axis's labels are multiples of one step of 1, 2
	// or 5 times a power of ten, from zero.
	for i, c := range charts {
		labels := tickLabel.FindAllStringSubmatch(c, -1)
		if len(labels) < 6 {
			t.Errorf("chart %d: %d tick labels found, want both axes' (the scan is broken?)", i+1, len(labels))
			continue
		}
		for _, l := range labels {
			v, err := strconv.ParseFloat(l[1], 64)
			if err != nil {
				t.Errorf("chart %d: tick %q is not a number", i+1, l[1])
				continue
			}
			if v != 0 && !round(v) {
				t.Errorf("chart %d: tick %s is not a round number", i+1, l[1])
			}
		}
	}

	// The legends: in the page, one above each chart, naming the series
	// and each duration threshold with what became of it.
	legends := legend.FindAllStringSubmatch(page, -1)
	if len(legends) != 3 {
		t.Fatalf("%d legends in the page, want one above each chart", len(legends))
	}
	for i, want := range [][]string{
		{"VUs", "iterations per second"},
		{"median", "p(95)", "threshold http_req_duration p(95)&lt;500: held", "threshold http_req_duration avg&lt;100: crossed"},
		{"requests", "failed (http_req_failed)"},
	} {
		for _, w := range want {
			if !strings.Contains(legends[i][1], w) {
				t.Errorf("legend %d lacks %q: %s", i+1, w, legends[i][1])
			}
		}
	}
	if strings.Contains(legends[1][1], "rate&lt;0.5") {
		t.Error("a threshold on a rate is drawn on the latency chart")
	}
	// gonum's own legend is not drawn inside the charts.
	for i, c := range charts {
		if strings.Contains(c, ">median<") || strings.Contains(c, ">iterations per second<") || strings.Contains(c, ">failed (http_req_failed)<") {
			t.Errorf("chart %d draws a legend over its data", i+1)
		}
	}
	// Each threshold is a dashed line of its own.
	if n := strings.Count(charts[1], "stroke-dasharray:5"); n != 2 {
		t.Errorf("the latency chart has %d dashed lines, want the 2 duration thresholds", n)
	}
}

// round reports whether v is a multiple of 1, 2 or 5 times a power of ten
// with one significant digit in the step.
func round(v float64) bool {
	v = math.Abs(v)
	for _, m := range []float64{1, 2, 5} {
		for e := -3.0; e <= 6; e++ {
			step := m * math.Pow(10, e)
			if q := v / step; math.Abs(q-math.Round(q)) < 1e-9 && q <= 10 {
				return true
			}
		}
	}
	return false
}
