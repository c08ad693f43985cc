package bench

// The shoot-out's tables: per flow, a row per strategy and case, with the
// medians of its runs through HTTP, the median of its floor (in
// process), what one operation costs, and what the audits found over
// every run; then the goal lines.

import (
	"fmt"
	"io"
	"runtime"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// rate is the median throughput through HTTP.
func (r cellResult) rate() float64 { return median(r.http, cellRun.rate) }

// floorRate is the median throughput in process; ok is false for the
// layered flow, which has no floor.
func (r cellResult) floorRate() (rate float64, ok bool) {
	if len(r.floor) == 0 {
		return 0, false
	}
	return median(r.floor, cellRun.rate), true
}

// p50 and p99 are the medians of the runs through HTTP.
func (r cellResult) p50() time.Duration {
	return time.Duration(median(r.http, func(c cellRun) float64 { return float64(c.result.p50) }))
}

func (r cellResult) p99() time.Duration {
	return time.Duration(median(r.http, func(c cellRun) float64 { return float64(c.result.p99) }))
}

// runs are every run of both columns.
func (r cellResult) runs() []cellRun { return slices.Concat(r.http, r.floor) }

// inFlight and anomalies are summed over every run of both columns: an
// anomaly in any run is one.
func (r cellResult) inFlight() int {
	n := 0
	for _, c := range r.runs() {
		n += c.found.inFlight
	}
	return n
}

func (r cellResult) anomalies() int {
	n := 0
	for _, c := range r.runs() {
		n += c.found.anomalies()
	}
	return n
}

// conflicts are the failures answered over the runs through HTTP, by key.
func (r cellResult) conflicts() string {
	all := map[string]int{}
	for _, c := range r.http {
		for k, n := range c.errors {
			all[k] += n
		}
	}
	return countSummary(all)
}

// costs is the median of each cost per operation over the runs through
// HTTP.
func (r cellResult) costs() perOp {
	var ps []perOp
	for _, c := range r.http {
		if p := c.used.perOp(c.ops()); p.ok {
			ps = append(ps, p)
		}
	}
	if len(ps) == 0 {
		return perOp{}
	}
	p := perOp{ok: true,
		trips:   median(ps, func(p perOp) float64 { return p.trips }),
		commits: median(ps, func(p perOp) float64 { return p.commits }),
		cmds:    median(ps, func(p perOp) float64 { return p.cmds }),
		process: time.Duration(median(ps, func(p perOp) float64 { return float64(p.process) })),
		box:     -1,
	}
	if !slices.ContainsFunc(ps, func(p perOp) bool { return p.box < 0 }) {
		p.box = time.Duration(median(ps, func(p perOp) float64 { return float64(p.box) }))
	}
	return p
}

// median is the median of f over xs (the mean of the middle two of an
// even count), 0 for none.
func median[T any](xs []T, f func(T) float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	vs := make([]float64, len(xs))
	for i, x := range xs {
		vs[i] = f(x)
	}
	slices.Sort(vs)
	if n := len(vs); n%2 == 0 {
		return (vs[n/2-1] + vs[n/2]) / 2
	}
	return vs[len(vs)/2]
}

// rateCell is the median throughput through HTTP and, with more than one
// run, the lowest and highest run's.
func (r cellResult) rateCell() string {
	if len(r.http) < 2 {
		return fmt.Sprintf("%.0f", r.rate())
	}
	rates := make([]float64, len(r.http))
	for i, c := range r.http {
		rates[i] = c.rate()
	}
	return fmt.Sprintf("%.0f (%.0f–%.0f)", r.rate(), slices.Min(rates), slices.Max(rates))
}

func (r cellResult) floorCell() string {
	if rate, ok := r.floorRate(); ok {
		return fmt.Sprintf("%.0f", rate)
	}
	return "—"
}

// printStrategies writes a Markdown table per flow, then the goal of each
// case: the layered flow against the fastest strategy with no anomaly.
func printStrategies(w io.Writer, o benchOptions, results []cellResult) {
	fmt.Fprintf(w, "\n%s\n", strategiesHeader(o))
	for _, f := range strategyFlows() {
		if rows := flowResults(results, f.name); len(rows) > 0 {
			fmt.Fprintf(w, "\n### %s\n\n", f.title)
			printStrategyFlow(w, o, f, rows)
		}
	}
}

// strategiesHeader is the line that states the conditions of the run.
func strategiesHeader(o benchOptions) string {
	return fmt.Sprintf("shop bench strategies: %d clients, %s measured after %s warmup per run; %d runs of each cell through HTTP and, for a baseline, %d in process, alternating, each on fresh resources; spread over %d SKUs or %d posts; hot payments: %d clicks per order; %d CPUs, GOMAXPROCS %d, %s",
		o.clients, o.duration, o.warmup, o.runs, o.runs, o.skus, o.posts, o.clicks, runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.Version())
}

// flowResults are the cells of one flow, in the order they ran.
func flowResults(results []cellResult, flow string) []cellResult {
	var rows []cellResult
	for _, r := range results {
		if r.flow == flow {
			rows = append(rows, r)
		}
	}
	return rows
}

// costsLegend says what the cost columns count.
const costsLegend = `costs, per operation completed in the measured window (refusals too), the median of the runs through HTTP: PostgreSQL round trips (statements, BEGIN and COMMIT among them, batches, preparations, new connections), transactions committed (read-only ones too), Redis commands (each node's), and CPU time: this process's (the service or the router, and the load generator) and the whole machine's busy time (PostgreSQL, Redis and everything else on it too)`

// printStrategyFlow writes one flow's table, the strategies that do not
// apply to it, and its goal lines.
func printStrategyFlow(w io.Writer, o benchOptions, f flowSpec, rows []cellResult) {
	fmt.Fprintf(w, "anomalies: %s\n\nin flight: %s; anomalies: the larger of those and the end state's; both summed over every run of both columns\n\n%s\n\n",
		f.anomaly, f.inFlight, costsLegend)
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', tabwriter.Debug)
	fmt.Fprintf(tw, "| case\t strategy\t HTTP %s (spread)\t p50\t p99\t SQL floor %s\t PG round trips/op\t commits/op\t Redis cmds/op\t CPU µs/op (shop, box)\t conflicts (HTTP runs)\t in flight\t anomalies\t\n", f.unit, f.unit)
	fmt.Fprintln(tw, "|---\t---\t---:\t---:\t---:\t---:\t---:\t---:\t---:\t---:\t---\t---:\t---:\t")
	for _, r := range rows {
		if r.na != "" {
			fmt.Fprintf(tw, "| %s\t %s\t n/a\t —\t —\t —\t —\t —\t —\t —\t —\t —\t —\t\n", r.shape, r.strategy)
			continue
		}
		c := r.costs()
		trips, commits, cmds := "—", "—", "—"
		if c.ok {
			trips, commits, cmds = fmt.Sprintf("%.1f", c.trips), fmt.Sprintf("%.2f", c.commits), fmt.Sprintf("%.1f", c.cmds)
		}
		fmt.Fprintf(tw, "| %s\t %s\t %s\t %s\t %s\t %s\t %s\t %s\t %s\t %s\t %s\t %s\t %s\t\n", r.shape, r.strategy, r.rateCell(), millis(r.p50()), millis(r.p99()),
			r.floorCell(), trips, commits, cmds, c.cpuCell(), r.conflicts(), anomalyCell(r.inFlight()), anomalyCell(r.anomalies()))
	}
	tw.Flush()
	fmt.Fprintln(w)
	for _, name := range strategyNames {
		if s := f.strategies[name]; s.na != "" {
			fmt.Fprintf(w, "n/a: %s does not apply: %s\n", name, s.na)
		}
	}
	for _, shape := range o.shapes {
		fmt.Fprintln(w, goalLine(rows, shape))
		if shape == spread {
			fmt.Fprintln(w, stretchLine(rows, shape))
		}
	}
}

func anomalyCell(n int) string {
	if n == 0 {
		return "0"
	}
	return fmt.Sprintf("**%d**", n)
}

// compared finds, in one case, the layered row and the fastest other
// strategy through HTTP that the audits found no anomaly in, in any case
// of the run: a strategy that is only right when no two requests collide
// (the spread payments of naive) is not a correct one to compare with.
func compared(rows []cellResult, shape string) (layered, best *cellResult) {
	wrong := map[string]bool{}
	for _, r := range rows {
		wrong[r.strategy] = wrong[r.strategy] || r.anomalies() > 0
	}
	for i := range rows {
		r := &rows[i]
		switch {
		case r.shape != shape || r.na != "":
		case r.strategy == "layered":
			layered = r
		case !wrong[r.strategy] && r.rate() > 0 && (best == nil || r.rate() > best.rate()):
			best = r
		}
	}
	return layered, best
}

// goalLine compares the layered flow of one case with the fastest correct
// strategy through HTTP: the same stack in front, so the ratio is that of
// the guards.
func goalLine(rows []cellResult, shape string) string {
	layered, best := compared(rows, shape)
	if layered == nil || best == nil {
		return fmt.Sprintf("%s: no layered row or no strategy without anomalies to compare", shape)
	}
	ratio := layered.rate() / best.rate()
	met := ratio >= goalStrategyRatio && layered.p99() < goalP99 && layered.anomalies() == 0
	return fmt.Sprintf("%s: layered %.0f/s / %s through HTTP %.0f/s = %.2f, layered p99 %s: goal (ratio >= %.1f, p99 < %s) %s",
		shape, layered.rate(), best.strategy, best.rate(), ratio, millis(layered.p99()), goalStrategyRatio, goalP99, verdict(met))
}

// stretchLine compares the layered flow of one case with the floor of
// the strategy goalLine compares it with: the guards and HTTP together
// against the bare guard.
func stretchLine(rows []cellResult, shape string) string {
	layered, best := compared(rows, shape)
	floor, ok := 0.0, false
	if best != nil {
		floor, ok = best.floorRate()
	}
	if layered == nil || !ok || floor == 0 {
		return fmt.Sprintf("%s stretch: no layered row or no floor to compare", shape)
	}
	ratio := layered.rate() / floor
	met := ratio >= stretchFloorRatio && layered.anomalies() == 0
	return fmt.Sprintf("%s stretch: layered %.0f/s / %s's SQL floor %.0f/s = %.2f: stretch (ratio >= %.1f) %s",
		shape, layered.rate(), best.strategy, floor, ratio, stretchFloorRatio, verdict(met))
}

// goalsBlock is the generated block of the goal of every case that ran,
// in one table (docs/STRATEGIES.md, "The performance goal").
const goalsBlock = "strategies/goals"

// goalsTable is the goals block: per flow and case, the layered flow
// against the fastest correct strategy through HTTP, its p99, the goal,
// and in a spread case the stretch against that strategy's SQL floor; and
// its rows, "flow/case".
func goalsTable(results []cellResult) (string, []string) {
	var b strings.Builder
	var names []string
	fmt.Fprintln(&b, "| flow | case | layered | fastest correct through HTTP | ratio | layered p99 | goal | SQL floor of that strategy | stretch |")
	fmt.Fprintln(&b, "|---|---|---:|---|---:|---:|---|---:|---|")
	for _, f := range strategyFlows() {
		rows := flowResults(results, f.name)
		for _, shape := range []string{hot, spread} {
			layered, best := compared(rows, shape)
			if layered == nil || best == nil {
				continue
			}
			names = append(names, f.name+"/"+shape)
			ratio := layered.rate() / best.rate()
			met := ratio >= goalStrategyRatio && layered.p99() < goalP99 && layered.anomalies() == 0
			floor, stretch := "—", "—"
			if rate, ok := best.floorRate(); ok && rate > 0 && shape == spread {
				r := layered.rate() / rate
				floor = fmt.Sprintf("%.0f/s", rate)
				stretch = fmt.Sprintf("%.2f %s", r, verdict(r >= stretchFloorRatio && layered.anomalies() == 0))
			}
			fmt.Fprintf(&b, "| %s | %s | %.0f/s | %s %.0f/s | %.2f | %s | %s | %s | %s |\n",
				f.title, shape, layered.rate(), best.strategy, best.rate(), ratio, millis(layered.p99()), verdict(met), floor, stretch)
		}
	}
	fmt.Fprintf(&b, "\nGoal: ratio >= %.1f and p99 < %s; stretch (spread): layered >= %.1f× the SQL floor.\n",
		goalStrategyRatio, goalP99, stretchFloorRatio)
	return b.String(), names
}
