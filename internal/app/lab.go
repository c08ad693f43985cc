package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"

	"github.com/shop-example/shop/internal/inventory"
	"github.com/shop-example/shop/internal/lab"
	"github.com/shop-example/shop/internal/platform/layers"
	"github.com/shop-example/shop/internal/platform/postgres"
)

// sandboxSchema holds the race lab's sandbox tables: the same migrations
// as the service's, in a schema of their own, so a run with layers off
// can never touch a real order.
const sandboxSchema = "shop_lab"

// replicaName is what X-Served-By says: SHOP_REPLICA_NAME, else the host's
// name.
func replicaName(configured string) string {
	if configured != "" {
		return configured
	}
	if h, err := os.Hostname(); err == nil {
		return h
	}
	return "unknown"
}

// servedBy names the replica in every answer, so a client behind the
// load balancer (the race lab's page) can show which one served it.
func servedBy(name string) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			c.Response().Header().Set("X-Served-By", name)
			return next(c)
		}
	}
}

// sandboxes builds the race lab's sandboxes: copies of the service with
// some layers off, on the sandbox schema, each serving on a loopback
// port for one run.
type sandboxes struct {
	a *App

	mu   sync.Mutex
	pool *pgxpool.Pool // opened, and the schema migrated, by the first run
}

func (s *sandboxes) open(ctx context.Context) (*pgxpool.Pool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pool != nil {
		return s.pool, nil
	}
	if _, err := s.a.deps.Pool.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+sandboxSchema); err != nil {
		return nil, fmt.Errorf("create schema: %w", err)
	}
	u, err := url.Parse(s.a.cfg.DatabaseURL)
	if err != nil {
		return nil, err
	}
	q := u.Query()
	q.Set("search_path", sandboxSchema)
	u.RawQuery = q.Encode()
	if err := postgres.MigrateUp(u.String()); err != nil {
		return nil, err
	}
	pool, err := postgres.Open(ctx, u.String(), 8)
	if err != nil {
		return nil, err
	}
	s.pool = pool
	return pool, nil
}

// build is a lab.Sandbox: the service with set's layers, rate limits off
// (the run is bounded by the lab), stock taken by read-check-write when
// the version layer is off (the lost update that layer exists to stop).
func (s *sandboxes) build(ctx context.Context, set layers.Set) (lab.Target, func(), error) {
	pool, err := s.open(ctx)
	if err != nil {
		return lab.Target{}, nil, err
	}
	cfg := s.a.cfg
	cfg.Demo = false
	cfg.ReplicaName = "sandbox"
	cfg.RateLimit.Off = true
	sb, err := New(cfg, Deps{Pool: pool, Redis: s.a.deps.Redis, Logger: s.a.deps.Logger, Now: s.a.deps.Now,
		Layers: set, NaiveStock: inventory.TakeReadCheckWrite})
	if err != nil {
		return lab.Target{}, nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		sb.Close()
		return lab.Target{}, nil, err
	}
	srv := &http.Server{Handler: sb.Echo, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.a.deps.Logger.Warn("lab sandbox", "err", err)
		}
	}()
	stop := func() {
		_ = srv.Close()
		sb.Close()
	}
	return lab.Target{Name: "sandbox", URL: "http://" + ln.Addr().String(), Pool: pool, Metrics: sb.Metrics, Layers: set}, stop, nil
}

func (s *sandboxes) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pool != nil {
		s.pool.Close()
	}
}
