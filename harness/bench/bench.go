// Package bench is `shop bench`: each flow measured through the layered
// HTTP service against a raw SQL baseline, in one run, on one machine.
// cmd/shop only dispatches to Run; docs/BENCHMARKS.md has the figures.
// `shop bench payments` is described in payments.go, `shop bench likes`
// in likes.go, `shop bench outside` (two replicas of their own) in
// outside.go, `shop bench events` (the outbox's relay and consumers) in
// events.go.
//
// `shop bench orders` measures order creation through the layered HTTP
// service against the raw SQL baseline, in one run, with -clients concurrent
// clients, for one hot SKU and for orders spread over -skus SKUs.
//
// What is measured, per scenario, over -duration after -warmup:
//   - successful orders per second: a raw transaction that committed, or an
//     HTTP 201 that is not a replay; nothing else counts as an order;
//   - exact p50 and p99 of the latency of those orders, as the client saw
//     it (for the layered flow: the whole HTTP round trip on loopback);
//   - failures, counted by HTTP status or SQLSTATE.
//
// The raw baseline is one transaction per order: the conditional stock
// decrement and the order insert, as a hand-written program would do it. No
// auth, no idempotency key, no lock, no HTTP. The layered flow is the real
// service (app.New) behind a real http.Server on 127.0.0.1: bearer-token
// check, idempotency claim (which is also the request's lock: no Redis lock
// is taken under it) and completion, the order transaction, JSON in and out.
//
// What is not measured: a real network (everything is on loopback), TLS, a
// load balancer, more than one replica, the background jobs (not started),
// the write of the request log (it is formatted, then discarded), payment.
// The load generator runs in the same process as the service and shares the
// machine's CPUs with it, PostgreSQL and Redis: on a small machine the
// figures are those of the whole box.
//
// It works in a scratch database that it creates on the -db server and drops
// at the end; it never reads or writes the data of the database in -db.
package bench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shop-example/shop/harness/docblock"
	"github.com/shop-example/shop/internal/likes"
	"github.com/shop-example/shop/internal/platform/config"
	"github.com/shop-example/shop/internal/seats"
)

// The goal: the layered flow keeps at least half of the raw
// baseline's throughput, with p99 under 100 ms, for the hot and spread cases.
const (
	goalRatio = 0.5
	goalP99   = 100 * time.Millisecond
)

// errHelpShown means -h was asked for and the flag set has printed it.
var errHelpShown = errors.New("help shown")

// benchOptions are the flags of `shop bench orders`, `payments` and `likes`.
type benchOptions struct {
	clients    int
	duration   time.Duration
	warmup     time.Duration
	skus       int // orders only
	dbURL      string
	redisAddrs []string
	cpuProfile string
	// payments only: each storm pays stormOrders orders, each clicked
	// stormClicks times at once; storms are run one after the other.
	stormOrders, stormClicks, storms int
	// likes only: the spread scenarios like posts picked from posts; the
	// hot ones run once per count of counter rows in shardCounts.
	posts       int
	shardCounts []int
	// strategies only: the flows, cases and strategies to run, the chart
	// to write, and how many clients pay each order of the hot payments.
	flows, shapes, only []string
	chart               string
	clicks              int
	seatRows            int // rows of the spread seat map
	// strategies only: the runs of each cell and column, and what counts
	// each cell's work (set by runStrategies).
	runs  int
	meter *costMeter
	// outside only: the binary its replicas run `serve` from (default
	// this one), and the pending orders seeded per second of a payment
	// case's warm-up and window.
	shopBin string
	payRate int
	// events only: the orders each drain pays before its replicas start,
	// and the payments per second of the paced phase.
	events, rate int
	// seats only: the lock strategy of the service being measured
	// (SHOP_SEAT_LOCK), set per scenario by benchSeats.
	seatLock string
	// minOps: each client runs at least this many operations per
	// scenario, however long that takes past the window (0: the window
	// alone decides). A test sets it, so that a loaded machine still runs
	// enough operations to race; the figures stay those of the window.
	minOps int
	// serviceConns is what the service's pools may hold: SHOP_DB_MAX_CONNS
	// plus half as many for idempotency bookkeeping, as app.New opens them.
	serviceConns int
	// docPath is the Markdown file -doc names, doc what Run made of it:
	// where the result tables go (nil: only to stdout).
	docPath string
	doc     *docTarget
	// With -doc: write the tables even on a loaded box, marked so
	// (-loaded), and how long to wait for the box to settle before
	// refusing it (-settle).
	loaded bool
	settle time.Duration
}

// ErrUsage means the command line was not one Run understands; the caller
// prints the usage.
var ErrUsage = errors.New("usage: shop bench orders|payments|likes|seats|strategies|outside|events|history [flags]")

// Run runs `shop bench <args>`: args[0] is what to measure (orders,
// payments, likes, seats, strategies, outside, events, or history, which
// measures nothing: strategies_history.go), the rest its flags.
func Run(ctx context.Context, args []string, logger *slog.Logger) error {
	return runOn(ctx, args, logger, machineGate())
}

// runOn is Run with the quiet-box check of -doc made by gate.
func runOn(ctx context.Context, args []string, logger *slog.Logger, gate boxGate) error {
	if len(args) == 0 {
		return ErrUsage
	}
	var run func(context.Context, benchOptions, *slog.Logger) error
	switch args[0] {
	case "history":
		return benchHistory(args[1:])
	case "orders":
		run = benchOrders
	case "payments":
		run = benchPayments
	case "likes":
		run = benchLikes
	case "seats":
		run = benchSeats
	case "strategies":
		run = benchStrategies
	case "outside":
		run = benchOutside
	case "events":
		run = benchEvents
	case "tracing":
		run = benchTracing
	default:
		return ErrUsage
	}
	o, err := parseBenchFlags(args[0], args[1:])
	if errors.Is(err, errHelpShown) {
		return nil
	}
	if err != nil {
		return err
	}
	if o.docPath != "" {
		box, err := gate.wait(ctx, o, logger)
		if err != nil {
			return fmt.Errorf("bench %s -doc %s: %w", args[0], o.docPath, err)
		}
		if o.doc, err = newDocTarget(o.docPath, args, box); err != nil {
			return err
		}
	}
	return run(ctx, o, logger)
}

// parseBenchFlags parses the flags of `shop bench <what>`: the shared ones,
// and those of what is benchmarked.
func parseBenchFlags(what string, args []string) (benchOptions, error) {
	cfg, err := config.FromEnv(os.Getenv)
	if err != nil {
		return benchOptions{}, fmt.Errorf("config: %w", err)
	}
	// The counts of the other command stay at 1, so the checks below pass.
	o := benchOptions{skus: 1, stormOrders: 1, stormClicks: 1, posts: 1, clicks: 1, runs: 1, seatRows: seats.MaxRows, payRate: 1, events: 1, rate: 1}
	fs := flag.NewFlagSet("shop bench "+what, flag.ContinueOnError)
	clients := 32
	duration, warmup := 10*time.Second, 2*time.Second
	switch what {
	case "likes":
		clients = 64 // a viral post: more users at once than buyers of one SKU
	case "seats":
		// Fans at an on-sale; eight scenarios, so short ones by default.
		clients, duration, warmup = 64, 3*time.Second, time.Second
	case "strategies":
		duration, warmup = 2*time.Second, 500*time.Millisecond // 62 cells in about 5½ minutes
	case "outside":
		duration, warmup = 2*time.Second, 500*time.Millisecond // as strategies' cells: 8 of them, and the seeding, in about a minute
	case "tracing":
		// Many short rounds, in turns: the box drifts by more than the
		// cost measured over a few long ones.
		duration, warmup = 3*time.Second, time.Second
	}
	fs.IntVar(&o.clients, "clients", clients, "concurrent clients, each a user of its own")
	fs.DurationVar(&o.duration, "duration", duration, "measured time of each scenario")
	fs.DurationVar(&o.warmup, "warmup", warmup, "unmeasured time before each scenario's measurement")
	fs.StringVar(&o.dbURL, "db", "", "PostgreSQL server to create the scratch database on (default $SHOP_DATABASE_URL)")
	redis := fs.String("redis", strings.Join(cfg.RedisAddrs, ","), "comma-separated Redis nodes of the lock quorum; the default is $SHOP_REDIS_ADDRS")
	fs.StringVar(&o.docPath, "doc", "", "also write the result tables into their generated blocks of this Markdown file (docs/BENCHMARKS.md; docs/STRATEGIES.md for strategies); refused, before anything is measured, while the 1-minute load average is above the cores")
	fs.BoolVar(&o.loaded, "loaded", false, "with -doc: write the tables even when the load average is above the cores, their machine marked "+docblock.LoadedMarker)
	fs.DurationVar(&o.settle, "settle", 0, "with -doc: wait up to this long for the load average to fall to the cores before refusing")
	switch what {
	case "orders":
		fs.IntVar(&o.skus, "skus", 1000, "SKUs the spread scenarios pick from at random")
		fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of each layered scenario to this file, suffixed -hot / -spread")
	case "payments":
		fs.IntVar(&o.stormOrders, "storm-orders", 50, "orders paid in each duplicate storm")
		fs.IntVar(&o.stormClicks, "storm-clicks", 15, "pay requests fired at once at each order of a storm")
		fs.IntVar(&o.storms, "storms", defaultStorms, "duplicate storms, one after the other, each on fresh orders")
		fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the layered throughput and of the storms to this file, suffixed -distinct / -storm")
	case "strategies":
		fs.IntVar(&o.skus, "skus", 1000, "SKUs the spread order cases pick from at random")
		fs.IntVar(&o.posts, "posts", 1000, "posts the spread like cases pick from at random")
		fs.IntVar(&o.clicks, "clicks", 4, "clients that pay each order of the hot payment cases, one after the other")
		fs.IntVar(&o.runs, "runs", 3, "runs of each cell through HTTP and in process, each on fresh resources; the table shows their median")
		fs.IntVar(&o.seatRows, "seat-rows", seats.MaxRows, fmt.Sprintf("rows of %d seats of the spread seat cases, 1–%d", seats.MaxSeatsPerRow, seats.MaxRows))
		fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of each layered cell to this file, suffixed -flow-hot / -flow-spread")
		fs.StringVar(&o.chart, "chart", "", "write the throughput chart to this SVG file, and a PNG beside it")
		list(fs, &o.flows, "flows", strings.Join(defaultStrategyFlows, ","), "comma-separated flows to run: "+strings.Join(strategyFlowNames(), ","))
		list(fs, &o.shapes, "cases", hot+","+spread, "comma-separated cases to run")
		list(fs, &o.only, "strategies", "", "comma-separated strategies to run (default all): "+strings.Join(strategyNames, ","))
	case "outside":
		fs.IntVar(&o.skus, "skus", 1000, "SKUs the spread order case picks from at random")
		fs.IntVar(&o.posts, "posts", 1000, "posts the spread like case picks from at random")
		fs.IntVar(&o.clicks, "clicks", 4, "clients that pay each order of the hot payment case, one after the other")
		fs.IntVar(&o.seatRows, "seat-rows", seats.MaxRows, fmt.Sprintf("rows of %d seats of the spread seat case, 1–%d", seats.MaxSeatsPerRow, seats.MaxRows))
		fs.IntVar(&o.payRate, "pay-rate", 500, "pending orders seeded through the API per second of a payment case's warm-up and window (a case that pays faster runs out: \"out of orders\")")
		fs.StringVar(&o.shopBin, "shop", "", "the shop binary the two replicas run `serve` from (default this one)")
		list(fs, &o.flows, "flows", strings.Join(outsideFlowNames(), ","), "comma-separated flows to run")
		list(fs, &o.shapes, "cases", hot+","+spread, "comma-separated cases to run")
	case "tracing":
		fs.IntVar(&o.skus, "skus", 1000, "SKUs the orders pick from at random")
		fs.IntVar(&o.runs, "rounds", defaultTracingRounds, "rounds of the two services, one after the other, each measured -duration after -warmup")
		fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of each round with tracing on to this file, suffixed with the round's number")
	case "events":
		fs.IntVar(&o.events, "events", 5000, "orders each drain pays, their events waiting in the outbox, before its replicas start")
		fs.IntVar(&o.rate, "rate", defaultEventRate, "payments per second of the paced phase, open loop (default: the layered/spread orders/s of docs/BENCHMARKS.md when the bench was written)")
		fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of each phase to this file, suffixed -drain-1, -drain-2 and -paced")
	case "likes":
		fs.IntVar(&o.posts, "posts", 1000, "posts the spread scenarios pick from at random")
		fs.Func("shards", "comma-separated counts of counter rows of the hot post, one scenario each (default "+intList(defaultShardCounts)+")", func(v string) error {
			counts, err := parseShardCounts(v)
			o.shardCounts = counts
			return err
		})
		fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of each layered scenario to this file, suffixed with the scenario's shape")
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return o, errHelpShown
		}
		return o, ErrUsage
	}
	if o.dbURL == "" {
		o.dbURL = cfg.DatabaseURL
	}
	if what == "likes" && o.shardCounts == nil {
		o.shardCounts = defaultShardCounts
	}
	o.serviceConns = int(cfg.DBMaxConns + max(cfg.DBMaxConns/2, 2))
	for _, a := range strings.Split(*redis, ",") {
		if a = strings.TrimSpace(a); a != "" {
			o.redisAddrs = append(o.redisAddrs, a)
		}
	}
	switch {
	case fs.NArg() > 0:
		return o, fmt.Errorf("bench %s: unexpected arguments %q", what, fs.Args())
	case o.clients < 1 || o.duration <= 0 || o.warmup < 0 || o.settle < 0 || o.skus < 1 || o.stormOrders < 1 || o.stormClicks < 1 || o.storms < 0 || o.posts < 1 || o.clicks < 1 || o.runs < 1 || o.payRate < 1 || o.events < 1 || o.rate < 1 || o.seatRows < 1 || o.seatRows > seats.MaxRows:
		return o, fmt.Errorf("bench %s: -clients, -duration and the counts must be positive (-seat-rows at most %d), -warmup, -settle and -storms not negative", what, seats.MaxRows)
	case len(o.redisAddrs) == 0:
		return o, fmt.Errorf("bench %s: -redis needs at least one node", what)
	}
	return o, nil
}

// list defines a comma-separated list flag with a default.
func list(fs *flag.FlagSet, dst *[]string, name, def, usage string) {
	set := func(v string) error {
		*dst = nil
		for _, f := range strings.Split(v, ",") {
			if f = strings.TrimSpace(f); f != "" {
				*dst = append(*dst, f)
			}
		}
		return nil
	}
	set(def) //nolint:errcheck // set never fails
	fs.Func(name, usage+" (default "+def+")", set)
}

// intList is counts as a flag spells them: comma-separated.
func intList(counts []int) string {
	s := make([]string, len(counts))
	for i, n := range counts {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}

// parseShardCounts reads -shards: counts of counter rows, 1 to
// likes.MaxShards each.
func parseShardCounts(v string) ([]int, error) {
	var counts []int
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > likes.MaxShards {
			return nil, fmt.Errorf("want counts of 1–%d counter rows, got %q", likes.MaxShards, f)
		}
		counts = append(counts, n)
	}
	return counts, nil
}

func benchOrders(ctx context.Context, o benchOptions, logger *slog.Logger) (err error) {
	db, pool, err := openScratch(ctx, o, logger)
	if err != nil {
		return err
	}
	defer func() { pool.Close(); err = errors.Join(err, db.drop()) }()
	fx, err := seedBench(ctx, pool, o)
	if err != nil {
		return err
	}
	svc, err := startService(ctx, o, db.url, "", fx.tokens)
	if err != nil {
		return err
	}
	defer svc.stop()
	raw := rawFlow{pool: pool, users: fx.userIDs}

	// Each scenario buys from products of its own (fx.skus, in the order
	// of orderScenarioNames), so none inherits the dead row versions of
	// another; hot and spread alternate raw, layered.
	var scenarios []scenario
	for i, name := range orderScenarioNames() {
		sc := scenario{name: name, skus: fx.skus[i], order: raw.order}
		if strings.HasPrefix(name, "layered/") {
			sc.order, sc.layered = svc.order, true
		}
		scenarios = append(scenarios, sc)
	}
	results, err := runScenarios(ctx, pool, o, scenarios, logger)
	if err != nil {
		return err
	}
	var report strings.Builder
	printReport(&report, o, results, svc.lockOutcomes())
	fmt.Fprint(os.Stdout, report.String())
	return o.doc.write(ctx, pool, o.redisAddrs, docblock.Block{Name: "benchmarks/orders", Rows: resultNames(results), Body: asMarkdown(report.String())})
}

// runScenarios measures each scenario in turn, each after a CHECKPOINT so
// that none pays for flushing the dirty pages of the one before it.
func runScenarios(ctx context.Context, pool *pgxpool.Pool, o benchOptions, scenarios []scenario, logger *slog.Logger) ([]result, error) {
	var results []result
	for _, sc := range scenarios {
		if _, err := pool.Exec(ctx, "CHECKPOINT"); err != nil {
			logger.Warn("bench: checkpoint refused; scenarios may pay for each other's writes", "err", err)
		}
		stopProfile, err := startProfile(o.cpuProfile, sc)
		if err != nil {
			return nil, err
		}
		logger.Info("bench: running", "scenario", sc.name)
		r := measure(ctx, sc, o.clients, o.warmup, o.duration, o.minOps)
		stopProfile()
		// Close the connections the scenario opened, so the next one (the
		// service, with pools of its own) finds the server's slots free.
		pool.Reset()
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		results = append(results, r)
	}
	return results, nil
}

// startProfile writes a CPU profile of a layered scenario when asked to.
// The profile is of the whole process: the service and the load generator.
func startProfile(path string, sc scenario) (stop func(), err error) {
	if path == "" || !sc.layered {
		return func() {}, nil
	}
	ext := filepath.Ext(path)
	shape := sc.name[strings.LastIndex(sc.name, "/")+1:]
	f, err := os.Create(strings.TrimSuffix(path, ext) + "-" + shape + ext)
	if err != nil {
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// printReport writes the results as a Markdown table, then the ratio of the
// layered flow to the baseline and whether the goal is met, per case.
func printReport(w io.Writer, o benchOptions, results []result, lockOutcomes string) {
	fmt.Fprintf(w, "\nshop bench orders: %d clients, %s measured after %s warmup per scenario, spread over %d SKUs; %d CPUs, GOMAXPROCS %d, %s\n\n",
		o.clients, o.duration, o.warmup, o.skus, runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.Version())
	byName := printScenarios(w, "orders/s", results)
	for _, shape := range []string{"hot", "spread"} {
		raw, layered := byName["raw/"+shape], byName["layered/"+shape]
		if raw.orders == 0 {
			continue
		}
		ratio := layered.rate() / raw.rate()
		verdict := "MET"
		if ratio < goalRatio || layered.p99 >= goalP99 || layered.orders == 0 {
			verdict = "NOT MET"
		}
		fmt.Fprintf(w, "%-6s layered/raw = %.2f, layered p99 %s: goal (ratio >= %.1f, p99 < %s) %s\n",
			shape, ratio, millis(layered.p99), goalRatio, goalP99, verdict)
	}
	fmt.Fprintf(w, "service lock: %s\n", lockOutcomes)
}

// printScenarios writes the table of the scenarios' results, rate in
// unit, and returns the results by scenario name.
func printScenarios(w io.Writer, unit string, results []result) map[string]result {
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', tabwriter.Debug)
	fmt.Fprintf(tw, "| scenario\t %s\t p50\t p99\t errors\t\n", unit)
	fmt.Fprintln(tw, "|---\t---:\t---:\t---:\t---\t")
	byName := make(map[string]result, len(results))
	for _, r := range results {
		byName[r.name] = r
		fmt.Fprintf(tw, "| %s\t %.0f\t %s\t %s\t %s\t\n", r.name, r.rate(), millis(r.p50), millis(r.p99), r.errorSummary())
	}
	tw.Flush()
	fmt.Fprintln(w)
	return byName
}

func millis(d time.Duration) string {
	return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
}
