package bench

// `shop bench payments` measures the pay flow (internal/payments) through
// the layered HTTP service against a raw baseline that makes the same
// gateway call and then one transaction, and how long a storm of duplicate
// pay requests takes to settle.
//
// What is measured:
//   - distinct orders, over -duration after -warmup per flow, with -clients
//     concurrent clients, each payment for an order of its own that is
//     pending: successful payments per second (a raw payment whose
//     transaction committed, or an HTTP 201 that is not a replay), the
//     exact p50 and p99 of their latency as the client saw it, and the
//     failures by kind. Then the ratio layered/raw against the goal.
//   - duplicate storms: -storm-orders orders, each sent -storm-clicks pay
//     requests at once through the layered service (two thirds of them
//     share one Idempotency-Key, a client retrying; the rest have a key
//     each, a user clicking again). The settle time runs from the first
//     request sent to the last answer received; "paid after", per order,
//     from its first request to the answer of the one 201 that paid it.
//     Afterwards each order must be paid, with one succeeded payment, none
//     left processing, and one charge in the gateway's audit, the one the
//     payment recorded.
//
// The raw baseline is what the pay flow cannot do with less: the charge
// through the same payments.Gateway client (a fresh key per payment), then
// one transaction that moves the order to paid and inserts the succeeded
// payment. No HTTP in front, no auth, no idempotency key, no lock, no
// processing row, no re-read of the order. Its pool has a connection per
// client. The layered flow is the real service (app.New) behind a real
// http.Server on 127.0.0.1: bearer token, idempotency claim, the Redis lock
// on the order, the transaction that opens the processing payment, the
// gateway call, the transaction that settles it and pays the order, the
// idempotency completion, JSON in and out.
//
// Both flows call one gateway: the stand-in card processor (package
// gateway), in this process on a loopback port of its own, with its journal
// in a temporary directory. It fsyncs every charge, for both flows alike.
//
// What is not measured: a real network or a real card processor, TLS,
// several replicas, the background jobs (not started, so the reconciler
// settles nothing), declines and timeouts (every payment uses pm_card_ok),
// retries of the refused storm clicks. As in `bench orders`, the load
// generator, the service, the gateway, PostgreSQL and Redis share the
// machine's CPUs.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shop-example/shop/harness/books"
	"github.com/shop-example/shop/harness/docblock"
	gw "github.com/shop-example/shop/harness/gateway"
	"github.com/shop-example/shop/internal/payments"
	"github.com/shop-example/shop/internal/platform/config"
)

const (
	// payOrdersPerSecond sizes the pending orders seeded for each
	// throughput scenario: more payments per second than either flow makes
	// here (the gateway alone fsyncs once per charge). If the report shows
	// "out of orders", raise it.
	payOrdersPerSecond = 3000
	// payPrefix names the one product every bench order holds one unit of.
	payPrefix = "BENCHPAY-"
	payPrice  = 1000 // cents; the price sqlSeedProducts gives
)

func benchPayments(ctx context.Context, o benchOptions, logger *slog.Logger) (err error) {
	cfg, err := config.FromEnv(os.Getenv)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	db, pool, err := openScratch(ctx, o, logger)
	if err != nil {
		return err
	}
	defer func() { pool.Close(); err = errors.Join(err, db.drop()) }()
	userIDs, tokens, err := seedUsers(ctx, pool, o.clients)
	if err != nil {
		return err
	}
	if _, err := pool.Exec(ctx, sqlSeedProducts, payPrefix, 1, benchStock); err != nil {
		return fmt.Errorf("seed product: %w", err)
	}
	perScenario := int(payOrdersPerSecond * (o.warmup + o.duration).Seconds())
	rawOrders, err := seedPendingOrders(ctx, pool, userIDs, perScenario)
	if err != nil {
		return err
	}
	layeredOrders, err := seedPendingOrders(ctx, pool, userIDs, perScenario)
	if err != nil {
		return err
	}
	stormOrders := make([]*pendingOrders, o.storms)
	for i := range stormOrders {
		if stormOrders[i], err = seedPendingOrders(ctx, pool, userIDs, o.stormOrders); err != nil {
			return err
		}
	}
	if _, err := pool.Exec(ctx, "ANALYZE"); err != nil {
		return fmt.Errorf("analyze: %w", err)
	}

	processor, processorSrv, err := startGateway(ctx, gw.Options{})
	if err != nil {
		return err
	}
	defer processorSrv.stop()
	// The client the service builds for itself (app.newPayments), built the
	// same way for the baseline.
	gwClient, err := payments.NewGateway(processorSrv.base, payments.GatewayOptions{Timeout: cfg.GatewayTimeout, Attempts: 2})
	if err != nil {
		return err
	}
	svc, err := startService(ctx, o, db.url, processorSrv.base, tokens)
	if err != nil {
		return err
	}
	defer svc.stop()

	raw := rawPayFlow{pool: pool, gateway: gwClient, orders: rawOrders}
	layered := layeredPayFlow{svc: svc, orders: layeredOrders}
	results, err := runScenarios(ctx, pool, o, []scenario{
		{name: "raw/distinct", order: raw.pay},
		{name: "layered/distinct", order: layered.pay, layered: true},
	}, logger)
	if err != nil {
		return err
	}

	storms, err := runStorms(ctx, o, svc, processor, pool, stormOrders, logger)
	if err != nil {
		return err
	}
	// The books audit over the whole run: every order of every scenario
	// against its payments and the gateway's charges.
	audit, err := books.Check(ctx, pool, nil, processorSrv.base)
	if err != nil {
		return err
	}
	var report strings.Builder
	printPaymentsReport(&report, o, results, storms, audit, svc.lockOutcomes())
	fmt.Fprint(os.Stdout, report.String())
	rows := append(resultNames(results), paymentRowNames(len(storms))[len(results):]...)
	if err := o.doc.write(ctx, pool, o.redisAddrs, docblock.Block{Name: "benchmarks/payments", Rows: rows, Body: asMarkdown(report.String())}); err != nil {
		return err
	}
	for _, s := range storms {
		if len(s.violations) > 0 {
			return errors.New("bench payments: the one-charge-per-order invariant was broken (see the report)")
		}
	}
	if !audit.OK() || audit.InFlight != 0 {
		return errors.New("bench payments: the books do not balance (see the report)")
	}
	return nil
}

// startGateway runs the stand-in card processor in this process, on a
// loopback port of its own, with its journal in a new temporary directory
// that stop removes; opts says the rest (its journal and logger are
// these).
func startGateway(ctx context.Context, opts gw.Options) (*gw.Server, *service, error) {
	dir, err := os.MkdirTemp("", "shop-bench-gateway-")
	if err != nil {
		return nil, nil, fmt.Errorf("gateway journal: %w", err)
	}
	opts.JournalPath, opts.Logger = filepath.Join(dir, "journal.jsonl"), serviceLogger()
	processor, err := gw.New(opts)
	if err != nil {
		os.RemoveAll(dir) //nolint:errcheck
		return nil, nil, err
	}
	srv, err := serveLoopback(ctx, processor.Handler(), "/healthz", 1, func() {
		processor.Close() //nolint:errcheck // every record was fsynced when it was answered
		os.RemoveAll(dir) //nolint:errcheck
	})
	if err != nil {
		return nil, nil, err
	}
	return processor, srv, nil
}

// pendingOrders are orders seeded pending_payment, handed out once each,
// or repeat times each in a row when repeat is more than 1.
type pendingOrders struct {
	ids    []string
	owners []int // the client (user) whose order each is
	repeat int
	next   atomic.Int64
}

// take hands out the next order not yet taken, or ok false when none is
// left.
func (p *pendingOrders) take() (id string, owner int, ok bool) {
	i := (int(p.next.Add(1)) - 1) / max(p.repeat, 1)
	if i >= len(p.ids) {
		return "", 0, false
	}
	return p.ids[i], p.owners[i], true
}

// outOfOrders is the failure of a payment with no order left to pay. The
// pause keeps a client that ran out from spinning on the CPUs the others
// are measured on.
func outOfOrders() string {
	time.Sleep(10 * time.Millisecond)
	return "out of orders"
}

// sqlSeedPendingOrders inserts pending orders, one unit of the bench
// product each, in one statement: the rows orders.Insert writes, for ids
// $1 owned by users $2.
const sqlSeedPendingOrders = `WITH o AS (
		INSERT INTO orders (id, user_id, request_key, status, total_cents, version, created_at, updated_at, expires_at)
		SELECT t.id, t.user_id, t.id::text, 'pending_payment', $3, 1, $4::timestamptz, $4::timestamptz, $4::timestamptz + interval '1 day'
		FROM unnest($1::uuid[], $2::uuid[]) AS t (id, user_id)
		RETURNING id)
	INSERT INTO order_items (order_id, sku, quantity, unit_price_cents)
	SELECT o.id, $5, 1, $3 FROM o`

// seedPendingOrders creates n pending orders, owned by the users in turn,
// each with one unit of the bench product, in one statement.
func seedPendingOrders(ctx context.Context, pool *pgxpool.Pool, userIDs []string, n int) (*pendingOrders, error) {
	p := &pendingOrders{ids: make([]string, n), owners: make([]int, n)}
	owners := make([]string, n)
	for i := range n {
		id, err := uuid.NewV7()
		if err != nil {
			return nil, fmt.Errorf("seed orders: %w", err)
		}
		p.ids[i], p.owners[i] = id.String(), i%len(userIDs)
		owners[i] = userIDs[p.owners[i]]
	}
	now := time.Now().UTC().Truncate(time.Microsecond)
	if _, err := pool.Exec(ctx, sqlSeedPendingOrders, p.ids, owners, payPrice, now, payPrefix+"1"); err != nil {
		return nil, fmt.Errorf("seed orders: %w", err)
	}
	return p, nil
}

// printPaymentsReport writes the throughput table and the ratio against the
// goal, then a line per storm, then the cross-checks.
func printPaymentsReport(w io.Writer, o benchOptions, results []result, storms []stormResult, audit books.Report, lockOutcomes string) {
	fmt.Fprintf(w, "\nshop bench payments: %d clients, %s measured after %s warmup per scenario; %d storms of %d orders × %d clicks (%d sharing a key); %d CPUs, GOMAXPROCS %d, %s\n\n",
		o.clients, o.duration, o.warmup, o.storms, o.stormOrders, o.stormClicks, sharedClicks(o.stormClicks),
		runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.Version())
	byName := printScenarios(w, "payments/s", results)
	if raw, layered := byName["raw/distinct"], byName["layered/distinct"]; raw.orders > 0 {
		ratio := layered.rate() / raw.rate()
		verdict := "MET"
		if ratio < goalRatio || layered.orders == 0 {
			verdict = "NOT MET"
		}
		fmt.Fprintf(w, "distinct layered/raw = %.2f: goal (ratio >= %.1f) %s\n\n", ratio, goalRatio, verdict)
	}
	if len(storms) > 0 {
		printStorms(w, storms)
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w, audit)
	fmt.Fprintf(w, "service lock (whole run): %s\n", lockOutcomes)
}
