package books_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/shop-example/shop/harness/books"
	"github.com/shop-example/shop/harness/testenv"
	"github.com/shop-example/shop/internal/platform/auth"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// FromDBFor reads what FromDB reads of the orders it is given, and
// nothing of the others.
func TestFromDBFor(t *testing.T) {
	ctx := context.Background()
	pool := testenv.Pool(t)
	u, _, err := auth.NewStore(pool).CreateUser(ctx, "books")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	var ids []string
	for i := range 3 {
		id := uuid.NewString()
		ids = append(ids, id)
		if _, err := pool.Exec(ctx, `INSERT INTO orders (id, user_id, request_key, status, total_cents, version, created_at, updated_at, expires_at)
			VALUES ($1, $2, $3, 'paid', 100, 1, $4, $4, $4)`, id, u.ID, id, now); err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, `INSERT INTO payments (id, order_id, status, amount_cents, payment_method, charge_id, version, created_at, updated_at)
			VALUES ($1, $2, 'succeeded', 100, 'pm_card_ok', $3, 1, $4, $4)`, uuid.NewString(), id, fmt.Sprintf("ch%d", i), now); err != nil {
			t.Fatal(err)
		}
	}
	allOrders, allPayments, err := books.FromDB(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	some := ids[:2]
	orders, payments, err := books.FromDBFor(ctx, pool, some)
	if err != nil {
		t.Fatal(err)
	}
	wantOrders := slices.DeleteFunc(allOrders, func(o books.Order) bool { return !slices.Contains(some, o.ID) })
	wantPayments := slices.DeleteFunc(allPayments, func(p books.Payment) bool { return !slices.Contains(some, p.OrderID) })
	if len(wantOrders) != 2 || len(wantPayments) != 2 {
		t.Fatalf("FromDB read %d orders and %d payments of the 2 orders asked for; want 2 of each", len(wantOrders), len(wantPayments))
	}
	if !slices.Equal(orders, wantOrders) || !slices.Equal(payments, wantPayments) {
		t.Errorf("FromDBFor = %v, %v; want %v, %v", orders, payments, wantOrders, wantPayments)
	}
}
