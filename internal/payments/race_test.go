package payments_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/shop-example/shop/harness/gateway"
	"github.com/shop-example/shop/harness/testenv"
	"github.com/shop-example/shop/harness/variants"
	"github.com/shop-example/shop/internal/orders"
	"github.com/shop-example/shop/internal/payments"
	"github.com/shop-example/shop/internal/platform/layers"
	"github.com/shop-example/shop/internal/platform/lock"
	"github.com/shop-example/shop/internal/platform/problem"
)

// There is no "lock alone" case: when Redis is slow to answer, the lock
// degrades (SHOP_LOCK_MODE=degrade) and the work runs unlocked, so a lock
// is never what keeps the charge single (see the orders layer tests).

// stormOrders and stormClicks size the storm: stormClicks concurrent pay
// calls for each of stormOrders orders, all orders at once.
const (
	stormOrders = 20
	stormClicks = 15
)

// storm pays every order stormClicks times at once and returns how many
// calls each error code (or "ok") got. A click that is told the order is
// busy comes back later, as a client honouring Retry-After would, a few
// times at most.
func storm(t *testing.T, svc *payments.Service, users, ids []string) map[string]int {
	t.Helper()
	var mu sync.Mutex
	codes := map[string]int{}
	testenv.Together(len(ids)*stormClicks, func(i int) {
		o := i % len(ids)
		for attempt := 1; ; attempt++ {
			_, err := svc.Pay(context.Background(), users[o], newKey(), ids[o], gateway.MethodOK)
			code := "ok"
			if err != nil {
				code = string(problem.CodeOf(err))
				if code == "" {
					code = err.Error()
				}
			}
			mu.Lock()
			codes[code]++
			mu.Unlock()
			if code != string(problem.ResourceBusy) || attempt == 5 {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
	return codes
}

// settleLeftovers runs the reconciler once over payments a storm left
// processing, as every replica's would after the reconcile delay. A
// payment is left processing when its outcome could not be recorded in
// time: on a loaded machine a lock's lease that could not be extended
// cancels the work after the charge, by design. The invariant is about
// the books once the system has settled.
func (f *fixture) settleLeftovers(t *testing.T, svc *payments.Service) {
	t.Helper()
	left := f.mustInt(t, `SELECT count(*) FROM payments WHERE status = 'processing'`)
	if left == 0 {
		return
	}
	f.clock.Advance(2 * time.Minute) // past the fixture's reconcile delay
	n, err := svc.Reconcile(context.Background())
	if err != nil {
		t.Errorf("reconcile: %v", err)
	}
	t.Logf("%d payments were left processing; the reconciler settled %d", left, n)
}

// doubleCharges checks the invariant of the pay flow on the database and
// the gateway's audit: every order paid, with exactly one succeeded
// payment and exactly one charge. It returns a description of every order
// that breaks it.
func (f *fixture) doubleCharges(t *testing.T, ids []string) []string {
	t.Helper()
	var broken []string
	for _, id := range ids {
		charges := f.gateway.Charges(id)
		succeeded := f.mustInt(t, `SELECT count(*) FROM payments WHERE order_id = $1 AND status = 'succeeded'`, id)
		paid := f.mustInt(t, `SELECT count(*) FROM orders WHERE id = $1 AND status = 'paid'`, id)
		if len(charges) != 1 || succeeded != 1 || paid != 1 {
			broken = append(broken, fmt.Sprintf("order %s: %d charges, %d succeeded payments, paid %v", id, len(charges), succeeded, paid == 1))
		}
	}
	return broken
}

func TestPay_Storm(t *testing.T) {
	if testing.Short() {
		t.Skip("races real PostgreSQL, Redis and a gateway")
	}
	for _, tc := range []struct {
		name       string
		layers     layers.Set
		wantBroken bool
	}{
		// Every layer in place.
		{name: "AllLayers"},
		// Layer 1 off: the order's state (paying) and the partial unique
		// index hold.
		{name: "WithoutLock", layers: layers.Off(layers.Lock)},
		// Layers 1 and 4 off: the order's state alone holds.
		{name: "WithoutLockAndIndex", layers: layers.Off(layers.Lock, layers.Constraint)},
		// Lock, state and index off: clicks begin payments side by side,
		// the gateway sees several keys, and the customer is charged more
		// than once. This is the failure the layers prevent; the check
		// must see it.
		{name: "WithoutLockStateAndIndex", layers: layers.Off(layers.Lock, layers.State, layers.Constraint), wantBroken: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			if !tc.layers.On(layers.Constraint) {
				f.mustDrop(t, payments.ConstraintOneActive)
			}
			svc := f.service(t, tc.layers)
			users, ids := f.mustCreateOrders(t, stormOrders)

			codes := storm(t, svc, users, ids)
			t.Logf("answers: %v", codes)
			f.settleLeftovers(t, svc)

			broken := f.doubleCharges(t, ids)
			if tc.wantBroken {
				if len(broken) == 0 {
					t.Fatal("with the lock and the index off, every order still got one charge: the storm did not race")
				}
				t.Logf("as expected, %d of %d orders were charged more than once, e.g. %s", len(broken), len(ids), broken[0])
				return
			}
			for _, b := range broken {
				t.Error(b)
			}
			// Charged money is never left on an order that is not paid.
			if n := f.mustInt(t, `SELECT count(*) FROM payments p JOIN orders o ON o.id = p.order_id
				WHERE p.status = 'succeeded' AND o.status <> 'paid'`); n != 0 {
				t.Errorf("%d succeeded payments on orders that are not paid", n)
			}
		})
	}
}

// TestPay_ExpiryWhileCharging runs the order expiry job at the worst
// moment: the gateway has charged, the order's time is up, and the outcome
// is not recorded yet. The job must leave the order alone (it is paying,
// not pending), and the payment must settle it as paid. Without the job's
// state rule the order expires and the charge has to be refunded: the
// customer paid in time and gets nothing.
func TestPay_ExpiryWhileCharging(t *testing.T) {
	if testing.Short() {
		t.Skip("races real PostgreSQL and a gateway")
	}
	for _, tc := range []struct {
		name       string
		job        layers.Set // the expiry job's layers
		wantBroken bool
	}{
		{name: "StateRule"},
		{name: "WithoutStateRule", job: layers.Off(layers.State), wantBroken: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var f *fixture
			var job *orders.Service
			expired := make(chan int, stormOrders)
			f = newFixtureWith(t, gateway.Options{AfterCharge: func(gateway.Charge) {
				f.clock.Advance(time.Hour) // far past every order's time
				n, err := job.ExpireDue(context.Background())
				if err != nil {
					t.Errorf("ExpireDue: %v", err)
				}
				expired <- n
			}})
			var err error
			job, err = orders.NewService(orders.Config{DB: f.pool, Locker: lock.None{},
				OrderTTL: 15 * time.Minute, Now: f.clock.Now, Orders: variants.Orders(orders.NewStore(f.pool), tc.job, nil)})
			if err != nil {
				t.Fatal(err)
			}
			svc := f.service(t, layers.Set{})
			users := f.mustCreateBuyers(t, stormOrders)

			// One order at a time, each placed just before it is paid, so
			// the only order due is the one whose charge is in flight.
			var ids []string
			for _, u := range users {
				id := f.mustPlaceOrder(t, u)
				ids = append(ids, id)
				_, _ = svc.Pay(context.Background(), u, newKey(), id, gateway.MethodOK)
				f.clock.Advance(-time.Hour)
			}
			close(expired)
			total := 0
			for n := range expired {
				total += n
			}
			refunded := f.mustInt(t, `SELECT count(*) FROM payments WHERE status = 'refunded'`)
			if tc.wantBroken {
				if total == 0 || refunded == 0 {
					t.Fatalf("without the state rule the job expired %d orders and %d charges were refunded: this case cannot fail", total, refunded)
				}
				t.Logf("without the state rule: %d of %d orders expired while being paid, %d charges refunded", total, len(ids), refunded)
				return
			}
			if total != 0 {
				t.Errorf("the expiry job expired %d orders while their payments were in flight", total)
			}
			for _, b := range f.doubleCharges(t, ids) {
				t.Error(b)
			}
			if n := f.mustInt(t, `SELECT count(*) FROM stock_releases`); n != 0 {
				t.Errorf("%d orders gave their stock back, want none: all were paid", n)
			}
		})
	}
}

// TestPay_CancelRace races a cancel against each pay. Whichever wins, the
// customer is never charged for an order that is not paid: a paid order
// has one succeeded payment and one charge; a cancelled one has every
// charge refunded, and its stock back once.
func TestPay_CancelRace(t *testing.T) {
	if testing.Short() {
		t.Skip("races real PostgreSQL, Redis and a gateway")
	}
	f := newFixture(t)
	svc := f.service(t, layers.Set{})
	users, ids := f.mustCreateOrders(t, stormOrders)

	testenv.Together(2*len(ids), func(i int) {
		o := i / 2
		if i%2 == 0 {
			_, _ = svc.Pay(context.Background(), users[o], newKey(), ids[o], gateway.MethodOK)
			return
		}
		// Cancels land from before the payment begins to after it
		// settles, most of them while the charge is in flight.
		time.Sleep(time.Duration(o%10) * 15 * time.Millisecond)
		_, _ = f.orders.Cancel(context.Background(), users[o], ids[o])
	})

	paid, cancelled := 0, 0
	for _, id := range ids {
		var status string
		if err := f.pool.QueryRow(context.Background(), `SELECT status FROM orders WHERE id = $1`, id).Scan(&status); err != nil {
			t.Fatal(err)
		}
		charges := f.gateway.Charges(id)
		live := 0
		for _, c := range charges {
			if c.Status != gateway.StatusRefunded {
				live++
			}
		}
		succeeded := f.mustInt(t, `SELECT count(*) FROM payments WHERE order_id = $1 AND status = 'succeeded'`, id)
		processing := f.mustInt(t, `SELECT count(*) FROM payments WHERE order_id = $1 AND status = 'processing'`, id)
		switch {
		case processing != 0:
			t.Errorf("order %s: %d payments left processing", id, processing)
		case status == "paid" && (live != 1 || len(charges) != 1 || succeeded != 1):
			t.Errorf("paid order %s: %d charges (%d not refunded), %d succeeded payments; want 1, 1, 1", id, len(charges), live, succeeded)
		case status == "cancelled" && (live != 0 || succeeded != 0):
			t.Errorf("cancelled order %s: %d charges not refunded, %d succeeded payments; want none", id, live, succeeded)
		case status != "paid" && status != "cancelled":
			t.Errorf("order %s is %s", id, status)
		}
		if status == "paid" {
			paid++
		} else {
			cancelled++
		}
	}
	t.Logf("%d paid, %d cancelled, %d of them after their charge (refunded)", paid, cancelled,
		f.mustInt(t, `SELECT count(*) FROM payments WHERE status = 'refunded'`))
	if got, want := f.mustInt(t, `SELECT stock_available FROM products WHERE sku = 'SKU-PAY'`), cancelled; got != want {
		t.Errorf("stock is %d, want %d (one unit back per cancelled order)", got, want)
	}
}
