package load

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/shop-example/shop/harness/k6compat"
)

// The k6 metrics the runner records itself, by the section of the summary
// they go in; every other metric is the script's (CUSTOM).
var (
	httpMetrics      = []string{"http_req_duration", "http_req_failed", "http_req_waiting", "http_reqs"}
	executionMetrics = []string{"dropped_iterations", "group_duration", "iteration_duration", "iterations", "vus", "vus_max"}
)

func builtin(name string) bool {
	return name == "checks" || slices.Contains(httpMetrics, name) || slices.Contains(executionMetrics, name)
}

// run is a finished run with its metrics by name.
type run struct {
	*k6compat.Result
	byName map[string]k6compat.Metric
}

func newRun(res *k6compat.Result) run {
	r := run{Result: res, byName: map[string]k6compat.Metric{}}
	for _, m := range res.Metrics {
		r.byName[m.Name] = m
	}
	return r
}

func (r run) values(name string, tags map[string]string) map[string]float64 {
	return r.byName[name].Values(tags)
}

// perSecond is count over the whole run, setup and teardown included, as
// k6's rates are.
func (r run) perSecond(count float64) float64 {
	if s := r.Duration.Seconds(); s > 0 {
		return count / s
	}
	return 0
}

// writeSummary prints k6's end-of-test summary: thresholds, checks, the
// HTTP, execution and custom metrics, and what setup and teardown did.
func writeSummary(w io.Writer, res *k6compat.Result) {
	r := newRun(res)
	var b strings.Builder
	if len(res.Thresholds) > 0 {
		b.WriteString("\n  █ THRESHOLDS\n")
		last := ""
		for _, th := range res.Thresholds {
			if th.Metric != last {
				fmt.Fprintf(&b, "\n    %s\n", th.Metric)
				last = th.Metric
			}
			fmt.Fprintf(&b, "    %s '%s' %s\n", mark(th.OK), th.Expr, r.thresholdValue(th))
		}
	}

	b.WriteString("\n  █ TOTAL RESULTS\n\n")
	checks := r.values("checks", nil)
	total := checks["passes"] + checks["fails"]
	if total > 0 {
		row(&b, "checks_total", fmt.Sprintf("%-8g %s/s", total, num(r.perSecond(total))))
		row(&b, "checks_succeeded", fmt.Sprintf("%-8s %g out of %g", pct(checks["passes"]/total), checks["passes"], total))
		row(&b, "checks_failed", fmt.Sprintf("%-8s %g out of %g", pct(checks["fails"]/total), checks["fails"], total))
		b.WriteString("\n")
		for _, c := range res.Checks {
			fmt.Fprintf(&b, "    %s %s%s\n", mark(c.Fails == 0), groupPrefix(c.Group), c.Name)
			if c.Fails > 0 {
				fmt.Fprintf(&b, "      ↳  %.0f%% — ✓ %d / ✗ %d\n", 100*float64(c.Passes)/float64(c.Passes+c.Fails), c.Passes, c.Fails)
			}
		}
		b.WriteString("\n")
	}

	b.WriteString("    HTTP\n")
	for _, name := range httpMetrics {
		r.metricRows(&b, name)
	}
	b.WriteString("\n    EXECUTION\n")
	for _, name := range executionMetrics {
		r.metricRows(&b, name)
	}
	var custom []string
	for _, m := range res.Metrics {
		if !builtin(m.Name) && len(m.Samples) > 0 {
			custom = append(custom, m.Name)
		}
	}
	if len(custom) > 0 {
		b.WriteString("\n    CUSTOM\n")
		for _, name := range custom {
			r.metricRows(&b, name)
		}
	}

	b.WriteString("\n  █ SETUP AND TEARDOWN\n\n")
	switch {
	case res.SetupError != "":
		fmt.Fprintf(&b, "    ✗ setup threw, so nothing ran: %s\n", res.SetupError)
	case res.TeardownError != "":
		fmt.Fprintf(&b, "    ✗ teardown threw (its invariant failed): %s\n", res.TeardownError)
	default:
		b.WriteString("    ✓ setup and teardown ran without an exception (teardown's invariant held)\n")
	}
	for _, u := range res.Unsupported {
		fmt.Fprintf(&b, "    ✗ %s\n", u)
	}
	if res.IterationFails > 0 {
		fmt.Fprintf(&b, "    ✗ %d iterations threw; the first: %s\n", res.IterationFails, res.IterationErrors[0])
	}
	fmt.Fprintf(&b, "\n  %d complete and %d interrupted iterations in %s\n", res.Iterations, res.Interrupted, clock(res.Duration))
	_, _ = io.WriteString(w, b.String())
}

// metricRows prints a metric that got samples and, under it, the
// sub-metrics its thresholds name (and expected_response:true for the
// request duration, as k6 does).
func (r run) metricRows(b *strings.Builder, name string) {
	m, ok := r.byName[name]
	if !ok || len(m.Samples) == 0 {
		return
	}
	row(b, name, r.format(m, nil))
	subs := map[string]map[string]string{}
	if name == "http_req_duration" {
		subs["{ expected_response:true }"] = map[string]string{"expected_response": "true"}
	}
	for _, th := range r.Thresholds {
		if th.Name == name && len(th.Tags) > 0 {
			subs[subLabel(th.Tags)] = th.Tags
		}
	}
	for _, label := range slices.Sorted(maps.Keys(subs)) {
		row(b, "  "+label, r.format(m, subs[label]))
	}
}

func subLabel(tags map[string]string) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(tags)) {
		parts = append(parts, k+":"+tags[k])
	}
	return "{ " + strings.Join(parts, ", ") + " }"
}

// format is a metric's summary line: a trend's statistics, a rate's share,
// a counter's count and rate, a gauge's value.
func (r run) format(m k6compat.Metric, tags map[string]string) string {
	v := m.Values(tags)
	switch m.Type {
	case "trend":
		var parts []string
		for _, k := range []string{"avg", "min", "med", "max", "p(90)", "p(95)"} {
			parts = append(parts, k+"="+trendValue(m, v[k]))
		}
		return strings.Join(parts, " ")
	case "rate":
		return fmt.Sprintf("%-8s %g out of %g", pct(v["rate"]), v["passes"], v["passes"]+v["fails"])
	case "counter":
		return fmt.Sprintf("%-8g %s/s", v["count"], num(r.perSecond(v["count"])))
	default:
		return fmt.Sprintf("%-8g min=%g max=%g", v["value"], v["min"], v["max"])
	}
}

// thresholdValue is the value a threshold was judged on: "p(95)=12.3ms".
func (r run) thresholdValue(th k6compat.ThresholdResult) string {
	agg, _, _ := strings.Cut(strings.TrimSpace(th.Expr), "<")
	agg, _, _ = strings.Cut(agg, ">")
	agg, _, _ = strings.Cut(agg, "=")
	agg, _, _ = strings.Cut(agg, "!")
	agg = strings.ReplaceAll(strings.TrimSpace(agg), " ", "")
	m := r.byName[th.Name]
	switch {
	case m.Type == "trend":
		return agg + "=" + trendValue(m, th.Value)
	case agg == "rate" && m.Type == "rate":
		return agg + "=" + pct(th.Value)
	}
	return fmt.Sprintf("%s=%s", agg, num(th.Value))
}

func row(b *strings.Builder, name, value string) {
	dots := 36 - len([]rune(name))
	if dots < 3 {
		dots = 3
	}
	fmt.Fprintf(b, "    %s%s: %s\n", name, strings.Repeat(".", dots), value)
}

func trendValue(m k6compat.Metric, v float64) string {
	if !m.IsTime {
		return num(v)
	}
	return ms(v)
}

// ms prints milliseconds as k6 does: 512µs, 12.34ms, 1.2s.
func ms(v float64) string {
	switch {
	case v >= 1000:
		return trim(fmt.Sprintf("%.2f", v/1000)) + "s"
	case v >= 1 || v == 0:
		return trim(fmt.Sprintf("%.2f", v)) + "ms"
	}
	return trim(fmt.Sprintf("%.2f", v*1000)) + "µs"
}

func num(v float64) string { return trim(fmt.Sprintf("%.2f", v)) }

func trim(s string) string {
	if strings.Contains(s, ".") {
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	return s
}

func pct(v float64) string { return fmt.Sprintf("%.2f%%", 100*v) }

func mark(ok bool) string {
	if ok {
		return "✓"
	}
	return "✗"
}

func groupPrefix(g string) string {
	if g == "" {
		return ""
	}
	return strings.TrimPrefix(g, "::") + " › "
}
