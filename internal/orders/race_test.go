package orders_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shop-example/shop/internal/inventory"
	"github.com/shop-example/shop/internal/orders"
	"github.com/shop-example/shop/internal/platform/layers"
	"github.com/shop-example/shop/internal/platform/problem"
)

// The flash sale: more buyers than stock. Invariant: sold = initial −
// remaining, and remaining is never negative.
func TestCreate_FlashSaleLayers(t *testing.T) {
	const stock, buyers = 50, 200
	tests := []struct {
		name       string
		layers     layers.Set
		dropCheck  bool
		wantBroken bool
	}{
		{name: "all layers"},
		{name: "conditional decrement off, CHECK holds", layers: layers.Off(layers.Version)},
		{name: "conditional decrement and CHECK off, oversells", layers: layers.Off(layers.Version, layers.Constraint),
			dropCheck: true, wantBroken: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			f.mustCreateProduct(t, "HOT", stock)
			if tt.dropCheck {
				f.mustExec(t, "ALTER TABLE products DROP CONSTRAINT products_stock_nonnegative")
			}
			svc := f.service(t, tt.layers)
			users := f.mustCreateUsers(t, buyers)

			var sold, refused atomic.Int64
			race(buyers, 32, func(i int) {
				_, err := svc.Create(context.Background(), users[i], key(i), line("HOT", 1), orders.NoClaim)
				switch {
				case err == nil:
					sold.Add(1)
				case errors.Is(err, inventory.ErrOutOfStock):
					refused.Add(1)
				default:
					t.Errorf("buyer %d: %v", i, err)
				}
			})

			remaining := f.stock(t, "HOT")
			orderRows := f.mustInt(t, "SELECT count(*) FROM orders")
			itemQty := f.mustInt(t, "SELECT coalesce(sum(quantity), 0) FROM order_items WHERE sku = 'HOT'")
			held := remaining >= 0 && orderRows == stock && itemQty == stock && remaining == stock-itemQty
			if tt.wantBroken {
				if held {
					t.Fatalf("with the conditional decrement and the CHECK off the sale still held (orders %d, stock %d): this test cannot fail", orderRows, remaining)
				}
				t.Logf("without layers 3 and 4: %d orders for %d items, stock %d", orderRows, stock, remaining)
				return
			}
			if !held || sold.Load() != stock || refused.Load() != buyers-stock {
				t.Fatalf("sold %d (rows %d, items %d), refused %d, stock left %d; want %d sold, %d refused, 0 left",
					sold.Load(), orderRows, itemQty, refused.Load(), remaining, stock, buyers-stock)
			}
		})
	}
}

// Twenty copies of one request (one user, one key), with the idempotency
// middleware out of the way: one order, stock taken once.
func TestCreate_SameRequestLayers(t *testing.T) {
	const copies = 20
	tests := []struct {
		name       string
		lock       bool
		dropUnique bool
		wantBroken bool
	}{
		{name: "lock and unique constraint", lock: true},
		{name: "lock off, unique constraint holds"},
		{name: "lock and unique constraint off, duplicates", dropUnique: true, wantBroken: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			f.mustCreateProduct(t, "SKU-1", 1000)
			if tt.dropUnique {
				f.mustExec(t, "ALTER TABLE orders DROP CONSTRAINT orders_user_request_key")
			}
			on := layers.Off(layers.Lock)
			if tt.lock {
				on = layers.Set{}
			}
			svc := f.service(t, on)
			user := f.mustCreateUsers(t, 1)[0]

			var mu sync.Mutex
			ids := map[string]int{}
			race(copies, copies, func(int) {
				o, err := svc.Create(context.Background(), user, "the-key", line("SKU-1", 2), orders.NoClaim)
				if err != nil {
					t.Errorf("create: %v", err)
					return
				}
				mu.Lock()
				ids[o.ID]++
				mu.Unlock()
			})

			rows := f.mustInt(t, "SELECT count(*) FROM orders WHERE request_key = 'the-key'")
			taken := 1000 - f.stock(t, "SKU-1")
			if tt.wantBroken {
				if rows == 1 {
					t.Fatal("without the lock and the unique constraint only one order was made: this test cannot fail")
				}
				t.Logf("without layers 1 and 4: %d orders, %d items taken for one request", rows, taken)
				return
			}
			if rows != 1 || taken != 2 || len(ids) != 1 {
				t.Fatalf("%d orders, %d items taken, %d distinct ids answered; want 1, 2, 1", rows, taken, len(ids))
			}
		})
	}
}

// Twenty concurrent cancels of one order. Invariant: the stock comes back
// exactly once.
func TestCancel_Layers(t *testing.T) {
	const cancels, qty, initial = 20, 3, 100
	tests := []struct {
		name       string
		layers     layers.Set
		dropPK     bool
		wantBroken bool
	}{
		{name: "all layers"},
		{name: "lock off", layers: layers.Off(layers.Lock)},
		{name: "lock and constraint off, state and version hold", layers: layers.Off(layers.Lock, layers.Constraint), dropPK: true},
		{name: "only the constraint", layers: layers.Off(layers.Lock, layers.State, layers.Version)},
		{name: "only the lock, returns stock repeatedly", layers: layers.Off(layers.State, layers.Version, layers.Constraint),
			dropPK: true, wantBroken: true},
		{name: "no layer, returns stock repeatedly", layers: layers.Off(layers.Lock, layers.State, layers.Version, layers.Constraint),
			dropPK: true, wantBroken: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			f.mustCreateProduct(t, "SKU-1", initial)
			if tt.dropPK {
				f.mustExec(t, "ALTER TABLE stock_releases DROP CONSTRAINT stock_releases_pkey")
			}
			svc := f.service(t, tt.layers)
			user := f.mustCreateUsers(t, 1)[0]
			o, err := svc.Create(context.Background(), user, "k", line("SKU-1", qty), orders.NoClaim)
			if err != nil {
				t.Fatalf("create: %v", err)
			}

			race(cancels, cancels, func(int) {
				got, err := svc.Cancel(context.Background(), user, o.ID)
				if problem.CodeOf(err) == problem.ResourceBusy {
					return // the lock's wait budget ran out: a refusal, not a change
				}
				if err != nil || got.Status != orders.StatusCancelled {
					t.Errorf("cancel: status %s, %v", got.Status, err)
				}
			})

			back := f.stock(t, "SKU-1") - (initial - qty)
			releases := f.mustInt(t, "SELECT count(*) FROM stock_releases WHERE order_id = $1", o.ID)
			status := orders.Status("")
			if err := f.pool.QueryRow(context.Background(), "SELECT status FROM orders WHERE id = $1", o.ID).Scan(&status); err != nil {
				t.Fatal(err)
			}
			if tt.wantBroken {
				if back == qty {
					t.Fatal("the stock came back once even without the layers: this test cannot fail")
				}
				t.Logf("%s: %d items came back for an order of %d", tt.name, back, qty)
				return
			}
			if back != qty || releases != 1 || status != orders.StatusCancelled {
				t.Fatalf("%d items came back (want %d), %d releases (want 1), status %s", back, qty, releases, status)
			}
		})
	}
}

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
		f.service(t, layers.Set{}),
		f.service(t, layers.Set{}),
		f.service(t, layers.Set{}),
	}
	users := f.mustCreateUsers(t, n)
	placed := make([]orders.Order, n)
	for i := range n {
		o, err := replicas[i%3].Create(context.Background(), users[i], key(i),
			[]inventory.Line{{SKU: "SKU-1", Quantity: 1 + i%3}, {SKU: "SKU-2", Quantity: 2}}, orders.NoClaim)
		if err != nil {
			t.Fatalf("create %d: %v", i, err)
		}
		placed[i] = o
	}
	f.clock.Advance(16 * time.Minute)

	var wg sync.WaitGroup
	start := make(chan struct{})
	for _, r := range replicas {
		wg.Go(func() {
			<-start
			if _, err := r.ExpireDue(context.Background()); err != nil {
				t.Errorf("expire: %v", err)
			}
		})
	}
	for i := 0; i < n; i += 2 {
		wg.Go(func() {
			<-start
			_, err := replicas[i%3].Cancel(context.Background(), users[i], placed[i].ID)
			if err != nil && !errors.Is(err, orders.ErrInvalidState) {
				t.Errorf("cancel %d: %v", i, err)
			}
		})
	}
	close(start)
	wg.Wait()
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
	svc := f.service(t, layers.Set{})
	users := f.mustCreateUsers(t, 2)
	o, err := svc.Create(context.Background(), users[0], "k", line("SKU-1", 1), orders.NoClaim)
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
