// Package k6compat runs the bundled k6 scripts (loadtest/k6) without k6: a
// small compatibility runner on goja, written from k6's public
// documentation. In tests it lets CI notice a script drifting from the API
// (bounded by Limits: it checks that scripts run and their invariants
// hold); behind `shop load` (harness/load) it runs them as k6 would, at
// the sizes they ask for, with the command line's shortcuts (Shortcuts)
// and a live view of the run (Live). It is not a benchmark: shop bench
// measures the flows.
//
// A script and its relative imports are bundled into one CommonJS program
// by esbuild (goja runs no ES modules), compiled once, and run in one goja
// runtime per VU, since a runtime serves one goroutine.
//
// The subset, and nothing else (anything outside it is an error naming it):
//
//   - modules k6 (check, group, sleep, fail), k6/http (get, head, post,
//     put, patch, del, options, request, batch of arrays, objects or URLs,
//     expectedStatuses, setResponseCallback) and k6/metrics (Counter,
//     Gauge, Rate, Trend, created in the init code);
//   - request params headers, tags (name included), timeout, responseCallback
//     and responseType text or none; a body as a string or form fields;
//   - Response status, status_text, body, headers (string values), url,
//     proto, error, error_code, timings, request and json() with dotted
//     selectors;
//   - globals __ENV, __VU, __ITER and console;
//   - options vus, iterations, duration, tags, setupTimeout,
//     teardownTimeout, summaryTrendStats (ignored), scenarios with the
//     shared-iterations, per-vu-iterations, constant-vus and
//     constant-arrival-rate executors (exec, startTime, gracefulStop, env,
//     tags), and thresholds in string or object form on built-in and
//     custom metrics and sub-metrics (count, rate, value, avg, min, max,
//     med, p(N));
//   - setup, the default or exec functions with setup's data as JSON, and
//     teardown.
//
// A run can be bounded (Limits): a scenario gets at most so many VUs and
// iterations, and so long, whatever its options say.
package k6compat
