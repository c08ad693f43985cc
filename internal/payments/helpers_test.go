package payments_test

import (
	"context"
	"crypto/rand"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
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
	"github.com/shop-example/shop/internal/platform/redisx"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// newKey returns a fresh Idempotency-Key: each Pay in these tests is a
// request of its own.
func newKey() string { return rand.Text() }

// fixture is one test database, a gateway on a real HTTP server, and the
// order service the pay flow works on.
type fixture struct {
	pool    *pgxpool.Pool
	clock   *testenv.Clock
	gateway *gateway.Server
	gwURL   string
	orders  *orders.Service
	addrs   []string
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	return newFixtureWith(t, gateway.Options{})
}

// newFixtureWith is newFixture with the gateway built from opts
// (gatewaytest.Start fills in the journal and the logger).
func newFixtureWith(t *testing.T, opts gateway.Options) *fixture {
	t.Helper()
	f := &fixture{pool: testenv.Pool(t), clock: testenv.NewFrozenClock(), addrs: testenv.RedisAddrs(t)}
	f.gateway, f.gwURL = gatewaytest.Start(t, opts)
	var err error
	f.orders, err = orders.NewService(orders.Config{
		DB: f.pool, Locker: lock.None{}, OrderTTL: 15 * time.Minute,
		Now: f.clock.Now,
	})
	if err != nil {
		t.Fatalf("orders.NewService: %v", err)
	}
	return f
}

// redisLock returns a lock over the test's Redis nodes, whose waiters
// make payments.LockTries attempts, as the service's.
func (f *fixture) redisLock(t *testing.T) layers.Locker {
	t.Helper()
	return f.lockOn(t, metrics.New(), true)
}

// lockOn returns a lock over the test's Redis nodes counting into m,
// bounded by payments.LockTries when bounded is set, else with only the
// wait budget of every other flow's lock.
func (f *fixture) lockOn(t *testing.T, m *metrics.Metrics, bounded bool) layers.Locker {
	t.Helper()
	clients := redisx.Clients(f.addrs)
	t.Cleanup(func() { _ = redisx.Close(clients) })
	l, err := lock.New(clients, lock.Options{Metrics: m})
	if err != nil {
		t.Fatalf("lock.New: %v", err)
	}
	if !bounded {
		return l
	}
	few, err := l.WithTries(payments.LockTries)
	if err != nil {
		t.Fatalf("WithTries: %v", err)
	}
	return few
}

// service builds a payment service with the layers on, locking over the
// test's Redis nodes; the layers off run on their variants
// (harness/variants), which tell on's probe when they act.
func (f *fixture) service(t *testing.T, on layers.Set) *payments.Service {
	t.Helper()
	return f.serviceAt(t, on, f.clock.Now)
}

// serviceAt is service on its own clock: another replica, whose
// reconciler finds due what the first has only just begun.
func (f *fixture) serviceAt(t *testing.T, on layers.Set, now func() time.Time) *payments.Service {
	t.Helper()
	gw, err := payments.NewGateway(f.gwURL, payments.GatewayOptions{Timeout: 5 * time.Second})
	if err != nil {
		t.Fatalf("NewGateway: %v", err)
	}
	var locker layers.Locker = variants.NoLock{Probe: on.Probe()}
	if !on.Takes(layers.Lock) {
		locker = f.redisLock(t)
	}
	svc, err := payments.NewService(payments.Config{
		DB: f.pool, Gateway: gw, Locker: locker,
		Metrics: metrics.New(), Now: now, Budget: 20 * time.Second, ReconcileAfter: time.Minute,
		Orders:   variants.Orders(orders.NewStore(f.pool), on, on.Probe()),
		Payments: variants.Payments(payments.NewStore(f.pool), on, on.Probe()),
	})
	if err != nil {
		t.Fatalf("payments.NewService: %v", err)
	}
	return svc
}

// mustCreateOrders places n orders, one per new user, of one unit of a
// new product each; it returns the user and order ids.
func (f *fixture) mustCreateOrders(t *testing.T, n int) (users, ids []string) {
	t.Helper()
	users = f.mustCreateBuyers(t, n)
	for _, u := range users {
		ids = append(ids, f.mustPlaceOrder(t, u))
	}
	return users, ids
}

// unitPrice is the price of SKU-PAY: the total of every order the tests
// place, one unit each.
const unitPrice = 2500

// mustCreateBuyers creates n users and the product SKU-PAY, with a unit
// in stock for each of them.
func (f *fixture) mustCreateBuyers(t *testing.T, n int) []string {
	t.Helper()
	ctx := context.Background()
	if _, err := inventory.NewStore(f.pool, f.clock.Now).Create(ctx,
		inventory.Product{SKU: "SKU-PAY", Name: "Payable", PriceCents: unitPrice, StockAvailable: n}); err != nil {
		t.Fatalf("create product: %v", err)
	}
	var users []string
	for _, u := range testenv.Users(t, f.pool, n) {
		users = append(users, u.ID)
	}
	return users
}

// mustPlaceOrder places an order of one unit of SKU-PAY for user.
func (f *fixture) mustPlaceOrder(t *testing.T, user string) string {
	t.Helper()
	o, err := f.orders.Create(context.Background(), user, "order-"+user, []inventory.Line{{SKU: "SKU-PAY", Quantity: 1}})
	if err != nil {
		t.Fatalf("create order: %v", err)
	}
	return o.ID
}

// books audits the test's orders and payments against the gateway's
// charges.
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

func (f *fixture) mustString(t *testing.T, sql string, args ...any) string {
	t.Helper()
	var s string
	if err := f.pool.QueryRow(context.Background(), sql, args...).Scan(&s); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return s
}

func (f *fixture) mustExec(t *testing.T, sql string, args ...any) {
	t.Helper()
	if _, err := f.pool.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// mustDrop takes the constraint named name, of the flow's catalogue
// (payments.Constraints), out of the test's database.
func (f *fixture) mustDrop(t *testing.T, name string) {
	t.Helper()
	c, ok := postgres.Lookup(payments.Constraints, name)
	if !ok {
		t.Fatalf("%s is not in payments.Constraints", name)
	}
	f.mustExec(t, c.Drop())
}

// begin opens a processing payment of order id as the pay flow's begin
// does, in one transaction: the order moves to paying at the version
// read, and the payment is inserted.
func begin(t *testing.T, pool *pgxpool.Pool, orderID string, now time.Time) (payments.Payment, orders.Order) {
	t.Helper()
	ctx := context.Background()
	o, err := orders.NewStore(pool).Get(ctx, orderID)
	if err != nil {
		t.Fatal(err)
	}
	first := &pgx.Batch{}
	begun, _, err := orders.NewStore(pool).QueueMove(ctx, first, o, orders.BeginPayment(o.UserID, now))
	if err != nil {
		t.Fatal(err)
	}
	p := payments.Payment{ID: uuid.NewString(), OrderID: orderID, Status: payments.StatusProcessing,
		AmountCents: unitPrice, Method: "pm_card_ok", Version: 1, CreatedAt: now, UpdatedAt: now}
	last := &pgx.Batch{}
	payments.NewStore(pool).QueueInsert(last, p)
	if err := postgres.InTxSend(ctx, pool, first, last); err != nil {
		t.Fatalf("begin: %v", err)
	}
	return p, begun
}

// settle records settled, read at version, and applies move to the order
// known as it was, in one transaction as the pay flow's settle does: the
// payment's row first, then the order's, each at its version. rows are
// the payments' writes (a variant, to take layer 3 off).
func settle(ctx context.Context, pool *pgxpool.Pool, rows payments.PaymentRows, settled payments.Payment, version int64,
	known orders.Order, move orders.Change) error {
	first := &pgx.Batch{}
	rows.QueueSettle(first, settled, version)
	if _, _, err := orders.NewStore(pool).QueueMove(ctx, first, known, move); err != nil {
		return err
	}
	return orders.WriteError(postgres.InTxSend(ctx, pool, first, &pgx.Batch{}))
}
