package k6compat

import (
	"fmt"
	"math"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// metricType is one of k6's four metric types.
type metricType string

const (
	counterType metricType = "counter"
	gaugeType   metricType = "gauge"
	rateType    metricType = "rate"
	trendType   metricType = "trend"
)

// sample is one value added to a metric, when, with the tags it carried.
type sample struct {
	at    time.Time
	value float64
	tags  map[string]string
}

// metric keeps every sample, so sub-metrics ("http_req_duration{flow:pay}")
// are filtered at the end and a report can draw them over time: a sample
// is tens of bytes, and a run of a few minutes makes a few million at most.
type metric struct {
	name    string
	typ     metricType
	isTime  bool
	samples []sample
}

// registry holds the metrics of one run, shared by every VU.
type registry struct {
	mu      sync.Mutex
	metrics map[string]*metric
}

// builtinMetrics are the k6 metrics this runner records itself.
var builtinMetrics = []struct {
	name   string
	typ    metricType
	isTime bool
}{
	{"checks", rateType, false},
	{"http_reqs", counterType, false},
	{"http_req_duration", trendType, true},
	{"http_req_waiting", trendType, true},
	{"http_req_failed", rateType, false},
	{"iterations", counterType, false},
	{"iteration_duration", trendType, true},
	{"group_duration", trendType, true},
	{"dropped_iterations", counterType, false},
	{"vus", gaugeType, false},
	{"vus_max", gaugeType, false},
}

func newRegistry() *registry {
	r := &registry{metrics: map[string]*metric{}}
	for _, b := range builtinMetrics {
		r.metrics[b.name] = &metric{name: b.name, typ: b.typ, isTime: b.isTime}
	}
	return r
}

var metricName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)

// define returns the metric name, creating it; defining a name again with
// another type is an error, as in k6.
func (r *registry) define(name string, typ metricType, isTime bool) error {
	if !metricName.MatchString(name) {
		return fmt.Errorf("invalid metric name %q", name)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if m, ok := r.metrics[name]; ok {
		if m.typ != typ {
			return fmt.Errorf("metric %q already exists as a %s", name, m.typ)
		}
		return nil
	}
	r.metrics[name] = &metric{name: name, typ: typ, isTime: isTime}
	return nil
}

func (r *registry) add(name string, value float64, tags map[string]string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if m, ok := r.metrics[name]; ok {
		m.samples = append(m.samples, sample{at: time.Now(), value: value, tags: tags})
	}
}

// export copies every metric, sorted by name.
func (r *registry) export() []Metric {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Metric, 0, len(r.metrics))
	for _, m := range r.metrics {
		e := Metric{Name: m.name, Type: string(m.typ), IsTime: m.isTime, Samples: make([]Sample, len(m.samples))}
		for i, s := range m.samples {
			e.Samples[i] = Sample{Time: s.at, Value: s.value, Tags: s.tags}
		}
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b Metric) int { return strings.Compare(a.Name, b.Name) })
	return out
}

func (r *registry) lookup(name string) (*metric, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	m, ok := r.metrics[name]
	return m, ok
}

// values computes the aggregates of the samples matching filter.
func (r *registry) values(m *metric, filter map[string]string) map[string]float64 {
	r.mu.Lock()
	var vs []float64
	for _, s := range m.samples {
		if matches(s.tags, filter) {
			vs = append(vs, s.value)
		}
	}
	r.mu.Unlock()
	return aggregate(m.typ, vs)
}

// aggregate computes what k6 reports of a metric's values: count for a
// counter; value, min and max for a gauge (value is the last one); rate,
// passes (non-zero) and fails for a rate; count, avg, min, max, med,
// p(90), p(95) and p(99) for a trend. Every type also has samples.
func aggregate(typ metricType, vs []float64) map[string]float64 {
	out := map[string]float64{}
	switch typ {
	case counterType:
		sum := 0.0
		for _, v := range vs {
			sum += v
		}
		out["count"] = sum
	case gaugeType:
		out["value"], out["min"], out["max"] = 0, 0, 0
		if len(vs) > 0 {
			out["value"], out["min"], out["max"] = vs[len(vs)-1], slices.Min(vs), slices.Max(vs)
		}
	case rateType:
		nonZero := 0.0
		for _, v := range vs {
			if v != 0 {
				nonZero++
			}
		}
		out["rate"], out["passes"], out["fails"] = 0, nonZero, float64(len(vs))-nonZero
		if len(vs) > 0 {
			out["rate"] = nonZero / float64(len(vs))
		}
	case trendType:
		vs = slices.Clone(vs)
		sort.Float64s(vs)
		out["count"] = float64(len(vs))
		for _, k := range []string{"avg", "min", "max", "med", "p(90)", "p(95)", "p(99)"} {
			out[k] = 0
		}
		if len(vs) > 0 {
			sum := 0.0
			for _, v := range vs {
				sum += v
			}
			out["avg"], out["min"], out["max"] = sum/float64(len(vs)), vs[0], vs[len(vs)-1]
			out["med"] = percentile(vs, 50)
			out["p(90)"], out["p(95)"], out["p(99)"] = percentile(vs, 90), percentile(vs, 95), percentile(vs, 99)
		}
	}
	out["samples"] = float64(len(vs))
	return out
}

func matches(tags, filter map[string]string) bool {
	for k, v := range filter {
		if tags[k] != v {
			return false
		}
	}
	return true
}

// percentile of sorted vs, interpolated between the closest ranks.
func percentile(vs []float64, p float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	rank := p / 100 * float64(len(vs)-1)
	lo := int(math.Floor(rank))
	hi := int(math.Ceil(rank))
	return vs[lo] + (vs[hi]-vs[lo])*(rank-float64(lo))
}

// threshold is one expression of options.thresholds, on a metric or a
// sub-metric.
type threshold struct {
	key    string            // as written: "http_req_duration{flow:pay}"
	metric string            // "http_req_duration"
	filter map[string]string // {flow: pay}
	expr   string            // as written: "p(95)<500"
	agg    string            // "p(95)"
	pct    float64
	op     string
	limit  float64
}

var (
	thresholdKey  = regexp.MustCompile(`^([A-Za-z_][A-Za-z0-9_]*)(?:\{(.*)\})?$`)
	thresholdExpr = regexp.MustCompile(`^\s*(count|rate|value|avg|min|max|med|p\(\s*([0-9.]+)\s*\))\s*(<=|>=|===|==|!=|<|>)\s*(-?[0-9.eE+-]+)\s*$`)
)

// parseThreshold parses key and one of its expressions.
func parseThreshold(key, expr string) (threshold, error) {
	km := thresholdKey.FindStringSubmatch(strings.TrimSpace(key))
	if km == nil {
		return threshold{}, fmt.Errorf("threshold %q: not a metric name with optional {tag:value} filter", key)
	}
	th := threshold{key: key, metric: km[1], expr: expr, filter: map[string]string{}}
	if km[2] != "" {
		for _, part := range strings.Split(km[2], ",") {
			k, v, ok := strings.Cut(part, ":")
			if !ok {
				return threshold{}, fmt.Errorf("threshold %q: tag filter %q is not tag:value", key, part)
			}
			th.filter[strings.TrimSpace(k)] = strings.Trim(strings.TrimSpace(v), `"'`)
		}
	}
	em := thresholdExpr.FindStringSubmatch(expr)
	if em == nil {
		return threshold{}, fmt.Errorf("threshold %q: expression %q is not '<aggregation> <op> <number>' (aggregations: count, rate, value, avg, min, max, med, p(N))", key, expr)
	}
	th.agg, th.op = em[1], em[3]
	if em[2] != "" {
		p, err := strconv.ParseFloat(em[2], 64)
		if err != nil || p < 0 || p > 100 {
			return threshold{}, fmt.Errorf("threshold %q: percentile %q must be 0 to 100", key, em[2])
		}
		th.agg, th.pct = "p", p
	}
	limit, err := strconv.ParseFloat(em[4], 64)
	if err != nil {
		return threshold{}, fmt.Errorf("threshold %q: %q is not a number", key, em[4])
	}
	th.limit = limit
	return th, nil
}

// aggregations each metric type offers to thresholds.
var aggregations = map[metricType][]string{
	counterType: {"count", "rate"},
	gaugeType:   {"value"},
	rateType:    {"rate"},
	trendType:   {"avg", "min", "max", "med", "p"},
}

// check validates th against the registry: the metric must exist and
// offer the aggregation.
func (r *registry) validate(th threshold) error {
	m, ok := r.lookup(th.metric)
	if !ok {
		return fmt.Errorf("threshold %q: no metric named %q (define custom metrics in the init code)", th.key, th.metric)
	}
	for _, a := range aggregations[m.typ] {
		if a == th.agg {
			return nil
		}
	}
	return fmt.Errorf("threshold %q: a %s offers %v, not %s", th.key, m.typ, aggregations[m.typ], th.agg)
}

// evaluate returns the observed value and whether the threshold holds.
// elapsed (seconds) turns a Counter's count into its rate.
func (r *registry) evaluate(th threshold, elapsed float64) (float64, bool) {
	m, _ := r.lookup(th.metric)
	var got float64
	if th.agg == "p" {
		r.mu.Lock()
		var vs []float64
		for _, s := range m.samples {
			if matches(s.tags, th.filter) {
				vs = append(vs, s.value)
			}
		}
		r.mu.Unlock()
		sort.Float64s(vs)
		got = percentile(vs, th.pct)
	} else {
		vals := r.values(m, th.filter)
		got = vals[th.agg]
		if m.typ == counterType && th.agg == "rate" {
			got = 0
			if elapsed > 0 {
				got = vals["count"] / elapsed
			}
		}
	}
	var ok bool
	switch th.op {
	case "<":
		ok = got < th.limit
	case "<=":
		ok = got <= th.limit
	case ">":
		ok = got > th.limit
	case ">=":
		ok = got >= th.limit
	case "==", "===":
		ok = got == th.limit
	case "!=":
		ok = got != th.limit
	}
	return got, ok
}
