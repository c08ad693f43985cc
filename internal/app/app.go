// Package app assembles the service from its parts: the platform (pool,
// lock quorum, idempotency, auth, metrics, HTTP edge) and the domain
// packages. cmd/shop and the end-to-end tests build the service through it,
// so what the tests race against is what runs in production.
package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"
	"github.com/redis/go-redis/v9"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/shop-example/shop/docs"
	"github.com/shop-example/shop/internal/inventory"
	"github.com/shop-example/shop/internal/likes"
	"github.com/shop-example/shop/internal/orders"
	"github.com/shop-example/shop/internal/payments"
	"github.com/shop-example/shop/internal/platform/auth"
	"github.com/shop-example/shop/internal/platform/config"
	"github.com/shop-example/shop/internal/platform/httpx"
	"github.com/shop-example/shop/internal/platform/idempotency"
	"github.com/shop-example/shop/internal/platform/lock"
	"github.com/shop-example/shop/internal/platform/metrics"
	"github.com/shop-example/shop/internal/platform/outbox"
	"github.com/shop-example/shop/internal/platform/postgres"
	"github.com/shop-example/shop/internal/platform/ratelimit"
	"github.com/shop-example/shop/internal/platform/redisx"
	"github.com/shop-example/shop/internal/platform/tracing"
	"github.com/shop-example/shop/internal/refunds"
	"github.com/shop-example/shop/internal/seats"
	"github.com/shop-example/shop/web"
)

// Deps are the connections the service runs on. The caller owns them.
type Deps struct {
	Pool *pgxpool.Pool
	// Redis are the lock quorum's nodes. The rate limits are counted on
	// the first, unless SHOP_RATE_LIMIT_REDIS names another node, through
	// a client New opens (and Close closes).
	Redis  []*redis.Client
	Logger *slog.Logger
	// Now is the clock; nil means time.Now. Tests move it to expire orders.
	Now func() time.Time
	// Variants take layers off the flows that run on them, for the
	// ablation tests and the race lab's sandboxes; the zero value, what
	// production runs, takes none off.
	Variants Variants
	// LikeShards is how many counter rows a new post's like count is
	// spread over; 0 means likes.DefaultShards. The bench sets 1 for its
	// single-row baseline.
	LikeShards int
	// BlindSchemes switches the key schemes' transition rules off: a
	// scheme-2 replica neither reads nor takes scheme-1 names
	// (keyscheme.Scheme.Blind). The test that shows the rules are needed
	// uses it; nothing else may.
	BlindSchemes bool
	// Events are the events' settings that only tests change.
	Events EventDeps
	// SpanProcessor, when set, is handed every span of the replica, all
	// of them sampled (tests: an in-memory exporter behind a simple
	// processor; the bench: OTLP to a sink of its own, batched); nil
	// leaves tracing to the standard variables (config.Config.Tracing).
	SpanProcessor sdktrace.SpanProcessor
	// KeepSpans, when set, records the spans of the requests whose
	// context it returns true for, even with nothing exported, and
	// SpanProcessors see every span recorded (tracing.Config's Keep and
	// Processors): the race lab's copies of the service keep the spans
	// of their races' requests so (lab.Traced, lab.Recorder).
	KeepSpans      func(context.Context) bool
	SpanProcessors []sdktrace.SpanProcessor
}

// App is one replica of the service.
type App struct {
	// Echo serves the API. A tool attached from outside (the race lab)
	// adds its routes to API() and may route requests before the router
	// with Echo.Pre.
	Echo *echo.Echo
	// Metrics is the replica's registry, which GET /metrics serves.
	Metrics  *metrics.Metrics
	Orders   *orders.Service
	Payments *payments.Service
	Refunds  *refunds.Service
	Likes    *likes.Service
	Seats    *seats.Service

	cfg         config.Config
	deps        Deps
	replica     string
	v1          *echo.Group
	authn       *auth.Middleware
	locker      *lock.Locker
	idem        *idempotency.Store
	bookkeeping *pgxpool.Pool
	limits      limits
	readiness   *readyProbe
	events      *events
	tracing     *tracing.Tracing
}

// New builds the service on deps with the settings in cfg. Close releases
// what it opened itself.
func New(cfg config.Config, deps Deps) (*App, error) {
	if deps.Logger == nil {
		deps.Logger = slog.Default()
	}
	if deps.Now == nil {
		deps.Now = time.Now
	}
	replica := replicaName(cfg.ReplicaName)
	tc := tracing.Config{Settings: cfg.Tracing, Service: "shop", Instance: replica,
		Keep: deps.KeepSpans, Processors: deps.SpanProcessors}
	if deps.SpanProcessor != nil {
		tc.Processors, tc.Record = slices.Concat(tc.Processors, []sdktrace.SpanProcessor{deps.SpanProcessor}), true
	}
	tr, err := tracing.New(context.Background(), tc)
	if err != nil {
		return nil, err
	}
	var tp trace.TracerProvider
	if tr.On() {
		tp = tr.Provider()
		// Every line logged in a request's context names its trace.
		deps.Logger = slog.New(tracing.LogHandler(deps.Logger.Handler()))
	}
	m := metrics.New()
	scheme := cfg.KeyScheme
	scheme.Blind = deps.BlindSchemes && scheme.Version > 1
	locker, err := lock.New(deps.Redis, lock.Options{
		Mode:    lock.Mode(cfg.LockMode),
		Scheme:  scheme,
		Logger:  deps.Logger,
		Metrics: m,
	})
	if err != nil {
		return nil, fmt.Errorf("lock: %w", err)
	}
	// The keyed flows claim and complete their keys in their own
	// transactions, on deps.Pool. What the idempotency store runs apart
	// from them (a refusal stored after a rollback, the release of a claim
	// a committed phase left, the sweep) runs on a pool of its own, so it
	// never waits behind the flows for a connection. It commits durably,
	// as the flows do: a replay after a crash or a failover gets the
	// answer that was sent. SHOP_IDEMPOTENCY_ASYNC_COMMIT trades that for
	// a WAL flush saved per refusal (package idempotency, "Commits").
	bookkeeping, err := postgres.SecondPool(context.Background(), deps.Pool, max(deps.Pool.Config().MaxConns/2, 2), cfg.IdempotencyAsyncCommit)
	if err != nil {
		return nil, err
	}
	idem := idempotency.NewStore(bookkeeping, idempotency.Options{Scheme: scheme, Logger: deps.Logger, Metrics: m, Now: deps.Now})
	users := auth.NewStore(deps.Pool)
	authn := auth.NewMiddleware(users, cfg.AdminToken)

	orderCfg := orders.Config{
		DB:       deps.Pool,
		Locker:   locker,
		Metrics:  m,
		Logger:   deps.Logger,
		OrderTTL: cfg.OrderTTL,
		Now:      deps.Now,
	}
	orderSvc, err := orders.NewService(deps.Variants.orders(orderCfg))
	if err != nil {
		bookkeeping.Close()
		return nil, err
	}
	paySvc, err := newPayments(cfg, deps, locker, m)
	if err != nil {
		bookkeeping.Close()
		return nil, err
	}
	refundSvc, err := newRefunds(cfg, deps, m)
	if err != nil {
		bookkeeping.Close()
		return nil, err
	}
	likeSvc, err := newLikes(cfg, deps, locker, m)
	if err != nil {
		bookkeeping.Close()
		return nil, err
	}
	seatSvc, err := newSeats(cfg, deps, locker, m)
	if err != nil {
		bookkeeping.Close()
		return nil, err
	}
	limit, err := newLimits(cfg, deps, m)
	if err != nil {
		bookkeeping.Close()
		return nil, err
	}

	ev, err := newEvents(cfg, deps, orderCfg, m, replica, tp)
	if err != nil {
		limit.close()
		bookkeeping.Close()
		return nil, err
	}
	readiness, err := newReadyProbe(deps.Pool, locker, deps.Logger, m)
	if err != nil {
		ev.close()
		limit.close()
		bookkeeping.Close()
		return nil, err
	}

	e := httpx.New(m, httpx.Options{Logger: deps.Logger, RequestTimeout: cfg.RequestTimeout, TrustedProxies: cfg.TrustedProxies,
		Tracing: tp})
	a := &App{Echo: e, Metrics: m, Orders: orderSvc, Payments: paySvc, Refunds: refundSvc, Likes: likeSvc, Seats: seatSvc, cfg: cfg, deps: deps, replica: replica,
		authn: authn, locker: locker, idem: idem, bookkeeping: bookkeeping, limits: limit, readiness: readiness, events: ev, tracing: tr}
	e.Use(servedBy(replica))
	if deps.Events.PublishAfterCommit {
		e.Use(ev.publishAfterCommit(deps.Events.Lost))
	}

	e.GET("/healthz", func(c echo.Context) error { return c.JSON(http.StatusOK, map[string]string{"status": "ok"}) })
	e.GET("/readyz", readiness.handle)
	// The contract itself (docs/openapi.yaml, embedded), so a client can
	// fetch what this replica answers to.
	e.GET("/openapi.yaml", func(c echo.Context) error { return c.Blob(http.StatusOK, "application/yaml", docs.OpenAPI()) })

	// Layer 0 on the routes that take an Idempotency-Key: Atomic, the
	// flow claims and completes the key in its own transaction.
	atomicFor := func(flow string) echo.MiddlewareFunc { return deps.Variants.keys(idem.Atomic(flow)) }
	v1 := e.Group("/v1")
	a.v1 = v1
	auth.Register(v1, users, authn, limit.register)
	// The admin's routes carry no limit: one trusted operator's token,
	// whose scripts (seed, restock) must not be throttled.
	inventory.Register(v1, inventory.NewStore(deps.Pool, deps.Now), inventory.Guards{
		Admin: authn.Admin, Idempotency: atomicFor(inventory.FlowRestock), PublicLimit: limit.public,
	})
	orders.Register(v1, orderSvc, orders.Guards{
		User: authn.User, Idempotency: atomicFor(orders.FlowCreate), OrderLimit: limit.orders, WriteLimit: limit.writes,
	})
	payments.Register(v1, paySvc, payments.Guards{
		User: authn.User, Idempotency: atomicFor(payments.FlowPay), WriteLimit: limit.writes,
	})
	// An order's owner or the operator refunds it; the operator's
	// refunds, like the admin's other routes, carry no limit.
	refunds.Register(v1, refundSvc, refunds.Guards{
		OwnerOrAdmin: authn.UserOrAdmin, Idempotency: atomicFor(refunds.FlowRefund), WriteLimit: forUsers(limit.writes),
	})
	// No idempotency middleware on the like routes: PUT and DELETE are
	// idempotent by meaning (package likes).
	likes.Register(v1, likeSvc, likes.Guards{
		User: authn.User, Admin: authn.Admin, WriteLimit: limit.writes, LikeLimit: limit.likes,
	})
	seats.Register(v1, seatSvc, seats.Guards{
		User: authn.User, Admin: authn.Admin, Idempotency: atomicFor,
		PublicLimit: limit.public, WriteLimit: limit.writes,
	})

	// The shop in a browser. Its race lab attaches itself from outside
	// (harness/lab), on demo servers only.
	web.Register(e)
	return a, nil
}

// limits are the rate limits of the routes (package ratelimit).
type limits struct {
	register echo.MiddlewareFunc // POST /v1/users, per client address
	public   echo.MiddlewareFunc // the product reads, per client address
	writes   echo.MiddlewareFunc // a user's writes other than creating an order, per user
	orders   echo.MiddlewareFunc // creating an order, per user
	likes    echo.MiddlewareFunc // likes and unlikes, per user
	// limiter counts them, and the limits of routes added from outside
	// (App.Limit).
	limiter *ratelimit.Limiter
	// rdb is the limiter's client; nil with the limits off. It is its own
	// even on a lock node: its own connections, so a limiter call never
	// waits for a lock's connection nor a lock for the limiter's, and its
	// own timeout, the limiter's bound.
	rdb *redis.Client
}

// newLimits builds the rate limits of cfg, counted on one Redis node:
// SHOP_RATE_LIMIT_REDIS, by default the first lock node (package ratelimit
// says why one node and not the quorum).
func newLimits(cfg config.Config, deps Deps, m *metrics.Metrics) (limits, error) {
	var l limits
	if !cfg.RateLimit.Off {
		addr := cfg.RateLimit.Redis
		if addr == "" && len(deps.Redis) > 0 {
			addr = deps.Redis[0].Options().Addr
		}
		if addr == "" {
			return limits{}, errors.New("rate limits: no Redis node to count them on")
		}
		l.rdb = redisx.ClientWithin(addr, cfg.RateLimit.Timeout)
	}
	limiter, err := ratelimit.New(l.rdb, ratelimit.Options{
		Off: cfg.RateLimit.Off, Timeout: cfg.RateLimit.Timeout, Metrics: m, Logger: deps.Logger,
	})
	if err != nil {
		l.close()
		return limits{}, err
	}
	l.limiter = limiter
	for _, p := range []struct {
		mw     *echo.MiddlewareFunc
		policy ratelimit.Policy
	}{
		{&l.register, ratelimit.Policy{Name: "register", Rate: ratelimit.Rate(cfg.RateLimit.Register), Per: ratelimit.PerAddress}},
		{&l.public, ratelimit.Policy{Name: "public", Rate: ratelimit.Rate(cfg.RateLimit.Public), Per: ratelimit.PerAddress}},
		{&l.writes, ratelimit.Policy{Name: "writes", Rate: ratelimit.Rate(cfg.RateLimit.Writes), Per: ratelimit.PerUser}},
		{&l.orders, ratelimit.Policy{Name: "orders", Rate: ratelimit.Rate(cfg.RateLimit.Orders), Per: ratelimit.PerUser}},
		{&l.likes, ratelimit.Policy{Name: "likes", Rate: ratelimit.Rate(cfg.RateLimit.Likes), Per: ratelimit.PerUser}},
	} {
		if *p.mw, err = limiter.Limit(p.policy); err != nil {
			l.close()
			return limits{}, err
		}
	}
	return l, nil
}

func (l limits) close() {
	if l.rdb != nil {
		_ = l.rdb.Close()
	}
}

// MetricsHandler serves GET /metrics, in the Prometheus text format, for a
// listener of its own (SHOP_METRICS_ADDR): the scraper's port, not the
// API's, where /metrics is an unknown route like any other.
func (a *App) MetricsHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", a.Metrics.Handler())
	return mux
}

// newPayments builds the pay flow on the gateway at cfg.GatewayURL, its
// lock waiters bounded by payments.LockTries.
func newPayments(cfg config.Config, deps Deps, locker *lock.Locker, m *metrics.Metrics) (*payments.Service, error) {
	const attempts = 2
	gw, err := payments.NewGateway(cfg.GatewayURL, payments.GatewayOptions{Timeout: cfg.GatewayTimeout, Attempts: attempts})
	if err != nil {
		return nil, err
	}
	payLocker, err := locker.WithTries(payments.LockTries)
	if err != nil {
		return nil, err
	}
	return payments.NewService(deps.Variants.payments(payments.Config{
		DB:      deps.Pool,
		Gateway: gw,
		Locker:  payLocker,
		Metrics: m,
		Logger:  deps.Logger,
		Now:     deps.Now,
		// Inside the request timeout, with room to store and send the
		// answer (config.checkTimings): a request that runs out of budget
		// after its charge answers 202 processing, never a timeout.
		Budget:         cfg.PaymentBudget,
		ReconcileAfter: cfg.ReconcileAfter,
	}))
}

// forUsers is limit on a user's requests; the admin's pass unlimited,
// as on the admin's own routes.
func forUsers(limit echo.MiddlewareFunc) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		limited := limit(next)
		return func(c echo.Context) error {
			if p, _ := auth.PrincipalFrom(c.Request().Context()); p.Admin {
				return next(c)
			}
			return limited(c)
		}
	}
}

// newRefunds builds the refund flow on the gateway at cfg.GatewayURL,
// within the payment flow's budget and reconcile delay.
func newRefunds(cfg config.Config, deps Deps, m *metrics.Metrics) (*refunds.Service, error) {
	gw, err := payments.NewGateway(cfg.GatewayURL, payments.GatewayOptions{Timeout: cfg.GatewayTimeout, Attempts: 2})
	if err != nil {
		return nil, err
	}
	return refunds.NewService(deps.Variants.refunds(refunds.Config{
		DB:      deps.Pool,
		Gateway: gw,
		Metrics: m,
		Logger:  deps.Logger,
		Now:     deps.Now,
		// As a payment's: inside the request timeout, with room to store
		// and send the answer; a refund that runs out of budget after its
		// call answers 202 processing, never a timeout.
		Budget:         cfg.PaymentBudget,
		ReconcileAfter: cfg.ReconcileAfter,
	}))
}

// likeReconcileInterval is how often each replica checks the like counts
// against the likes: a read of every like, so not every job interval.
const likeReconcileInterval = time.Hour

// newLikes builds posts and likes with the like lock strategy
// (SHOP_LIKE_LOCK) of cfg; the Redis lock, when it is that, waits for
// likes.LockWait, shorter than the other flows' wait.
func newLikes(cfg config.Config, deps Deps, locker *lock.Locker, m *metrics.Metrics) (*likes.Service, error) {
	strategy, err := likes.ParseLockStrategy(cfg.LikeLock)
	if err != nil {
		return nil, fmt.Errorf("SHOP_LIKE_LOCK: %w", err)
	}
	likeLocker, err := locker.WithWaitBudget(likes.LockWait)
	if err != nil {
		return nil, err
	}
	return likes.NewService(deps.Variants.likes(likes.Config{
		DB:      deps.Pool,
		Locker:  likeLocker,
		Metrics: m,
		Logger:  deps.Logger,
		Now:     deps.Now,
		Shards:  deps.LikeShards,
		Lock:    strategy,
	}))
}

// newSeats builds events, holds and bookings with the seat lock strategy
// (SHOP_SEAT_LOCK, which config.FromEnv checked) and the caps
// (SHOP_SEAT_CAP_*) of cfg.
func newSeats(cfg config.Config, deps Deps, locker *lock.Locker, m *metrics.Metrics) (*seats.Service, error) {
	strategy, err := seats.ParseLockStrategy(cfg.SeatLock)
	if err != nil {
		return nil, fmt.Errorf("SHOP_SEAT_LOCK: %w", err)
	}
	return seats.NewService(deps.Variants.seats(seats.Config{
		DB:      deps.Pool,
		Locker:  locker,
		Metrics: m,
		Logger:  deps.Logger,
		Now:     deps.Now,
		HoldTTL: cfg.SeatHoldTTL,
		Lock:    strategy,
		Caps:    seats.Caps{SeatsPerHold: cfg.SeatCaps.PerHold, HoldsPerEvent: cfg.SeatCaps.Holds, SeatsPerEvent: cfg.SeatCaps.Seats},
	}))
}

// Close releases the connections New opened (not those in Deps). Call it
// once the server has drained: it first waits for the idempotency keys
// still being released in the background.
func (a *App) Close() {
	a.idem.Wait()
	a.bookkeeping.Close()
	a.limits.close()
	a.events.close()
	ctx, cancel := context.WithTimeout(context.Background(), tracing.FlushTimeout)
	defer cancel()
	_ = a.tracing.Shutdown(ctx) // the spans not exported by now are lost, as with a crash
}

// RunJobs runs the background jobs of this replica until ctx ends: order
// expiry, payment and refund reconciliation, idempotency-key sweeping, the check of
// the like counts, seat hold expiry, the events (RunEvents), and the readiness check that keeps shop_ready and
// shop_degraded current. Every replica runs them; each is safe to run
// concurrently with its twins elsewhere.
func (a *App) RunJobs(ctx context.Context) {
	ctx = a.traced(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { a.Orders.RunExpiry(ctx, a.cfg.JobInterval) })
	wg.Go(func() { a.Payments.RunReconciler(ctx, a.cfg.JobInterval) })
	wg.Go(func() { a.Refunds.RunReconciler(ctx, a.cfg.JobInterval) })
	wg.Go(func() { a.idem.RunSweeper(ctx, time.Hour) })
	wg.Go(func() { a.Likes.RunReconciler(ctx, likeReconcileInterval) })
	wg.Go(func() { a.Seats.RunExpiry(ctx, a.cfg.JobInterval) })
	wg.Go(func() { a.readiness.run(ctx, a.cfg.JobInterval) })
	wg.Go(func() { a.RunEvents(ctx) })
	wg.Wait()
}

// RunEvents runs this replica's outbox relay and event consumers until ctx
// ends, unless SHOP_EVENTS=off: the fulfilment, and with SHOP_MAILER_URL
// set the mail of receipts, tickets and refunds (DESIGN.md §9). RunJobs
// runs it.
func (a *App) RunEvents(ctx context.Context) {
	if !a.cfg.Events.Off {
		a.events.run(a.traced(ctx))
	}
}

// traced is ctx with the replica's tracer provider, for the roots of the
// traces its jobs and consumers start (tracing.WithProvider).
func (a *App) traced(ctx context.Context) context.Context {
	if !a.tracing.On() {
		return ctx
	}
	return tracing.WithProvider(ctx, a.tracing.Provider())
}

// Relay is this replica's outbox relay.
func (a *App) Relay() *outbox.Relay { return a.events.relay }
