package load

import (
	"bufio"
	"cmp"
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/shop-example/shop/harness/k6compat"
)

// exportGroup is a group of k6's --summary-export: its checks and the
// groups inside it, each named by its path ("::outer::inner") and an id,
// the MD5 of the path.
type exportGroup struct {
	Name   string                  `json:"name"`
	Path   string                  `json:"path"`
	ID     string                  `json:"id"`
	Groups map[string]*exportGroup `json:"groups"`
	Checks map[string]exportCheck  `json:"checks"`
}

type exportCheck struct {
	Name   string `json:"name"`
	Path   string `json:"path"`
	ID     string `json:"id"`
	Passes int    `json:"passes"`
	Fails  int    `json:"fails"`
}

func newExportGroup(name, path string) *exportGroup {
	return &exportGroup{Name: name, Path: path, ID: pathID(path), Groups: map[string]*exportGroup{}, Checks: map[string]exportCheck{}}
}

func pathID(path string) string {
	sum := md5.Sum([]byte(path))
	return hex.EncodeToString(sum[:])
}

// exportedValues are the values --summary-export gives each type.
var exportedValues = map[string][]string{
	"counter": {"count", "rate"},
	"gauge":   {"value", "min", "max"},
	"rate":    {"passes", "fails", "value"},
	"trend":   {"avg", "min", "med", "max", "p(90)", "p(95)"},
}

// writeSummaryExport writes k6's --summary-export JSON: root_group with
// the checks, and metrics with each metric's values and, for a metric
// with thresholds, "thresholds": {expr: failed} (true when it failed, as
// k6 writes it). Sub-metrics are metrics of their own, "name{tag:value}".
func writeSummaryExport(w io.Writer, res *k6compat.Result) error {
	r := newRun(res)
	root := newExportGroup("", "")
	for _, c := range res.Checks {
		g := root
		path := ""
		if c.Group != "" {
			for _, name := range strings.Split(strings.TrimPrefix(c.Group, "::"), "::") {
				path += "::" + name
				if g.Groups[name] == nil {
					g.Groups[name] = newExportGroup(name, path)
				}
				g = g.Groups[name]
			}
		}
		checkPath := path + "::" + c.Name
		g.Checks[c.Name] = exportCheck{Name: c.Name, Path: checkPath, ID: pathID(checkPath), Passes: c.Passes, Fails: c.Fails}
	}

	metrics := map[string]map[string]any{}
	entry := func(key string, m k6compat.Metric, tags map[string]string) map[string]any {
		if e, ok := metrics[key]; ok {
			return e
		}
		v := m.Values(tags)
		if m.Type == "counter" {
			v["rate"] = r.perSecond(v["count"])
		}
		if m.Type == "rate" {
			v["value"] = v["rate"]
		}
		e := map[string]any{}
		for _, k := range exportedValues[m.Type] {
			e[k] = v[k]
		}
		metrics[key] = e
		return e
	}
	for _, m := range res.Metrics {
		if len(m.Samples) > 0 {
			entry(m.Name, m, nil)
		}
	}
	if m, ok := r.byName["http_req_duration"]; ok && len(m.Samples) > 0 {
		entry("http_req_duration{expected_response:true}", m, map[string]string{"expected_response": "true"})
	}
	for _, th := range res.Thresholds {
		e := entry(th.Metric, r.byName[th.Name], th.Tags)
		ths, _ := e["thresholds"].(map[string]bool)
		if ths == nil {
			ths = map[string]bool{}
			e["thresholds"] = ths
		}
		ths[th.Expr] = !th.OK
	}
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false) // thresholds as written: "p(95)<500"
	enc.SetIndent("", "    ")
	return enc.Encode(map[string]any{"root_group": root, "metrics": metrics})
}

// jsonLine is a line of k6's --out json: a Metric line declares a metric
// before its first Point, a Point is one sample.
type jsonLine struct {
	Type   string `json:"type"`
	Data   any    `json:"data"`
	Metric string `json:"metric"`
}

type jsonMetric struct {
	Name       string   `json:"name"`
	Type       string   `json:"type"`
	Contains   string   `json:"contains"`
	Tainted    *bool    `json:"tainted"`
	Thresholds []string `json:"thresholds"`
	Submetrics any      `json:"submetrics"`
}

type jsonPoint struct {
	Time  time.Time         `json:"time"`
	Value float64           `json:"value"`
	Tags  map[string]string `json:"tags"`
}

// writeSamples writes every sample as k6's --out json does, in time order.
func writeSamples(w io.Writer, res *k6compat.Result) error {
	type point struct {
		metric int
		s      k6compat.Sample
	}
	var points []point
	for i, m := range res.Metrics {
		for _, s := range m.Samples {
			points = append(points, point{i, s})
		}
	}
	slices.SortStableFunc(points, func(a, b point) int { return a.s.Time.Compare(b.s.Time) })

	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	enc.SetEscapeHTML(false)
	declared := map[int]bool{}
	for _, p := range points {
		m := res.Metrics[p.metric]
		if !declared[p.metric] {
			declared[p.metric] = true
			jm := jsonMetric{Name: m.Name, Type: m.Type, Contains: "default", Thresholds: []string{}}
			if m.IsTime {
				jm.Contains = "time"
			}
			for _, th := range res.Thresholds {
				if th.Name == m.Name {
					jm.Thresholds = append(jm.Thresholds, th.Expr)
				}
			}
			if err := enc.Encode(jsonLine{Type: "Metric", Data: jm, Metric: m.Name}); err != nil {
				return err
			}
		}
		if err := enc.Encode(jsonLine{Type: "Point", Data: jsonPoint{p.s.Time, p.s.Value, p.s.Tags}, Metric: m.Name}); err != nil {
			return err
		}
	}
	return bw.Flush()
}

// endpointOf names the endpoint a request sample belongs to: the scripts'
// endpoint tag, else k6's name tag (the URL unless the script named it).
func endpointOf(tags map[string]string) string {
	return cmp.Or(tags["endpoint"], tags["name"], tags["url"])
}
