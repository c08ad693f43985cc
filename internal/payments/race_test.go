package payments_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/shop-example/shop/internal/gateway"
	"github.com/shop-example/shop/internal/payments"
	"github.com/shop-example/shop/internal/platform/lock"
	"github.com/shop-example/shop/internal/platform/problem"
)

// stormOrders and stormClicks size the storm: stormClicks concurrent pay
// calls for each of stormOrders orders, all orders at once.
const (
	stormOrders = 20
	stormClicks = 15
)

// storm pays every order stormClicks times at once and returns how many
// calls each error code (or "ok") got.
func storm(t *testing.T, svc *payments.Service, users, ids []string) map[string]int {
	t.Helper()
	var mu sync.Mutex
	codes := map[string]int{}
	together(len(ids)*stormClicks, func(i int) {
		o := i % len(ids)
		_, err := svc.Pay(context.Background(), users[o], ids[o], gateway.MethodOK)
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
	})
	return codes
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
		lock       bool
		dropIndex  bool
		wantBroken bool
	}{
		// Every layer in place.
		{name: "AllLayers", lock: true},
		// Layer 1 off: the state check and the partial unique index hold.
		{name: "WithoutLock", lock: false},
		// Layer 4 off: the lock serialises the clicks; each later click
		// finds the order paid.
		{name: "WithoutIndex", lock: true, dropIndex: true},
		// Lock and index off: clicks begin payments side by side, the
		// gateway sees several keys, and the customer is charged more than
		// once (the extra charges are refunded, but they happened). This
		// is the failure the two layers prevent; the check must see it.
		{name: "WithoutLockAndIndex", lock: false, dropIndex: true, wantBroken: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			if tc.dropIndex {
				f.mustExec(t, `DROP INDEX payments_one_active_per_order`)
			}
			var locker payments.Locker = lock.None{}
			if tc.lock {
				locker = f.redisLock(t)
			}
			svc := f.service(t, locker)
			users, ids := f.mustCreateOrders(t, stormOrders)

			codes := storm(t, svc, users, ids)
			t.Logf("answers: %v", codes)

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
			if codes["ok"] < len(ids) {
				t.Errorf("%d calls succeeded, want at least one per order (%d)", codes["ok"], len(ids))
			}
			// Charged money is never left on an order that is not paid.
			if n := f.mustInt(t, `SELECT count(*) FROM payments p JOIN orders o ON o.id = p.order_id
				WHERE p.status = 'succeeded' AND o.status <> 'paid'`); n != 0 {
				t.Errorf("%d succeeded payments on orders that are not paid", n)
			}
		})
	}
}
