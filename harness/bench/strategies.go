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
// "layered" is the shipped flow: the real service behind a real HTTP
// server on loopback, every layer on. Each baseline is measured twice,
// in two columns: through HTTP, served by the bench's own router on the
// service's edge (strategies_http.go), which is what the layered flow is
// compared with; and in process straight against PostgreSQL (and Redis,
// for "redsync only"), with the stores' own statements where one exists,
// which is its floor: what the same guard costs without HTTP. Each
// column runs -runs times, the columns alternating, each run on fresh
// resources; the table shows the medians, and what every operation cost
// in round trips, commits, Redis commands and CPU time (costs.go). As in
// the other benches, the load generator, the service, PostgreSQL and
// Redis share the machine.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shop-example/shop/harness/docblock"
	gw "github.com/shop-example/shop/harness/gateway"
	"github.com/shop-example/shop/internal/payments"
	"github.com/shop-example/shop/internal/platform/config"
	"github.com/shop-example/shop/internal/platform/lock"
	"github.com/shop-example/shop/internal/platform/problem"
	"github.com/shop-example/shop/internal/platform/redisx"
)

// The goal of the shoot-out: in each case, the layered flow reaches this
// share of the throughput through HTTP of the fastest strategy the audit
// found no anomaly in, with p99 under goalP99. The stretch, in the spread
// cases: a share of that strategy's floor, its throughput in process.
const (
	goalStrategyRatio = 0.7
	stretchFloorRatio = 0.5
)

// The two columns of a baseline.
const (
	viaHTTP   = "HTTP"      // through the bench's router (the layered flow: the service)
	inProcess = "SQL floor" // straight against PostgreSQL and Redis
)

// The cases every flow is measured in.
const (
	hot    = "hot"    // every operation on one resource
	spread = "spread" // each on a resource picked at random from many
)

// strategyNames are the table's rows, in order.
var strategyNames = []string{"naive", "unique only", "optimistic", "row lock", "advisory", "redsync only", "conditional", "layered"}

// flowSpec is one flow of the shoot-out.
type flowSpec struct {
	name  string // as -flows names it
	title string
	unit  string // of the throughput
	done  string // what one operation did, as the router answers it
	// tables are those a cell of the flow seeds or its operations read,
	// analysed before the cell's first run so that the planner knows how
	// large they have grown.
	tables   []string
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

// cell is one strategy in one case, ready to run: the operation, on the
// key pick chose from one of keys (at random), the successes told, and
// the audit to run after.
type cell struct {
	op orderFunc // one operation, in process
	// steps, when the operation is more than one request through HTTP
	// (a hold, then its release), are its parts, which op runs in turn;
	// nil: one request runs op.
	steps []orderFunc
	keys  []string
	// pick turns the key measure chose into the operation's: the order to
	// pay, the seats to hold; or it fails ("out of orders"). nil: measure's
	// key is the operation's.
	pick  func(key string) (string, string)
	told  *told
	audit func(ctx context.Context) (audit, error)
}

// client is what each client repeats: pick the key, run the operation
// via op (the cell's own, or a request that runs it in the server) and
// tell told of a success.
func (c cell) client(op orderFunc) orderFunc {
	op = c.told.record(op)
	return func(ctx context.Context, client int, key string) string {
		if c.pick != nil {
			var failure string
			if key, failure = c.pick(key); failure != "" {
				return failure
			}
		}
		return op(ctx, client, key)
	}
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
// the baselines' router, the gateway, a Redlock over the -redis nodes and
// the users.
type arena struct {
	o          benchOptions
	pool       *pgxpool.Pool
	svc        *service
	router     *baselineRouter
	gatewayURL string
	processor  *gw.Server // the gateway, if it runs in this process
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

// cellResult is one row of a flow's table: the runs of each column.
type cellResult struct {
	flow, strategy, shape string
	na                    string    // the strategy does not apply: why
	http, floor           []cellRun // floor: none for the layered flow
}

// cellRun is one run of a cell in one column, audited.
type cellRun struct {
	result
	succeeded int // operations that succeeded, warmup and overrun included
	found     audit
}

// defaultStrategyFlows are the flows `shop bench strategies` runs unless
// -flows names others, and so the flows of the goals and history blocks
// that `make bench` writes. The refund flow runs when -flows names it
// (and in TestStrategies_AuditSeesTheRaces); it joins these once its
// figures are first measured on a quiet box, in the run that writes its
// block (docs/STRATEGIES.md, "What is not measured").
var defaultStrategyFlows = []string{"orders", "payments", "seats", "likes"}

func strategyFlows() []flowSpec {
	return []flowSpec{ordersFlow(), paymentsFlow(), seatsFlow(), likesFlow(), refundsFlow()}
}

// strategyFlowNames are the names -flows takes.
func strategyFlowNames() []string {
	var names []string
	for _, f := range strategyFlows() {
		names = append(names, f.name)
	}
	return names
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
	if goals, names := goalsTable(results); len(names) > 0 {
		blocks = append(blocks, docblock.Block{Name: goalsBlock, Rows: names, Body: goals})
	}
	return o.doc.write(ctx, pool, o.redisAddrs, blocks...)
}

// runStrategies sets up the arena and runs every cell of the -flows.
func runStrategies(ctx context.Context, o benchOptions, logger *slog.Logger) (results []cellResult, lockSummary string, err error) {
	cfg, err := config.FromEnv(os.Getenv)
	if err != nil {
		return nil, "", fmt.Errorf("config: %w", err)
	}
	// Every pool and Redis client of the run counts for the cell running.
	o.meter = &costMeter{}
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
	// The processor's own check of refunds is off: every refund a
	// strategy asks for is made, so the refund audit sees what the
	// strategy's guard let through (the layered flow too: its layers, not
	// the processor, keep it within what was captured).
	processor, processorSrv, err := startGateway(ctx, gw.Options{NoRefundLimit: true})
	if err != nil {
		return nil, "", err
	}
	defer processorSrv.stop()
	// The client the service builds for itself (app.newPayments).
	gateway, err := payments.NewGateway(processorSrv.base, payments.GatewayOptions{Timeout: cfg.GatewayTimeout, Attempts: 2})
	if err != nil {
		return nil, "", err
	}
	svc, err := startService(ctx, o, db.url, processorSrv.base, tokens)
	if err != nil {
		return nil, "", err
	}
	defer svc.stop()
	router, err := startBaselineRouter(ctx, o, pool, strategyFlows(), users, tokens)
	if err != nil {
		return nil, "", err
	}
	defer router.stop()
	rdb := redisx.Clients(o.redisAddrs)
	defer redisx.Close(rdb) //nolint:errcheck
	o.meter.countRedis(rdb)
	locker, err := lock.New(rdb, lock.Options{Mode: lock.Strict, Prefix: "shop:bench:lock:", Logger: serviceLogger()})
	if err != nil {
		return nil, "", err
	}
	a := &arena{o: o, pool: pool, svc: svc, router: router, gatewayURL: processorSrv.base, processor: processor, gateway: gateway, locker: locker, users: users}

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

// runCell runs one strategy in one case: -runs times through HTTP and,
// for a baseline, as many times in process, alternating.
func runCell(ctx context.Context, a *arena, f flowSpec, name string, s strategy, shape string, logger *slog.Logger) (cellResult, error) {
	r := cellResult{flow: f.name, strategy: name, shape: shape}
	for i := range a.o.runs {
		run, err := runOnce(ctx, a, f, name, s, shape, viaHTTP, i, logger)
		if err != nil {
			return r, err
		}
		r.http = append(r.http, run)
		if name == "layered" {
			continue
		}
		if run, err = runOnce(ctx, a, f, name, s, shape, inProcess, i, logger); err != nil {
			return r, err
		}
		r.floor = append(r.floor, run)
	}
	return r, nil
}

// runOnce seeds, measures and audits one run of a cell in one column.
func runOnce(ctx context.Context, a *arena, f flowSpec, name string, s strategy, shape, column string, i int, logger *slog.Logger) (cellRun, error) {
	c, err := s.cell(ctx, a, shape)
	if err != nil {
		return cellRun{}, fmt.Errorf("%s/%s/%s: %w", f.name, name, shape, err)
	}
	// The first run of a cell tells the planner of the flow's tables as
	// the cells before left them; later runs add rows like those.
	if i == 0 && column == viaHTTP {
		if _, err := a.pool.Exec(ctx, "ANALYZE "+strings.Join(f.tables, ", ")); err != nil {
			return cellRun{}, fmt.Errorf("analyze: %w", err)
		}
	}
	op := c.op
	if column == viaHTTP && name != "layered" {
		steps := c.steps
		if steps == nil {
			steps = []orderFunc{c.op}
		}
		defer a.router.serve(f.name, name, steps)()
		op = a.router.client(f.name, name, len(steps))
	}
	sc := scenario{name: f.name + "/" + name + "/" + shape, skus: c.keys, order: c.client(op), layered: name == "layered", meter: a.o.meter}
	o := a.o
	if ext := filepath.Ext(o.cpuProfile); o.cpuProfile != "" && i == 0 {
		o.cpuProfile = strings.TrimSuffix(o.cpuProfile, ext) + "-" + f.name + ext // then suffixed -hot or -spread
	} else {
		o.cpuProfile = "" // the first run's only
	}
	res, err := runScenarios(ctx, a.pool, o, []scenario{sc}, logger.With("column", column, "run", i+1))
	if err != nil {
		return cellRun{}, err
	}
	found, err := c.audit(ctx)
	if err != nil {
		return cellRun{}, fmt.Errorf("audit %s (%s, run %d): %w", sc.name, column, i+1, err)
	}
	return cellRun{result: res[0], succeeded: c.told.total(), found: found}, nil
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
