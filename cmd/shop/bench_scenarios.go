package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shop-example/shop/internal/platform/postgres"
)

// orderFunc places one order for one unit of sku as client, and returns ""
// when the order was placed or else what went wrong (the error's key). A
// scenario without SKUs (the payments bench) gets sku "" and does its own
// unit of work: it pays an order.
type orderFunc func(ctx context.Context, client int, sku string) (failure string)

type scenario struct {
	name    string   // flow/shape, e.g. "raw/hot"
	skus    []string // every order buys one unit of one of these, at random; may be empty
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

func (r result) errorSummary() string { return countSummary(r.errors) }

// countSummary writes counts as "a ×2, b ×1", sorted, or "0" if none.
func countSummary(counts map[string]int) string {
	if len(counts) == 0 {
		return "0"
	}
	var parts []string
	for k, n := range counts {
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
				var sku string
				if len(sc.skus) > 0 {
					sku = sc.skus[rand.IntN(len(sc.skus))]
				}
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
// pool with a connection per client, as far as the server has room
// (baselineConns).
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
