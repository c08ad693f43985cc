// Package app assembles the service from its parts: the platform (pool,
// lock quorum, idempotency, auth, metrics, HTTP edge) and the domain
// packages. cmd/shop and the end-to-end tests build the service through it,
// so what the tests race against is what runs in production.
package app

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"
	"github.com/redis/go-redis/v9"

	"github.com/shop-example/shop/internal/inventory"
	"github.com/shop-example/shop/internal/orders"
	"github.com/shop-example/shop/internal/payments"
	"github.com/shop-example/shop/internal/platform/auth"
	"github.com/shop-example/shop/internal/platform/config"
	"github.com/shop-example/shop/internal/platform/httpx"
	"github.com/shop-example/shop/internal/platform/idempotency"
	"github.com/shop-example/shop/internal/platform/lock"
	"github.com/shop-example/shop/internal/platform/metrics"
	"github.com/shop-example/shop/internal/platform/postgres"
)

// Deps are the connections the service runs on. The caller owns them.
type Deps struct {
	Pool   *pgxpool.Pool
	Redis  []*redis.Client
	Logger *slog.Logger
	// Now is the clock; nil means time.Now. Tests move it to expire orders.
	Now func() time.Time
}

// App is one replica of the service.
type App struct {
	Echo     *echo.Echo
	Metrics  *metrics.Metrics
	Orders   *orders.Service
	Payments *payments.Service

	cfg         config.Config
	deps        Deps
	locker      *lock.Locker
	idem        *idempotency.Store
	bookkeeping *pgxpool.Pool
	readiness   *readyProbe
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
	m := metrics.New()
	locker, err := lock.New(deps.Redis, lock.Options{
		Mode:    lock.Mode(cfg.LockMode),
		Logger:  deps.Logger,
		Metrics: m,
	})
	if err != nil {
		return nil, fmt.Errorf("lock: %w", err)
	}
	// Idempotency bookkeeping commits without waiting for the WAL flush;
	// see package idempotency for why that is safe.
	bookkeeping, err := postgres.AsyncCommitPool(context.Background(), deps.Pool, max(deps.Pool.Config().MaxConns/2, 2))
	if err != nil {
		return nil, err
	}
	idem := idempotency.NewStore(bookkeeping, idempotency.Options{Logger: deps.Logger, Metrics: m, Now: deps.Now})
	users := auth.NewStore(deps.Pool)
	authn := auth.NewMiddleware(users, cfg.AdminToken)

	orderSvc, err := orders.NewService(orders.Config{
		Store:    orders.NewStore(deps.Pool),
		Locker:   locker,
		Metrics:  m,
		Logger:   deps.Logger,
		OrderTTL: cfg.OrderTTL,
		Now:      deps.Now,
		Defences: orders.AllDefences(),
	})
	if err != nil {
		bookkeeping.Close()
		return nil, err
	}
	paySvc, err := newPayments(cfg, deps, orderSvc, locker, m)
	if err != nil {
		bookkeeping.Close()
		return nil, err
	}

	readiness, err := newReadyProbe(deps.Pool, locker, deps.Logger, m)
	if err != nil {
		bookkeeping.Close()
		return nil, err
	}

	e := httpx.New(m, httpx.Options{Logger: deps.Logger})
	a := &App{Echo: e, Metrics: m, Orders: orderSvc, Payments: paySvc, cfg: cfg, deps: deps, locker: locker, idem: idem, bookkeeping: bookkeeping, readiness: readiness}

	e.GET("/healthz", func(c echo.Context) error { return c.JSON(http.StatusOK, map[string]string{"status": "ok"}) })
	e.GET("/readyz", readiness.handle)

	v1 := e.Group("/v1")
	auth.Register(v1, users, authn)
	inventory.Register(v1, inventory.NewStore(deps.Pool, deps.Now), inventory.Guards{
		Admin: authn.Admin, Idempotency: idem.For(inventory.FlowRestock),
	})
	orders.Register(v1, orderSvc, orders.Guards{User: authn.User, Idempotency: idem.For(orders.FlowCreate)})
	payments.Register(v1, paySvc, payments.Guards{User: authn.User, Idempotency: idem.For(payments.FlowPay)})
	return a, nil
}

// MetricsHandler serves GET /metrics, in the Prometheus text format, for a
// listener of its own (SHOP_METRICS_ADDR): the scraper's port, not the
// API's, where /metrics is an unknown route like any other.
func (a *App) MetricsHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", a.Metrics.Handler())
	return mux
}

// newPayments builds the pay flow on the gateway at cfg.GatewayURL.
func newPayments(cfg config.Config, deps Deps, orderSvc *orders.Service, locker *lock.Locker, m *metrics.Metrics) (*payments.Service, error) {
	const attempts = 2
	gw, err := payments.NewGateway(cfg.GatewayURL, payments.GatewayOptions{Timeout: cfg.GatewayTimeout, Attempts: attempts})
	if err != nil {
		return nil, err
	}
	return payments.NewService(payments.Config{
		Store:   payments.NewStore(deps.Pool),
		Orders:  orderSvc,
		Gateway: gw,
		Locker:  locker,
		Metrics: m,
		Logger:  deps.Logger,
		Now:     deps.Now,
		// Every gateway attempt, a refund's too, plus the database work.
		Budget:         2*attempts*cfg.GatewayTimeout + 2*time.Second,
		ReconcileAfter: cfg.ReconcileAfter,
	})
}

// Close releases the connections New opened (not those in Deps).
func (a *App) Close() {
	a.bookkeeping.Close()
}

// RunJobs runs the background jobs of this replica until ctx ends: order
// expiry, payment reconciliation, idempotency-key sweeping, and the
// readiness check that keeps shop_ready and shop_degraded current. Every
// replica runs them; each is safe to run concurrently with its twins
// elsewhere.
func (a *App) RunJobs(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Go(func() { a.Orders.RunExpiry(ctx, a.cfg.JobInterval) })
	wg.Go(func() { a.Payments.RunReconciler(ctx, a.cfg.JobInterval) })
	wg.Go(func() { a.idem.RunSweeper(ctx, time.Hour) })
	wg.Go(func() { a.readiness.run(ctx, a.cfg.JobInterval) })
	wg.Wait()
}
