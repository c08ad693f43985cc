package bench

// `shop bench strategies` is the shoot-out: every way to guard each flow,
// run side by side on the same workload, each followed by an audit of what
// it left in the database (and at the gateway). A strategy that is fast
// because it is wrong shows its anomalies next to its speed.
//
// A flow is one entry of strategyFlows: its name, the unit of its
// throughput, what its audit counts, and its strategies in the order of
// the table. A strategy is a name and a cell function that seeds fresh
// resources for one case (hot or spread) and returns the operation the
// clients repeat and the audit to run after them; a strategy that does not
// apply to a flow says why instead. Each cell runs on resources of its
// own, so none inherits the rows (or the dead row versions) of another.
//
// The baselines run in this process straight against PostgreSQL (and
// Redis, for "redsync only"), with the stores' own statements where one
// exists; "layered" is the shipped flow: the real service behind a real
// HTTP server on loopback, every layer on. As in the other benches, the
// load generator, the service, PostgreSQL and Redis share the machine.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shop-example/shop/internal/payments"
	"github.com/shop-example/shop/internal/platform/config"
	"github.com/shop-example/shop/internal/platform/docblock"
	"github.com/shop-example/shop/internal/platform/lock"
	"github.com/shop-example/shop/internal/platform/problem"
	"github.com/shop-example/shop/internal/platform/redisx"
)

// The goal of the shoot-out: in each case, the layered flow reaches this
// share of the throughput of the fastest strategy the audit found no
// anomaly in, with p99 under goalP99.
const goalStrategyRatio = 0.7

// The cases every flow is measured in.
const (
	hot    = "hot"    // every operation on one resource
	spread = "spread" // each on a resource picked at random from many
)

// strategyNames are the table's rows, in order.
var strategyNames = []string{"naive", "unique only", "optimistic", "row lock", "advisory", "redsync only", "conditional", "layered"}

// flowSpec is one flow of the shoot-out.
type flowSpec struct {
	name     string // as -flows names it
	title    string
	unit     string // of the throughput
	anomaly  string // what the audit counts
	inFlight string // what it counts in flight, from the operations' answers
	// strategies by name; a name of strategyNames missing here is a
	// strategy with no row in this flow.
	strategies map[string]strategy
}

// strategy is one way to guard a flow.
type strategy struct {
	how  string // one line for the table: what it does here
	na   string // why it does not apply to this flow, or ""
	cell func(ctx context.Context, a *arena, shape string) (cell, error)
}

// cell is one strategy in one case, ready to run: the operation each
// client repeats (on one of keys, at random), which records in told what
// it answered, and the audit to run after.
type cell struct {
	op    orderFunc
	keys  []string
	told  *told
	audit func(ctx context.Context) (audit, error)
}

// audit is what a cell's audit found: anomalies seen in flight (answers
// the database's own count contradicts) and in the end state.
type audit struct {
	inFlight, after int
}

// anomalies is the larger of the two counts: both count the same races,
// each seeing some the other cannot.
func (a audit) anomalies() int { return max(a.inFlight, a.after) }

// told records what a cell's operations answered: per client and key,
// the operations that succeeded (an order placed, a payment made, a hold
// granted, a like flipped), warmup included.
type told struct {
	mu sync.Mutex
	n  map[toldKey]int
}

type toldKey struct {
	client int
	key    string
}

func newTold() *told { return &told{n: map[toldKey]int{}} }

func (t *told) add(client int, key string) {
	t.mu.Lock()
	t.n[toldKey{client, key}]++
	t.mu.Unlock()
}

// record wraps op so that each success is told to its client for the key
// op was called with.
func (t *told) record(op orderFunc) orderFunc {
	return func(ctx context.Context, client int, key string) string {
		failure := op(ctx, client, key)
		if failure == "" {
			t.add(client, key)
		}
		return failure
	}
}

// byKey is the successes per key, over all clients.
func (t *told) byKey() map[string]int {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := map[string]int{}
	for k, n := range t.n {
		out[k.key] += n
	}
	return out
}

// total is the successes of the whole cell.
func (t *told) total() int {
	n := 0
	for _, m := range t.byKey() {
		n += m
	}
	return n
}

// arena is what every cell runs in: the scratch database, the service,
// the gateway, a Redlock over the -redis nodes and the users.
type arena struct {
	o          benchOptions
	pool       *pgxpool.Pool
	svc        *service
	gatewayURL string
	gateway    *payments.Gateway
	locker     *lock.Locker
	users      []string
	cells      int // cells seeded so far: a fresh prefix each
}

// prefix is a name no earlier cell used, for the resources it seeds.
func (a *arena) prefix(flow string) string {
	a.cells++
	return fmt.Sprintf("S%d-%s-", a.cells, flow)
}

// cellResult is one row of a flow's table.
type cellResult struct {
	flow, strategy, shape string
	na                    string // the strategy does not apply: why
	result
	succeeded int // operations that succeeded, warmup and overrun included
	inFlight  int // anomalies seen in flight
	after     int // anomalies in the end state
	anomalies int // the larger of the two
}

// conflicts is how many operations were answered with a refusal.
func (r cellResult) conflicts() int {
	n := 0
	for _, c := range r.errors {
		n += c
	}
	return n
}

func strategyFlows() []flowSpec {
	return []flowSpec{ordersFlow(), paymentsFlow(), seatsFlow(), likesFlow()}
}

func benchStrategies(ctx context.Context, o benchOptions, logger *slog.Logger) (err error) {
	results, lockSummary, err := runStrategies(ctx, o, logger)
	if err != nil {
		return err
	}
	printStrategies(os.Stdout, o, results)
	fmt.Fprintf(os.Stdout, "service lock (whole run): %s\n", lockSummary)
	if o.doc != nil {
		if err := writeStrategiesDoc(ctx, o, results, lockSummary); err != nil {
			return err
		}
	}
	if o.chart != "" {
		return writeChart(o.chart, results)
	}
	return nil
}

// writeStrategiesDoc writes a block per flow, "strategies/<flow>": the
// conditions of the run, the flow's table, its goal lines and the lock
// counts of the whole run. The bench has dropped its scratch database by
// now, so the server versions are read from a pool of its own.
func writeStrategiesDoc(ctx context.Context, o benchOptions, results []cellResult, lockSummary string) error {
	pool, err := pgxpool.New(ctx, o.dbURL)
	if err != nil {
		return fmt.Errorf("-doc: %w", err)
	}
	defer pool.Close()
	var blocks []docblock.Block
	for _, f := range strategyFlows() {
		rows := flowResults(results, f.name)
		if len(rows) == 0 {
			continue
		}
		var report strings.Builder
		fmt.Fprintln(&report, strategiesHeader(o))
		fmt.Fprintln(&report)
		printStrategyFlow(&report, o, f, rows)
		fmt.Fprintf(&report, "service lock (whole run): %s\n", lockSummary)
		names := make([]string, len(rows))
		for i, r := range rows {
			names[i] = r.shape + "/" + r.strategy
		}
		blocks = append(blocks, docblock.Block{Name: "strategies/" + f.name, Rows: names, Body: asMarkdown(report.String())})
	}
	return o.doc.write(ctx, pool, o.redisAddrs, blocks...)
}

// runStrategies sets up the arena and runs every cell of the -flows.
func runStrategies(ctx context.Context, o benchOptions, logger *slog.Logger) (results []cellResult, lockSummary string, err error) {
	cfg, err := config.FromEnv(os.Getenv)
	if err != nil {
		return nil, "", fmt.Errorf("config: %w", err)
	}
	db, pool, err := openScratch(ctx, o, logger)
	if err != nil {
		return nil, "", err
	}
	defer func() { pool.Close(); err = errors.Join(err, db.drop()) }()
	for _, add := range []string{sqlSingleAddColumn, sqlLikesAddAuditColumns, sqlSeatsAddAuditColumn} {
		if _, err := pool.Exec(ctx, add); err != nil {
			return nil, "", fmt.Errorf("add the baselines' audit columns: %w", err)
		}
	}
	if _, err := pool.Exec(ctx, sqlSeedProducts, payPrefix, 1, benchStock); err != nil {
		return nil, "", fmt.Errorf("seed product: %w", err)
	}
	users, tokens, err := seedUsers(ctx, pool, o.clients)
	if err != nil {
		return nil, "", err
	}
	_, processorSrv, err := startGateway(ctx)
	if err != nil {
		return nil, "", err
	}
	defer processorSrv.stop()
	// The client the service builds for itself (app.newPayments).
	gw, err := payments.NewGateway(processorSrv.base, payments.GatewayOptions{Timeout: cfg.GatewayTimeout, Attempts: 2})
	if err != nil {
		return nil, "", err
	}
	svc, err := startService(ctx, o, db.url, processorSrv.base, tokens)
	if err != nil {
		return nil, "", err
	}
	defer svc.stop()
	rdb := redisx.Clients(o.redisAddrs)
	defer redisx.Close(rdb) //nolint:errcheck
	locker, err := lock.New(rdb, lock.Options{Mode: lock.Strict, Prefix: "shop:bench:lock:", Logger: serviceLogger()})
	if err != nil {
		return nil, "", err
	}
	a := &arena{o: o, pool: pool, svc: svc, gatewayURL: processorSrv.base, gateway: gw, locker: locker, users: users}

	for _, f := range strategyFlows() {
		if !slices.Contains(o.flows, f.name) {
			continue
		}
		for _, shape := range o.shapes {
			for _, name := range strategyNames {
				s, ok := f.strategies[name]
				if !ok || (len(o.only) > 0 && !slices.Contains(o.only, name)) {
					continue
				}
				r := cellResult{flow: f.name, strategy: name, shape: shape, na: s.na}
				if s.na == "" {
					if r, err = runCell(ctx, a, f, name, s, shape, logger); err != nil {
						return nil, "", err
					}
				}
				results = append(results, r)
			}
		}
	}
	return results, svc.lockOutcomes(), nil
}

// runCell seeds, measures and audits one strategy in one case.
func runCell(ctx context.Context, a *arena, f flowSpec, name string, s strategy, shape string, logger *slog.Logger) (cellResult, error) {
	c, err := s.cell(ctx, a, shape)
	if err != nil {
		return cellResult{}, fmt.Errorf("%s/%s/%s: %w", f.name, name, shape, err)
	}
	if _, err := a.pool.Exec(ctx, "ANALYZE"); err != nil {
		return cellResult{}, fmt.Errorf("analyze: %w", err)
	}
	sc := scenario{name: f.name + "/" + name + "/" + shape, skus: c.keys, order: c.op, layered: name == "layered"}
	o := a.o
	if ext := filepath.Ext(o.cpuProfile); o.cpuProfile != "" {
		o.cpuProfile = strings.TrimSuffix(o.cpuProfile, ext) + "-" + f.name + ext // then suffixed -hot or -spread
	}
	res, err := runScenarios(ctx, a.pool, o, []scenario{sc}, logger)
	if err != nil {
		return cellResult{}, err
	}
	found, err := c.audit(ctx)
	if err != nil {
		return cellResult{}, fmt.Errorf("audit %s: %w", sc.name, err)
	}
	return cellResult{flow: f.name, strategy: name, shape: shape, result: res[0],
		succeeded: c.told.total(), inFlight: found.inFlight, after: found.after, anomalies: found.anomalies()}, nil
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
	return fmt.Sprintf("shop bench strategies: %d clients, %s measured after %s warmup per cell; spread over %d SKUs or %d posts; hot payments: %d clicks per order; %d CPUs, GOMAXPROCS %d, %s",
		o.clients, o.duration, o.warmup, o.skus, o.posts, o.clicks, runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.Version())
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

// printStrategyFlow writes one flow's table, the strategies that do not
// apply to it, and its goal lines.
func printStrategyFlow(w io.Writer, o benchOptions, f flowSpec, rows []cellResult) {
	fmt.Fprintf(w, "anomalies: %s\n\nin flight: %s; anomalies: the larger of those and the end state's\n\n", f.anomaly, f.inFlight)
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', tabwriter.Debug)
	fmt.Fprintf(tw, "| case\t strategy\t %s\t p50\t p99\t conflicts answered\t in flight\t anomalies\t\n", f.unit)
	fmt.Fprintln(tw, "|---\t---\t---:\t---:\t---:\t---\t---:\t---:\t")
	for _, r := range rows {
		if r.na != "" {
			fmt.Fprintf(tw, "| %s\t %s\t n/a\t —\t —\t —\t —\t —\t\n", r.shape, r.strategy)
			continue
		}
		fmt.Fprintf(tw, "| %s\t %s\t %.0f\t %s\t %s\t %s\t %s\t %s\t\n", r.shape, r.strategy, r.rate(), millis(r.p50), millis(r.p99),
			r.errorSummary(), anomalyCell(r.inFlight), anomalyCell(r.anomalies))
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
	}
}

func anomalyCell(n int) string {
	if n == 0 {
		return "0"
	}
	return fmt.Sprintf("**%d**", n)
}

// goalLine compares the layered flow of one case with the fastest other
// strategy the audit found no anomaly in, in any case of the run: a
// strategy that is only right when no two requests collide (the spread
// payments of naive) is not a correct one to compare with.
func goalLine(rows []cellResult, shape string) string {
	wrong := map[string]bool{}
	for _, r := range rows {
		wrong[r.strategy] = wrong[r.strategy] || r.anomalies > 0
	}
	var layered, best *cellResult
	for i := range rows {
		r := &rows[i]
		switch {
		case r.shape != shape || r.na != "":
		case r.strategy == "layered":
			layered = r
		case !wrong[r.strategy] && r.orders > 0 && (best == nil || r.rate() > best.rate()):
			best = r
		}
	}
	if layered == nil || best == nil {
		return fmt.Sprintf("%s: no layered row or no strategy without anomalies to compare", shape)
	}
	ratio := layered.rate() / best.rate()
	met := ratio >= goalStrategyRatio && layered.p99 < goalP99 && layered.anomalies == 0
	return fmt.Sprintf("%s: layered %.0f/s / %s %.0f/s = %.2f, layered p99 %s: goal (ratio >= %.1f, p99 < %s) %s",
		shape, layered.rate(), best.strategy, best.rate(), ratio, millis(layered.p99), goalStrategyRatio, goalP99, verdict(met))
}

// underLock runs fn under a Redlock on key over the -redis nodes; a lock
// still taken when the wait budget runs out is a conflict answered.
func underLock(ctx context.Context, a *arena, key string, fn func(ctx context.Context) string) string {
	var failure string
	err := a.locker.Do(ctx, key, func(ctx context.Context) error {
		failure = fn(ctx)
		return nil
	})
	switch {
	case err == nil:
		return failure
	case lockBusy(err):
		return "lock busy"
	case ctx.Err() != nil:
		return "cancelled"
	}
	return "lock " + string(problem.CodeOf(err))
}

func lockBusy(err error) bool { return problem.CodeOf(err) == problem.ResourceBusy }
