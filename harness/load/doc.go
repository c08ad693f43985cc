// Package load is `shop load`: the bundled k6 scripts (loadtest/k6) run as
// a load test without k6, through the compatibility runner of
// harness/k6compat, with k6's command line, exit codes and outputs.
//
//	shop load [flags] SCRIPT.js
//
// It takes k6's spellings where k6 has the flag (-e/--env, -u/--vus,
// -d/--duration, -i/--iterations, --summary-export, -o/--out json=FILE,
// -q/--quiet) and exits as k6 does: 0 when every threshold holds, 99 when
// one fails, 107 when the script cannot run, its setup or teardown threw
// (a teardown is where the scripts check their invariant), or it reached
// for a k6 API the runner lacks. While it runs, one progress line; at the
// end, k6's summary on standard output; with --report, a static HTML page
// of latency and requests per second over time and a table per endpoint.
//
// The package only reads a finished run (k6compat.Result): every figure it
// prints, exports or draws comes from the samples the runner recorded.
package load
