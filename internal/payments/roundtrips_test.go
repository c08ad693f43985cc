package payments_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shop-example/shop/harness/testenv"
	"github.com/shop-example/shop/internal/payments"
	"github.com/shop-example/shop/internal/platform/lock"
	"github.com/shop-example/shop/internal/platform/metrics"
)

// TestPay_FiveRoundTrips: a payment of a payable order costs five round
// trips to PostgreSQL: the order's read, two for the begin (the order
// written at the version read travels with BEGIN and the claim), two for
// the settle (the order written at the version begun travels with the
// payment's). An order that moved in between costs another read and
// another begin, and is still paid once.
func TestPay_FiveRoundTrips(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	users, ids := f.mustCreateOrders(t, 3)
	trips := &testenv.RoundTrips{}
	cfg, err := pgxpool.ParseConfig(f.pool.Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	// One connection: the warm-up prepares the statements the count sees.
	cfg.MaxConns, cfg.ConnConfig.Tracer = 1, trips
	traced, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(traced.Close)
	gw, err := payments.NewGateway(f.gwURL, payments.GatewayOptions{Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := payments.NewService(payments.Config{DB: traced, Gateway: gw,
		Locker: lock.None{}, Metrics: metrics.New(), Now: f.clock.Now, Budget: 20 * time.Second, ReconcileAfter: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := svc.Pay(ctx, users[0], newKey(), ids[0], "pm_card_ok"); err != nil {
		t.Fatalf("warm-up: %v", err)
	}

	trips.Reset()
	if _, err := svc.Pay(ctx, users[1], newKey(), ids[1], "pm_card_ok"); err != nil {
		t.Fatalf("pay: %v", err)
	}
	if n := trips.N(); n != 5 {
		t.Errorf("%d round trips for one payment, want 5", n)
	}

	// The order moves between the read and the begin: the begin's write
	// at the version read finds nothing, and the begin reads the order
	// in its transaction.
	trips.Before(2, func() {
		f.mustExec(t, `UPDATE orders SET version = version + 1 WHERE id = $1`, ids[2])
	})
	if _, err := svc.Pay(ctx, users[2], newKey(), ids[2], "pm_card_ok"); err != nil {
		t.Fatalf("pay of an order that moved: %v", err)
	}
	if n := trips.N(); n <= 5 {
		t.Errorf("%d round trips for a payment whose order moved, want more than 5 (its read in the transaction)", n)
	}
	if n := f.mustInt(t, `SELECT count(*)::int FROM orders WHERE id = $1 AND status = 'paid'`, ids[2]); n != 1 {
		t.Errorf("the order that moved is not paid")
	}
	if r := f.books(t); !r.OK() {
		t.Error(r)
	}
}
