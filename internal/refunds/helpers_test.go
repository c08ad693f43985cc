package refunds_test

import (
	"context"
	"crypto/rand"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shop-example/shop/harness/books"
	"github.com/shop-example/shop/harness/gateway"
	"github.com/shop-example/shop/harness/gateway/gatewaytest"
	"github.com/shop-example/shop/harness/testenv"
	"github.com/shop-example/shop/harness/variants"
	"github.com/shop-example/shop/internal/inventory"
	"github.com/shop-example/shop/internal/orders"
	"github.com/shop-example/shop/internal/payments"
	"github.com/shop-example/shop/internal/platform/layers"
	"github.com/shop-example/shop/internal/platform/lock"
	"github.com/shop-example/shop/internal/platform/metrics"
	"github.com/shop-example/shop/internal/platform/postgres"
	"github.com/shop-example/shop/internal/refunds"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// newKey returns a fresh Idempotency-Key: each Refund in these tests is a
// request of its own.
func newKey() string { return rand.Text() }

// The products of every order these tests place: two of A and one of B,
// 5000 cents in all.
const (
	priceA, priceB = 1500, 2000
	orderTotal     = 2*priceA + priceB
)

// fixture is one test database, a gateway on a real HTTP server, and the
// order and pay flows the refunds work on.
type fixture struct {
	pool     *pgxpool.Pool
	clock    *testenv.Clock
	gateway  *gateway.Server
	gwURL    string
	orders   *orders.Service
	payments *payments.Service
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	return newFixtureWith(t, gateway.Options{})
}

// newFixtureWith is newFixture with the gateway built from opts.
func newFixtureWith(t *testing.T, opts gateway.Options) *fixture {
	t.Helper()
	f := &fixture{pool: testenv.Pool(t), clock: testenv.NewFrozenClock()}
	f.gateway, f.gwURL = gatewaytest.Start(t, opts)
	var err error
	f.orders, err = orders.NewService(orders.Config{DB: f.pool, Locker: lock.None{}, OrderTTL: 15 * time.Minute, Now: f.clock.Now})
	if err != nil {
		t.Fatalf("orders.NewService: %v", err)
	}
	f.payments, err = payments.NewService(payments.Config{DB: f.pool, Gateway: f.client(t, f.gwURL), Locker: lock.None{}, Logger: slog.New(slog.DiscardHandler),
		Now: f.clock.Now, Budget: 20 * time.Second, ReconcileAfter: time.Minute})
	if err != nil {
		t.Fatalf("payments.NewService: %v", err)
	}
	store := inventory.NewStore(f.pool, f.clock.Now)
	for _, p := range []inventory.Product{{SKU: "A", Name: "A", PriceCents: priceA, StockAvailable: 1000}, {SKU: "B", Name: "B", PriceCents: priceB, StockAvailable: 1000}} {
		if _, err := store.Create(context.Background(), p); err != nil {
			t.Fatalf("create product: %v", err)
		}
	}
	return f
}

func (f *fixture) client(t *testing.T, url string) *payments.Gateway {
	t.Helper()
	gw, err := payments.NewGateway(url, payments.GatewayOptions{Timeout: 5 * time.Second})
	if err != nil {
		t.Fatalf("NewGateway: %v", err)
	}
	return gw
}

// service builds a refund service with the layers on; the layers off run
// on their variants (harness/variants), which tell on's probe when they
// act.
func (f *fixture) service(t *testing.T, on layers.Set) *refunds.Service {
	t.Helper()
	return f.serviceOn(t, on, f.gwURL, f.pool)
}

// serviceOn is service calling the gateway at url, on pool.
func (f *fixture) serviceOn(t *testing.T, on layers.Set, url string, pool *pgxpool.Pool) *refunds.Service {
	t.Helper()
	svc, err := refunds.NewService(refunds.Config{DB: pool, Gateway: f.client(t, url), Metrics: metrics.New(), Logger: slog.New(slog.DiscardHandler),
		Now: f.clock.Now, Budget: 20 * time.Second, ReconcileAfter: time.Minute,
		Orders:  variants.Orders(orders.NewStore(pool), on, on.Probe()),
		Refunds: variants.Refunds(refunds.NewStore(pool), on, on.Probe()),
	})
	if err != nil {
		t.Fatalf("refunds.NewService: %v", err)
	}
	return svc
}

// mustPaidOrder places an order of 2 × A and 1 × B for a new user and
// pays it; it returns the user and the order.
func (f *fixture) mustPaidOrder(t *testing.T) (string, orders.Order) {
	t.Helper()
	ctx := context.Background()
	user := testenv.Users(t, f.pool, 1)[0].ID
	o, err := f.orders.Create(ctx, user, newKey(), []inventory.Line{{SKU: "A", Quantity: 2}, {SKU: "B", Quantity: 1}})
	if err != nil {
		t.Fatalf("create order: %v", err)
	}
	if _, err := f.payments.Pay(ctx, user, newKey(), o.ID, gateway.MethodOK); err != nil {
		t.Fatalf("pay: %v", err)
	}
	o, err = orders.NewStore(f.pool).Get(ctx, o.ID)
	if err != nil || o.Status != orders.StatusPaid {
		t.Fatalf("order after payment: %+v, %v", o, err)
	}
	return user, o
}

// order reads an order as it is.
func (f *fixture) order(t *testing.T, id string) orders.Order {
	t.Helper()
	o, err := orders.NewStore(f.pool).Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// charge is the one charge of order id at the gateway.
func (f *fixture) charge(t *testing.T, id string) gateway.Charge {
	t.Helper()
	charges := f.gateway.Charges(id)
	if len(charges) != 1 {
		t.Fatalf("order %s: %d charges, want 1", id, len(charges))
	}
	return charges[0]
}

// books audits the test's orders, payments and refunds against the
// gateway's charges and refunds, and fails unless they balance with
// nothing in flight.
func (f *fixture) books(t *testing.T) books.Report {
	t.Helper()
	r, err := books.Check(context.Background(), f.pool, nil, f.gwURL)
	if err != nil {
		t.Fatalf("books: %v", err)
	}
	return r
}

func (f *fixture) mustInt(t *testing.T, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := f.pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

func (f *fixture) mustExec(t *testing.T, sql string, args ...any) {
	t.Helper()
	if _, err := f.pool.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// mustDrop takes the constraints named out of the test's database, from
// the refund flow's catalogues (refunds.Constraints, orders.Constraints).
func (f *fixture) mustDrop(t *testing.T, names ...string) {
	t.Helper()
	for _, name := range names {
		c, ok := postgres.Lookup(append(refunds.Constraints, orders.Constraints...), name)
		if !ok {
			t.Fatalf("%s is not in the refund flow's catalogues", name)
		}
		f.mustExec(t, c.Drop())
	}
}

// stock reads a product's stock.
func (f *fixture) stock(t *testing.T, sku string) int {
	t.Helper()
	return f.mustInt(t, `SELECT stock_available FROM products WHERE sku = $1`, sku)
}

// tracedPool is a pool of one connection on pool's database whose round
// trips trips counts (the warm-up prepares the statements the count sees).
func tracedPool(t *testing.T, pool *pgxpool.Pool, trips *testenv.RoundTrips) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(pool.Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns, cfg.ConnConfig.Tracer = 1, trips
	traced, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(traced.Close)
	return traced
}
