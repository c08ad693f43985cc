package orders_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/shop-example/shop/harness/testenv"
	"github.com/shop-example/shop/internal/inventory"
	"github.com/shop-example/shop/internal/orders"
)

// The layers of create and cancel, taken off one by one and together, are
// raced over two replicas through HTTP in internal/app (TestAblation_*,
// docs/ABLATION.md). The tests here are the order flows' own races.

// Three expiry jobs and users cancelling the same orders, all at once.
// Invariant: each order ends cancelled or expired, and its stock comes
// back exactly once.
func TestExpiry_ConcurrentJobsAndCancels(t *testing.T) {
	t.Parallel()
	const n, initial = 30, 1000
	f := newFixture(t)
	f.mustCreateProduct(t, "SKU-1", initial)
	f.mustCreateProduct(t, "SKU-2", initial)
	replicas := []*orders.Service{
		f.service(t),
		f.service(t),
		f.service(t),
	}
	users := f.mustCreateUsers(t, n)
	placed := make([]orders.Order, n)
	for i := range n {
		o, err := replicas[i%3].Create(context.Background(), users[i], key(i),
			[]inventory.Line{{SKU: "SKU-1", Quantity: 1 + i%3}, {SKU: "SKU-2", Quantity: 2}})
		if err != nil {
			t.Fatalf("create %d: %v", i, err)
		}
		placed[i] = o
	}
	f.clock.Advance(16 * time.Minute)

	// The three jobs and a cancel of every other order, released at once.
	jobs := len(replicas)
	testenv.Together(jobs+n/2, func(i int) {
		if i < jobs {
			if _, err := replicas[i].ExpireDue(context.Background()); err != nil {
				t.Errorf("expire: %v", err)
			}
			return
		}
		o := 2 * (i - jobs)
		_, err := replicas[o%3].Cancel(context.Background(), users[o], placed[o].ID)
		if err != nil && !errors.Is(err, orders.ErrInvalidState) {
			t.Errorf("cancel %d: %v", o, err)
		}
	})
	// A cancel may have held an order while the jobs passed it; one more
	// run picks up what is still due.
	if _, err := replicas[0].ExpireDue(context.Background()); err != nil {
		t.Fatalf("expire: %v", err)
	}

	if got := f.stock(t, "SKU-1"); got != initial {
		t.Errorf("SKU-1 stock %d, want %d", got, initial)
	}
	if got := f.stock(t, "SKU-2"); got != initial {
		t.Errorf("SKU-2 stock %d, want %d", got, initial)
	}
	if got := f.mustInt(t, "SELECT count(*) FROM stock_releases"); got != n {
		t.Errorf("%d stock releases, want %d", got, n)
	}
	if got := f.mustInt(t, "SELECT count(*) FROM orders WHERE status NOT IN ('cancelled', 'expired')"); got != 0 {
		t.Errorf("%d orders neither cancelled nor expired", got)
	}
	mismatched := f.mustInt(t, `SELECT count(*) FROM orders o JOIN stock_releases r ON r.order_id = o.id
		WHERE r.reason <> o.status`)
	if mismatched != 0 {
		t.Errorf("%d releases disagree with their order's final status", mismatched)
	}
}

func TestCancel_Refusals(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.mustCreateProduct(t, "SKU-1", 10)
	svc := f.service(t)
	users := f.mustCreateUsers(t, 2)
	o, err := svc.Create(context.Background(), users[0], "k", line("SKU-1", 1))
	if err != nil {
		t.Fatal(err)
	}
	t.Run("another user's order is not found", func(t *testing.T) {
		if _, err := svc.Cancel(context.Background(), users[1], o.ID); !errors.Is(err, orders.ErrNotFound) {
			t.Fatalf("cancel: %v, want not_found", err)
		}
	})
	t.Run("another spelling of the id is not found", func(t *testing.T) {
		ctx := context.Background()
		for _, id := range []string{strings.ToUpper(o.ID), "{" + o.ID + "}", strings.ReplaceAll(o.ID, "-", ""), "urn:uuid:" + o.ID} {
			if _, err := svc.Get(ctx, users[0], id); !errors.Is(err, orders.ErrNotFound) {
				t.Errorf("get %s: %v, want not_found", id, err)
			}
			if _, err := svc.Cancel(ctx, users[0], id); !errors.Is(err, orders.ErrNotFound) {
				t.Errorf("cancel %s: %v, want not_found", id, err)
			}
		}
		if n := f.mustInt(t, `SELECT count(*)::int FROM orders WHERE id = $1 AND status = 'pending_payment'`, o.ID); n != 1 {
			t.Fatalf("a cancel by another spelling of the id changed the order")
		}
	})
	t.Run("an expired order cannot be cancelled", func(t *testing.T) {
		f.clock.Advance(16 * time.Minute)
		if n, err := svc.ExpireDue(context.Background()); err != nil || n != 1 {
			t.Fatalf("expire: %d, %v", n, err)
		}
		_, err := svc.Cancel(context.Background(), users[0], o.ID)
		if !errors.Is(err, orders.ErrInvalidState) {
			t.Fatalf("cancel expired: %v, want invalid_state", err)
		}
		if got := f.stock(t, "SKU-1"); got != 10 {
			t.Fatalf("stock %d, want 10", got)
		}
	})
}

// A request key whose idempotency record is gone (swept after a day, or a
// caller with no record) still finds the order it placed, through
// orders_user_request_key: the same request is answered with that order,
// and the key sent with other items is idempotency_key_reused, never the
// first order passed off as the answer to a different request.
func TestCreate_KeyWithoutItsRecord(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.mustCreateProduct(t, "MUG", 10)
	f.mustCreateProduct(t, "SNEAKER", 10)
	svc := f.service(t)
	user := f.mustCreateUsers(t, 1)[0]
	first, err := svc.Create(context.Background(), user, "k", line("MUG", 1))
	if err != nil {
		t.Fatal(err)
	}
	again, err := svc.Create(context.Background(), user, "k", line("MUG", 1))
	if err != nil || again.ID != first.ID {
		t.Fatalf("the same request again: %+v, %v; want order %s", again, err, first.ID)
	}
	other, err := svc.Create(context.Background(), user, "k", line("SNEAKER", 3))
	if !errors.Is(err, orders.ErrKeyReused) {
		t.Fatalf("the key with other items: %+v, %v; want idempotency_key_reused", other, err)
	}
	if got := f.mustInt(t, `SELECT count(*)::int FROM orders WHERE user_id = $1`, user); got != 1 {
		t.Errorf("%d orders, want 1", got)
	}
	if got := f.stock(t, "SNEAKER"); got != 10 {
		t.Errorf("SNEAKER stock %d after a refused request, want 10", got)
	}
}
