package orders_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shop-example/shop/harness/testenv"
	"github.com/shop-example/shop/internal/inventory"
	"github.com/shop-example/shop/internal/orders"
	"github.com/shop-example/shop/internal/platform/layers"
	"github.com/shop-example/shop/internal/platform/lock"
	"github.com/shop-example/shop/internal/platform/metrics"
	"github.com/shop-example/shop/internal/platform/redisx"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// fixture is one test database with the pieces of the order flow.
type fixture struct {
	pool  *pgxpool.Pool
	clock *testenv.Clock
	redis func() layers.Locker
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	pool := testenv.Pool(t)
	addrs := testenv.RedisAddrs(t)
	f := &fixture{pool: pool, clock: testenv.NewFrozenClock()}
	f.redis = func() layers.Locker {
		clients := redisx.Clients(addrs)
		t.Cleanup(func() { _ = redisx.Close(clients) })
		l, err := lock.New(clients, lock.Options{Metrics: metrics.New()})
		if err != nil {
			t.Fatalf("lock.New: %v", err)
		}
		return l
	}
	return f
}

// service builds an order service with every layer on, locking over the
// test's Redis nodes.
func (f *fixture) service(t *testing.T) *orders.Service {
	t.Helper()
	svc, err := orders.NewService(orders.Config{
		DB: f.pool, Locker: f.redis(), Metrics: metrics.New(),
		OrderTTL: 15 * time.Minute, Now: f.clock.Now,
	})
	if err != nil {
		t.Fatalf("NewService: %v", err)
	}
	return svc
}

func (f *fixture) mustExec(t *testing.T, sql string, args ...any) {
	t.Helper()
	if _, err := f.pool.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func (f *fixture) mustInt(t *testing.T, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := f.pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// mustCreateUsers registers n users and returns their ids.
func (f *fixture) mustCreateUsers(t *testing.T, n int) []string {
	t.Helper()
	var ids []string
	for _, u := range testenv.Users(t, f.pool, n) {
		ids = append(ids, u.ID)
	}
	return ids
}

func (f *fixture) mustCreateProduct(t *testing.T, sku string, stock int) {
	t.Helper()
	_, err := inventory.NewStore(f.pool, f.clock.Now).Create(context.Background(),
		inventory.Product{SKU: sku, Name: sku, PriceCents: 1000, StockAvailable: stock})
	if err != nil {
		t.Fatalf("create product %s: %v", sku, err)
	}
}

func (f *fixture) stock(t *testing.T, sku string) int {
	t.Helper()
	return f.mustInt(t, "SELECT stock_available FROM products WHERE sku = $1", sku)
}

func line(sku string, q int) []inventory.Line { return []inventory.Line{{SKU: sku, Quantity: q}} }

func key(i int) string { return fmt.Sprintf("key-%d", i) }
