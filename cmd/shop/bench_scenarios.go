package main

import (
	"context"
	crand "crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shop-example/shop/internal/app"
	"github.com/shop-example/shop/internal/platform/config"
	"github.com/shop-example/shop/internal/platform/httpx"
	"github.com/shop-example/shop/internal/platform/idempotency"
	"github.com/shop-example/shop/internal/platform/postgres"
	"github.com/shop-example/shop/internal/platform/redisx"
)

// orderFunc places one order for one unit of sku as client, and returns ""
// when the order was placed or else what went wrong (the error's key).
type orderFunc func(ctx context.Context, client int, sku string) (failure string)

type scenario struct {
	name    string   // flow/shape, e.g. "raw/hot"
	skus    []string // every order buys one unit of one of these, at random
	order   orderFunc
	layered bool
}

type result struct {
	name     string
	window   time.Duration
	orders   int
	p50, p99 time.Duration
	errors   map[string]int
}

func (r result) rate() float64 { return float64(r.orders) / r.window.Seconds() }

func (r result) errorSummary() string {
	if len(r.errors) == 0 {
		return "0"
	}
	var parts []string
	for k, n := range r.errors {
		parts = append(parts, fmt.Sprintf("%s ×%d", k, n))
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}

// measure runs sc with clients goroutines, each placing one order after the
// other, for warmup plus window. What completes within the window counts:
// successes as orders with their latency, failures by key. What completes
// during the warmup or after the window is dropped.
func measure(ctx context.Context, sc scenario, clients int, warmup, window time.Duration) result {
	start := time.Now()
	from, to := start.Add(warmup), start.Add(warmup+window)
	latencies := make([][]time.Duration, clients)
	failures := make([]map[string]int, clients)
	var wg sync.WaitGroup
	for c := range clients {
		failures[c] = map[string]int{}
		wg.Go(func() {
			for ctx.Err() == nil {
				sku := sc.skus[rand.IntN(len(sc.skus))]
				begin := time.Now()
				failure := sc.order(ctx, c, sku)
				end := time.Now()
				switch {
				case end.After(to):
					return
				case end.Before(from):
				case failure != "":
					failures[c][failure]++
				default:
					latencies[c] = append(latencies[c], end.Sub(begin))
				}
			}
		})
	}
	wg.Wait()

	all := slices.Concat(latencies...)
	slices.Sort(all)
	r := result{name: sc.name, window: window, orders: len(all), errors: map[string]int{},
		p50: percentile(all, 0.50), p99: percentile(all, 0.99)}
	for _, f := range failures {
		for k, n := range f {
			r.errors[k] += n
		}
	}
	return r
}

// percentile is the nearest-rank percentile of sorted latencies.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// rawFlow is the baseline: the order transaction alone, one per order, on a
// pool with a connection per client.
type rawFlow struct {
	pool  *pgxpool.Pool
	users []string // user id of each client
}

// The same statements the order store runs for a one-line order: the
// conditional decrement, and the order with its item in one statement.
const (
	sqlRawTakeStock = `UPDATE products SET stock_available = stock_available - 1
		WHERE sku = $1 AND stock_available >= 1 RETURNING price_cents`
	sqlRawInsertOrder = `WITH o AS (
			INSERT INTO orders (id, user_id, request_key, status, total_cents, version, created_at, updated_at, expires_at)
			VALUES ($1, $2, $3, 'pending_payment', $4, 1, $5, $5, $6)
			RETURNING id)
		INSERT INTO order_items (order_id, sku, quantity, unit_price_cents)
		SELECT o.id, $7, 1, $4 FROM o`
)

func (f rawFlow) order(ctx context.Context, client int, sku string) string {
	id, err := uuid.NewV7()
	if err != nil {
		return "uuid"
	}
	now := time.Now().UTC()
	err = pgx.BeginFunc(ctx, f.pool, func(tx pgx.Tx) error {
		var price int64
		if err := tx.QueryRow(ctx, sqlRawTakeStock, sku).Scan(&price); err != nil {
			return err
		}
		// The order id doubles as the request key: every order is new.
		_, err := tx.Exec(ctx, sqlRawInsertOrder, id, f.users[client], id.String(), price, now, now.Add(15*time.Minute), sku)
		return err
	})
	switch {
	case err == nil:
		return ""
	case errors.Is(err, pgx.ErrNoRows):
		return "out of stock"
	case postgres.SQLState(err) != "":
		return "sqlstate " + postgres.SQLState(err)
	case ctx.Err() != nil:
		return "cancelled"
	}
	return "error"
}

// service is the real service, in process, behind a real HTTP server on a
// loopback port, and an HTTP client to it.
type service struct {
	app    *app.App
	base   string
	client *http.Client
	tokens []string // bearer token of each client
	stop   func()
}

// startService builds the service as `shop serve` does, from the SHOP_*
// settings (pool size SHOP_DB_MAX_CONNS, default lock mode and budgets), on
// the scratch database and the -redis nodes. It fails unless /readyz says
// the database and the lock quorum answer: a run in degrade mode would
// measure a flow without its lock.
func startService(ctx context.Context, o benchOptions, dbURL string, tokens []string) (*service, error) {
	cfg, err := config.FromEnv(os.Getenv)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	cfg.DatabaseURL, cfg.RedisAddrs = dbURL, o.redisAddrs
	pool, err := postgres.Open(ctx, dbURL, cfg.DBMaxConns)
	if err != nil {
		return nil, err
	}
	rdb := redisx.Clients(cfg.RedisAddrs)
	// Request logs are formatted as in production but not written; warnings
	// and errors are.
	logger := slog.New(slog.NewMultiHandler(
		slog.NewJSONHandler(io.Discard, nil),
		slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}),
	))
	a, err := app.New(cfg, app.Deps{Pool: pool, Redis: rdb, Logger: logger})
	if err != nil {
		redisx.Close(rdb) //nolint:errcheck
		pool.Close()
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		redisx.Close(rdb) //nolint:errcheck
		pool.Close()
		return nil, fmt.Errorf("listen: %w", err)
	}
	srvCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	served := make(chan error, 1)
	go func() { served <- httpx.Serve(srvCtx, ln, ln.Addr().String(), a.Echo, 5*time.Second) }()

	// A Transport of its own: no proxy from the environment, and an idle
	// connection kept for every client, so no request waits for a dial.
	transport := &http.Transport{MaxIdleConns: 2 * o.clients, MaxIdleConnsPerHost: 2 * o.clients, IdleConnTimeout: time.Minute}
	s := &service{app: a, base: "http://" + ln.Addr().String(), tokens: tokens,
		client: &http.Client{Transport: transport, Timeout: 30 * time.Second}}
	s.stop = func() {
		cancel()
		<-served
		transport.CloseIdleConnections()
		redisx.Close(rdb) //nolint:errcheck
		pool.Close()
	}
	if err := s.ready(ctx); err != nil {
		s.stop()
		return nil, err
	}
	return s, nil
}

func (s *service) ready(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.base+"/readyz", nil)
	if err != nil {
		return err
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return fmt.Errorf("service: %w", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("service not ready (%d %s): is every -redis node up?", resp.StatusCode, body)
	}
	return nil
}

// order POSTs /v1/orders as a client would: its bearer token, a fresh
// Idempotency-Key, the body read to the end so the connection is reused.
func (s *service) order(ctx context.Context, client int, sku string) string {
	body := `{"items":[{"sku":"` + sku + `","quantity":1}]}`
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.base+"/v1/orders", strings.NewReader(body))
	if err != nil {
		return "request"
	}
	req.Header.Set("Authorization", "Bearer "+s.tokens[client])
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(idempotency.HeaderKey, crand.Text())
	resp, err := s.client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return "cancelled"
		}
		return "transport"
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	switch {
	case err != nil:
		return "read body"
	case resp.StatusCode != http.StatusCreated:
		return "http " + strconv.Itoa(resp.StatusCode)
	case resp.Header.Get(idempotency.HeaderReplayed) != "":
		return "replayed"
	}
	return ""
}

// lockOutcomes summarises the service's lock metrics, to show the layered
// figures are of the whole flow: every order acquired its lock, none ran
// degraded (without Redis).
func (s *service) lockOutcomes() string {
	families, err := s.app.Metrics.Registry.Gather()
	if err != nil {
		return "metrics unavailable: " + err.Error()
	}
	var parts []string
	for _, f := range families {
		switch f.GetName() {
		case "shop_lock_acquisitions_total", "shop_lock_degraded_total", "shop_lock_unlock_errors_total":
			for _, m := range f.GetMetric() {
				name := strings.TrimPrefix(strings.TrimSuffix(f.GetName(), "_total"), "shop_lock_")
				for _, l := range m.GetLabel() {
					name += " " + l.GetValue()
				}
				parts = append(parts, fmt.Sprintf("%s=%.0f", name, m.GetCounter().GetValue()))
			}
		}
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}
