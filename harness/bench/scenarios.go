package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shop-example/shop/harness/barrier"
	"github.com/shop-example/shop/internal/inventory"
	"github.com/shop-example/shop/internal/orders"
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
	// meter, if set, is sampled as the window opens and as it closes
	// (result.used).
	meter *costMeter
}

type result struct {
	name     string
	window   time.Duration
	orders   int
	p50, p99 time.Duration
	errors   map[string]int
	used     costSample // what the meter counted over the window
}

// ops is how many operations completed in the window: the orders and the
// failures.
func (r result) ops() int {
	n := r.orders
	for _, c := range r.errors {
		n += c
	}
	return n
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

// measure runs sc with clients goroutines, released together, each
// placing one order after the other for warmup plus window, and at least
// minOps orders each. What completes within the window counts: successes
// as orders with their latency, failures by key. What completes during
// the warmup or after the window is dropped.
func measure(ctx context.Context, sc scenario, clients int, warmup, window time.Duration, minOps int) result {
	start := time.Now()
	from, to := start.Add(warmup), start.Add(warmup+window)
	latencies := make([][]time.Duration, clients)
	failures := make([]map[string]int, clients)
	for c := range clients {
		failures[c] = map[string]int{}
	}
	var used costSample
	metered := make(chan struct{})
	go func() {
		defer close(metered)
		if sc.meter == nil || !sleepUntil(ctx, from) {
			return
		}
		opened := sc.meter.sample()
		if sleepUntil(ctx, to) {
			used = sc.meter.sample().since(opened)
		}
	}()
	barrier.Together(clients, func(c int) {
		for done := 1; ctx.Err() == nil; done++ {
			var sku string
			if len(sc.skus) > 0 {
				sku = sc.skus[rand.IntN(len(sc.skus))]
			}
			begin := time.Now()
			failure := sc.order(ctx, c, sku)
			end := time.Now()
			switch {
			case end.After(to):
				if done >= minOps {
					return
				}
			case end.Before(from):
			case failure != "":
				failures[c][failure]++
			default:
				latencies[c] = append(latencies[c], end.Sub(begin))
			}
		}
	})

	<-metered
	all := slices.Concat(latencies...)
	slices.Sort(all)
	r := result{name: sc.name, window: window, orders: len(all), errors: map[string]int{},
		p50: percentile(all, 0.50), p99: percentile(all, 0.99), used: used}
	for _, f := range failures {
		for k, n := range f {
			r.errors[k] += n
		}
	}
	return r
}

// sleepUntil waits until t, or returns false if ctx ends first.
func sleepUntil(ctx context.Context, t time.Time) bool {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	}
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

// order is the baseline: the order store's own statements for a one-line
// order (inventory.Store.Take's conditional decrement and orders.Store.Insert) in
// one transaction, and nothing else.
func (f rawFlow) order(ctx context.Context, client int, sku string) string {
	id, err := uuid.NewV7()
	if err != nil {
		return "uuid"
	}
	now := time.Now().UTC()
	err = pgx.BeginFunc(ctx, f.pool, func(tx pgx.Tx) error {
		lines := []inventory.Line{{SKU: sku, Quantity: 1}}
		prices, err := inventory.NewStore(f.pool, nil).Take(ctx, tx, lines)
		if err != nil {
			return err
		}
		// The order id doubles as the request key: every order is new.
		return orders.NewStore(f.pool).Insert(ctx, tx, orders.Order{ID: id.String(), UserID: f.users[client], RequestKey: id.String(),
			Status: orders.StatusPendingPayment, TotalCents: prices[sku], Version: 1, CreatedAt: now, ExpiresAt: now.Add(15 * time.Minute),
			Items: []orders.Item{{SKU: sku, Quantity: 1, UnitPriceCents: prices[sku]}}})
	})
	switch {
	case err == nil:
		return ""
	case errors.Is(err, inventory.ErrOutOfStock):
		return "out of stock"
	case postgres.SQLState(err) != "":
		return "sqlstate " + postgres.SQLState(err)
	case ctx.Err() != nil:
		return "cancelled"
	}
	return "error"
}
