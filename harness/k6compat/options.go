package k6compat

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"
)

// scenario is one entry of options.scenarios, bounded by the run's limits.
type scenario struct {
	name      string
	executor  string
	exec      string
	startTime time.Duration
	grace     time.Duration
	env       map[string]string
	tags      map[string]string

	vus        int           // VUs (shared-/per-vu-iterations, constant-vus) or preAllocatedVUs
	iterations int           // shared: in all; per-vu: each; 0 = until duration
	duration   time.Duration // how long iterations may start
	interval   time.Duration // constant-arrival-rate: time between two starts
}

// scenarioKeys are the scenario fields each supported executor accepts.
var scenarioKeys = map[string][]string{
	"shared-iterations":     {"vus", "iterations", "maxDuration"},
	"per-vu-iterations":     {"vus", "iterations", "maxDuration"},
	"constant-vus":          {"vus", "duration"},
	"constant-arrival-rate": {"rate", "timeUnit", "duration", "preAllocatedVUs", "maxVUs"},
}

var commonScenarioKeys = []string{"executor", "exec", "startTime", "gracefulStop", "env", "tags"}

// optionKeys are the top-level options this runner reads; anything else is
// outside the subset.
var optionKeys = map[string]bool{
	"scenarios": true, "thresholds": true, "vus": true, "iterations": true, "duration": true,
	"setupTimeout": true, "teardownTimeout": true, "tags": true,
	"summaryTrendStats": true, // only affects k6's printed summary
}

// plan is what a script's options ask for, bounded by the run's limits.
type plan struct {
	scenarios  []scenario
	thresholds []threshold
	tags       map[string]string
}

// parseOptions reads options (exported from the script, nil when it has
// none) and bounds every scenario by lim.
func parseOptions(opts map[string]any, lim Limits) (plan, error) {
	var p plan
	for k := range opts {
		if !optionKeys[k] {
			return p, fmt.Errorf("options.%s is not supported by the k6 compatibility runner", k)
		}
	}
	tags, err := stringMap(opts["tags"], "options.tags")
	if err != nil {
		return p, err
	}
	p.tags = tags

	if raw, ok := opts["scenarios"]; ok {
		m, ok := raw.(map[string]any)
		if !ok {
			return p, fmt.Errorf("options.scenarios must be an object")
		}
		for _, name := range sortedKeys(m) {
			sc, err := parseScenario(name, m[name], lim)
			if err != nil {
				return p, err
			}
			p.scenarios = append(p.scenarios, sc)
		}
	} else {
		// The shortcuts: vus+duration is constant-vus, else shared-iterations
		// (with iterations and a duration, the duration is its maxDuration).
		sc := scenario{name: "default", exec: "default", executor: "shared-iterations", grace: 30 * time.Second, duration: 10 * time.Minute,
			vus: intOr(opts["vus"], 1), iterations: intOr(opts["iterations"], 1)}
		_, hasIterations := opts["iterations"]
		if d, ok := opts["duration"]; ok {
			dur, err := duration(d, "options.duration")
			if err != nil {
				return p, err
			}
			sc.duration = dur
			if !hasIterations {
				sc.executor, sc.iterations = "constant-vus", 0
			}
		} else if !hasIterations && opts["vus"] != nil {
			sc.iterations = sc.vus
		}
		p.scenarios = []scenario{bound(sc, lim)}
	}

	if raw, ok := opts["thresholds"]; ok {
		m, ok := raw.(map[string]any)
		if !ok {
			return p, fmt.Errorf("options.thresholds must be an object")
		}
		for _, key := range sortedKeys(m) {
			list, ok := m[key].([]any)
			if !ok {
				return p, fmt.Errorf("options.thresholds[%q] must be an array", key)
			}
			for _, e := range list {
				expr, err := thresholdExprOf(key, e)
				if err != nil {
					return p, err
				}
				th, err := parseThreshold(key, expr)
				if err != nil {
					return p, err
				}
				p.thresholds = append(p.thresholds, th)
			}
		}
	}
	return p, nil
}

// thresholdExprOf accepts 'p(95)<500' and {threshold: 'p(95)<500',
// abortOnFail, delayAbortEval}; the runner evaluates every threshold at the
// end, so abortOnFail only ends the run later than k6 would.
func thresholdExprOf(key string, e any) (string, error) {
	switch v := e.(type) {
	case string:
		return v, nil
	case map[string]any:
		for k := range v {
			if k != "threshold" && k != "abortOnFail" && k != "delayAbortEval" {
				return "", fmt.Errorf("threshold %q: field %q is not supported", key, k)
			}
		}
		s, ok := v["threshold"].(string)
		if !ok {
			return "", fmt.Errorf("threshold %q: object form needs a threshold string", key)
		}
		return s, nil
	}
	return "", fmt.Errorf("threshold %q: %v is neither a string nor {threshold: ...}", key, e)
}

func parseScenario(name string, raw any, lim Limits) (scenario, error) {
	m, ok := raw.(map[string]any)
	if !ok {
		return scenario{}, fmt.Errorf("scenario %q must be an object", name)
	}
	executor, _ := m["executor"].(string)
	keys, ok := scenarioKeys[executor]
	if !ok {
		return scenario{}, fmt.Errorf("scenario %q: executor %q is not supported by the k6 compatibility runner (supported: shared-iterations, per-vu-iterations, constant-vus, constant-arrival-rate)", name, executor)
	}
	allowed := map[string]bool{}
	for _, k := range append(append([]string{}, keys...), commonScenarioKeys...) {
		allowed[k] = true
	}
	for k := range m {
		if !allowed[k] {
			return scenario{}, fmt.Errorf("scenario %q: field %q is not supported for executor %s", name, k, executor)
		}
	}
	sc := scenario{name: name, executor: executor, exec: "default", grace: 30 * time.Second}
	if e, ok := m["exec"].(string); ok {
		sc.exec = e
	}
	var err error
	if sc.env, err = stringMap(m["env"], "scenario "+name+" env"); err != nil {
		return sc, err
	}
	if sc.tags, err = stringMap(m["tags"], "scenario "+name+" tags"); err != nil {
		return sc, err
	}
	if v, ok := m["startTime"]; ok {
		if sc.startTime, err = duration(v, "scenario "+name+" startTime"); err != nil {
			return sc, err
		}
	}
	if v, ok := m["gracefulStop"]; ok {
		if sc.grace, err = duration(v, "scenario "+name+" gracefulStop"); err != nil {
			return sc, err
		}
	}
	switch executor {
	case "shared-iterations", "per-vu-iterations":
		sc.vus, sc.iterations = intOr(m["vus"], 1), intOr(m["iterations"], 1)
		sc.duration = 10 * time.Minute
		if v, ok := m["maxDuration"]; ok {
			if sc.duration, err = duration(v, "scenario "+name+" maxDuration"); err != nil {
				return sc, err
			}
		}
	case "constant-vus":
		sc.vus = intOr(m["vus"], 1)
		if sc.duration, err = duration(m["duration"], "scenario "+name+" duration"); err != nil {
			return sc, err
		}
	case "constant-arrival-rate":
		rate := intOr(m["rate"], 0)
		if rate <= 0 {
			return sc, fmt.Errorf("scenario %q: rate must be a positive integer", name)
		}
		unit := time.Second
		if v, ok := m["timeUnit"]; ok {
			if unit, err = duration(v, "scenario "+name+" timeUnit"); err != nil {
				return sc, err
			}
		}
		sc.interval = unit / time.Duration(rate)
		sc.vus = max(intOr(m["preAllocatedVUs"], 0), intOr(m["maxVUs"], 0))
		if sc.vus < 1 {
			return sc, fmt.Errorf("scenario %q: preAllocatedVUs must be at least 1", name)
		}
		if sc.duration, err = duration(m["duration"], "scenario "+name+" duration"); err != nil {
			return sc, err
		}
	}
	return bound(sc, lim), nil
}

// bound applies the run's limits: at most lim.VUs VUs and lim.Iterations
// iterations in a scenario, at most lim.Duration of starting iterations
// and lim.GracefulStop of grace. A zero limit bounds nothing.
func bound(sc scenario, lim Limits) scenario {
	if lim.VUs > 0 {
		sc.vus = min(sc.vus, lim.VUs)
	}
	switch {
	case sc.executor == "shared-iterations" && lim.Iterations > 0:
		sc.iterations = min(sc.iterations, lim.Iterations)
	case sc.executor == "per-vu-iterations" && lim.Iterations > 0:
		sc.iterations = min(sc.iterations, max(1, lim.Iterations/max(1, sc.vus)))
	case sc.executor == "constant-vus" || sc.executor == "constant-arrival-rate":
		sc.iterations = math.MaxInt // until the duration is over
		if lim.Iterations > 0 {
			sc.iterations = lim.Iterations
		}
	}
	if lim.Duration > 0 {
		sc.duration = min(sc.duration, lim.Duration)
		sc.startTime = min(sc.startTime, lim.Duration)
	}
	if lim.GracefulStop > 0 {
		sc.grace = min(sc.grace, lim.GracefulStop)
	}
	return sc
}

// Shortcuts are k6's command-line execution options (--vus, --duration,
// --iterations); zero fields are not set. As in k6, --duration or
// --iterations replaces the script's scenarios with one of the default
// function: constant-vus for a duration, shared-iterations for a count.
type Shortcuts struct {
	VUs        int
	Duration   time.Duration
	Iterations int
}

func (s Shortcuts) set() bool { return s.VUs > 0 || s.Duration > 0 || s.Iterations > 0 }

// override applies the command line's shortcuts over the script's options.
func (s Shortcuts) override(opts map[string]any) (map[string]any, error) {
	if !s.set() {
		return opts, nil
	}
	_, hasScenarios := opts["scenarios"]
	if hasScenarios && s.Duration == 0 && s.Iterations == 0 {
		return nil, errors.New("--vus alone cannot resize a script with options.scenarios: add --duration or --iterations (they replace its scenarios with one of the default function), or use the script's own size variables (-e)")
	}
	out := maps.Clone(opts)
	if out == nil {
		out = map[string]any{}
	}
	if s.Duration > 0 || s.Iterations > 0 {
		delete(out, "scenarios")
		delete(out, "duration")
		delete(out, "iterations")
	}
	if s.VUs > 0 {
		out["vus"] = int64(s.VUs)
	}
	if s.Duration > 0 {
		out["duration"] = s.Duration.String()
	}
	if s.Iterations > 0 {
		out["iterations"] = int64(s.Iterations)
	}
	return out, nil
}

// duration reads a k6 duration: "30s", "1m30s", or a number of ms.
func duration(v any, what string) (time.Duration, error) {
	switch d := v.(type) {
	case string:
		out, err := time.ParseDuration(d)
		if err != nil {
			return 0, fmt.Errorf("%s: %q is not a duration like \"30s\"", what, d)
		}
		return out, nil
	case int64:
		return time.Duration(d) * time.Millisecond, nil
	case float64:
		return time.Duration(d * float64(time.Millisecond)), nil
	case nil:
		return 0, fmt.Errorf("%s is required", what)
	}
	return 0, fmt.Errorf("%s: %v is not a duration", what, v)
}

func intOr(v any, def int) int {
	switch n := v.(type) {
	case int64:
		return int(n)
	case float64:
		return int(n)
	case string:
		if i, err := strconv.Atoi(strings.TrimSpace(n)); err == nil {
			return i
		}
	}
	return def
}

func stringMap(v any, what string) (map[string]string, error) {
	out := map[string]string{}
	if v == nil {
		return out, nil
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%s must be an object of strings", what)
	}
	for k, x := range m {
		out[k] = fmt.Sprint(x)
	}
	return out, nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
