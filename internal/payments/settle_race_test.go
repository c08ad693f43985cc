package payments_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shop-example/shop/harness/gateway"
	"github.com/shop-example/shop/harness/testenv"
	"github.com/shop-example/shop/internal/payments"
	"github.com/shop-example/shop/internal/platform/layers"
)

// settlerPayments is how many payments each case settles: enough to hit
// the window between one settler's commit and another's decision many
// times over.
const settlerPayments = 100

// TestSettle_ConcurrentSettlers gives the same processing payments to
// several settlers at once with the lock off, as when the lock quorum is
// lost or a lease has expired: the request and the reconcilers of other
// replicas, or reconcilers alone. Each of them gets the charge back from
// the gateway (same key, one charge) and tries to record it. Exactly one
// records it; the others must see, on the payment's own row, that it is
// settled, and return that outcome. None may take the paid order for one
// that stopped waiting and refund its charge.
func TestSettle_ConcurrentSettlers(t *testing.T) {
	if testing.Short() {
		t.Skip("races real PostgreSQL and a gateway")
	}
	for _, settlers := range []int{2, 4, 8} {
		t.Run(fmt.Sprintf("RequestAnd%dReconcilers", settlers-1), func(t *testing.T) {
			// The gateway holds each new charge's answer a moment, so the
			// reconcilers find the payment processing and send its key
			// too; the gateway answers them all with the one charge.
			f := newFixtureWith(t, gateway.Options{AfterCharge: func(gateway.Charge) { time.Sleep(20 * time.Millisecond) }})
			request := f.service(t, layers.Off(layers.Lock))
			reconcilers := f.reconcilers(t, settlers-1)
			users, ids := f.mustCreateOrders(t, settlerPayments)

			var done atomic.Bool
			var contested atomic.Int64
			var wg sync.WaitGroup
			for _, r := range reconcilers {
				wg.Go(func() { contested.Add(int64(reconcileUntil(t, r, &done))) })
			}
			testenv.Together(10, func(w int) {
				for i := w; i < len(ids); i += 10 {
					if _, err := request.Pay(context.Background(), users[i], newKey(), ids[i], gateway.MethodOK); err != nil {
						t.Errorf("pay order %d: %v", i, err)
					}
				}
			})
			done.Store(true)
			wg.Wait()
			f.assertEveryOrderPaidOnce(t, ids)
			// Every payment was settled by its request; a reconciler
			// that says it settled one too went through the gateway
			// and the settlement with it: the race this test is about.
			assertContested(t, int(contested.Load()))
		})
		t.Run(fmt.Sprintf("%dReconcilers", settlers), func(t *testing.T) {
			// Payments begun and never answered (the request's process
			// died): every reconciler finds all of them due at once.
			f := newFixture(t)
			_, ids := f.mustCreateOrders(t, settlerPayments)
			for _, id := range ids {
				begin(t, f.pool, id, f.clock.Now().Truncate(time.Microsecond))
			}
			var settled atomic.Int64
			reconcilers := f.reconcilers(t, settlers)
			testenv.Together(settlers, func(i int) {
				n, err := reconcilers[i].Reconcile(context.Background())
				if err != nil {
					t.Errorf("reconciler %d: %v", i, err)
				}
				settled.Add(int64(n))
			})
			f.assertEveryOrderPaidOnce(t, ids)
			assertContested(t, int(settled.Load())-len(ids))
		})
	}
}

// reconcilers returns n payment services, each a replica whose clock is an
// hour ahead, so its reconciler finds every processing payment due.
func (f *fixture) reconcilers(t *testing.T, n int) []*payments.Service {
	t.Helper()
	ahead := func() time.Time { return f.clock.Now().Add(time.Hour) }
	out := make([]*payments.Service, n)
	for i := range out {
		out[i] = f.serviceAt(t, layers.Off(layers.Lock), ahead)
	}
	return out
}

// reconcileUntil runs the reconciler pass after pass until done is set,
// within a bound, and returns how many payments it reported settled.
func reconcileUntil(t *testing.T, svc *payments.Service, done *atomic.Bool) int {
	settled := 0
	for range 5000 {
		if done.Load() {
			break
		}
		n, err := svc.Reconcile(context.Background())
		if err != nil {
			t.Errorf("reconcile: %v", err)
			break
		}
		settled += n
	}
	return settled
}

// assertContested fails the test if no settlement was contested: a
// settler that reports a payment settled which another settler recorded
// went through the gateway and the settlement second. Without any, the
// test did not race and shows nothing.
func assertContested(t *testing.T, seconds int) {
	t.Helper()
	if seconds == 0 {
		t.Error("no payment was settled by two settlers: the test did not race")
	}
	t.Logf("%d settlements were second to another settler's", seconds)
}

// assertEveryOrderPaidOnce checks that every order ended paid with its
// one charge unrefunded, on the database and in the gateway's audit.
func (f *fixture) assertEveryOrderPaidOnce(t *testing.T, ids []string) {
	t.Helper()
	r := f.books(t)
	if !r.OK() {
		t.Error(r)
	} else {
		t.Log(r)
	}
	if r.Paid != len(ids) || r.InFlight != 0 {
		t.Errorf("%d of %d orders paid, %d in flight; want all paid", r.Paid, len(ids), r.InFlight)
	}
	if r.Refunded != 0 {
		t.Errorf("%d charges refunded; every order was waiting for its payment, so none should be", r.Refunded)
	}
}
