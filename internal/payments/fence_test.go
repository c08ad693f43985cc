package payments_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/shop-example/shop/harness/gateway"
	"github.com/shop-example/shop/harness/variants"
	"github.com/shop-example/shop/internal/orders"
	"github.com/shop-example/shop/internal/payments"
	"github.com/shop-example/shop/internal/platform/layers"
	"github.com/shop-example/shop/internal/platform/lock"
)

// TestFence_StaleSettler shows the version as the fencing token. Settler A
// holds the lock on payment:{order} and has read the processing payment;
// then it stops (a GC pause, a frozen VM: its watchdog stops with it) for
// longer than its lease. Settler B, the reconciler of another replica,
// takes the lock that is free again, gets the charge from the gateway and
// records it. A wakes up believing it still holds the lock and writes what
// it decided before its pause: the card was declined.
//
// With the version check, A's write is refused on the payment's own row:
// the charge stays recorded and the books balance. Without it, the stale
// write lands: the charged payment of a paid order is recorded as failed,
// its charge recorded nowhere.
func TestFence_StaleSettler(t *testing.T) {
	if testing.Short() {
		t.Skip("needs PostgreSQL, Redis and a gateway")
	}
	const lease = 300 * time.Millisecond
	for _, tc := range []struct {
		name       string
		layers     layers.Set
		wantLanded bool
	}{
		{name: "VersionChecked"},
		{name: "WithoutVersionCheck", layers: layers.Off(layers.Version), wantLanded: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			ctx := context.Background()
			_, ids := f.mustCreateOrders(t, 1)
			read, _ := begin(t, f.pool, ids[0], f.clock.Now().Truncate(time.Microsecond)) // what A read

			// A takes the lock as lock.Locker names it, with a short lease
			// and no watchdog, and stops past the lease.
			var clients []*redis.Client
			for _, addr := range f.addrs {
				c := redis.NewClient(&redis.Options{Addr: addr})
				t.Cleanup(func() { _ = c.Close() })
				clients = append(clients, c)
			}
			key := lock.DefaultPrefix + "payment:" + ids[0]
			mu := redsyncOver(clients).NewMutex(key, redsync.WithExpiry(lease), redsync.WithTries(20))
			if err := mu.LockContext(ctx); err != nil {
				t.Fatalf("A takes the lock: %v", err)
			}
			waitExpired(t, clients, key, 10*lease)

			// B: the lock is free; the reconciler takes it and settles.
			ahead := func() time.Time { return f.clock.Now().Add(time.Hour) }
			if n, err := f.serviceAt(t, tc.layers, ahead).Reconcile(ctx); err != nil || n != 1 {
				t.Fatalf("B's reconcile = %d, %v; want 1 settled", n, err)
			}

			// A wakes up and writes its stale decision.
			now := f.clock.Now().Truncate(time.Microsecond)
			failed := read
			if err := failed.Fail("declined, as A saw it before its pause", now); err != nil {
				t.Fatal(err)
			}
			rows := variants.Payments(payments.NewStore(f.pool), tc.layers, nil)
			order, err := orders.NewStore(f.pool).Get(ctx, ids[0]) // the order as A finds it
			if err != nil {
				t.Fatal(err)
			}
			err = settle(ctx, f.pool, rows, failed, read.Version, order, orders.PaymentEnded(now))

			r := f.books(t)
			status := f.mustString(t, `SELECT status FROM payments WHERE id = $1`, read.ID)
			if tc.wantLanded {
				if err != nil || status != string(payments.StatusFailed) || r.OK() {
					t.Fatalf("without the version check A's stale write should land: Settle = %v, payment %s, %s", err, status, r)
				}
				t.Logf("the stale write landed: payment %s of a paid order; %s", status, r)
				return
			}
			if !errors.Is(err, payments.ErrVersionConflict) {
				t.Errorf("A's stale Settle = %v, want ErrVersionConflict", err)
			}
			if status != string(payments.StatusSucceeded) || !r.OK() || r.Paid != 1 {
				t.Errorf("payment %s; %s; want it succeeded and the order paid", status, r)
			}
		})
	}
}

// TestPay_ClientHangsUp: the client gives up while its charge is at the
// gateway. The payment still runs to its recorded outcome: the flow runs
// on a context detached from the request's, so a hang-up cannot cut a
// charge off from its record.
func TestPay_ClientHangsUp(t *testing.T) {
	if testing.Short() {
		t.Skip("needs PostgreSQL, Redis and a gateway")
	}
	ctx, hangUp := context.WithCancel(context.Background())
	defer hangUp()
	f := newFixtureWith(t, gateway.Options{AfterCharge: func(gateway.Charge) { hangUp() }})
	users, ids := f.mustCreateOrders(t, 1)
	p, err := f.service(t, layers.Set{}).Pay(ctx, users[0], newKey(), ids[0], gateway.MethodOK)
	if err != nil || p.Status != payments.StatusSucceeded {
		t.Fatalf("Pay after the client hung up = %s, %v; want succeeded", p.Status, err)
	}
	if ctx.Err() == nil {
		t.Fatal("the client never hung up: the test staged nothing")
	}
	if r := f.books(t); !r.OK() || r.Paid != 1 || r.InFlight != 0 {
		t.Errorf("%s; want the order paid with its one charge", r)
	}
}

func redsyncOver(clients []*redis.Client) *redsync.Redsync {
	pools := make([]redsyncredis.Pool, len(clients))
	for i, c := range clients {
		pools[i] = goredis.NewPool(c)
	}
	return redsync.New(pools...)
}

// waitExpired waits until key has expired on every node, within bound.
func waitExpired(t *testing.T, clients []*redis.Client, key string, bound time.Duration) {
	t.Helper()
	deadline := time.Now().Add(bound)
	for {
		live := 0
		for _, c := range clients {
			if n, err := c.Exists(context.Background(), key).Result(); err == nil && n > 0 {
				live++
			}
		}
		if live == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the lease on %s did not expire within %s", key, bound)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
