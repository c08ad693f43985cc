package k6compat

import (
	"fmt"
	"sort"
	"strings"
)

// Summary is a short text report in the spirit of k6's end-of-test
// summary: checks, counters, thresholds.
func (r *Result) Summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "iterations: %d completed, %d interrupted, %d threw\n", r.Iterations, r.Interrupted, r.IterationFails)
	for _, c := range r.Checks {
		mark := "✓"
		if c.Fails > 0 {
			mark = "✗"
		}
		fmt.Fprintf(&b, "  %s %s%s: %d passed, %d failed\n", mark, groupPrefix(c.Group), c.Name, c.Passes, c.Fails)
	}
	names := make([]string, 0, len(r.Counters))
	for n := range r.Counters {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(&b, "  %s: %g\n", n, r.Counters[n])
	}
	for _, th := range r.Thresholds {
		mark := "✓"
		if !th.OK {
			mark = "✗"
		}
		fmt.Fprintf(&b, "  %s threshold %s %s (value %.4g)\n", mark, th.Metric, th.Expr, th.Value)
	}
	return b.String()
}

func groupPrefix(g string) string {
	if g == "" {
		return ""
	}
	return strings.TrimPrefix(g, "::") + " › "
}
