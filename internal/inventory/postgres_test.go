package inventory_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shop-example/shop/harness/testenv"
	"github.com/shop-example/shop/internal/inventory"
	"github.com/shop-example/shop/internal/platform/postgres"
	"github.com/shop-example/shop/internal/platform/problem"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func mustCreate(t *testing.T, s *inventory.Store, sku string, stock int) {
	t.Helper()
	if _, err := s.Create(context.Background(), inventory.Product{SKU: sku, Name: sku, PriceCents: 100, StockAvailable: stock}); err != nil {
		t.Fatalf("create %s: %v", sku, err)
	}
}

func stockOf(t *testing.T, db *pgxpool.Pool, sku string) int {
	t.Helper()
	var n int
	if err := db.QueryRow(context.Background(), "SELECT stock_available FROM products WHERE sku = $1", sku).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// take runs Store.Take in a transaction of its own, as an order does.
func take(db *pgxpool.Pool, lines ...inventory.Line) (map[string]int64, error) {
	var prices map[string]int64
	err := postgres.InTx(context.Background(), db, func(tx pgx.Tx) error {
		var err error
		prices, err = inventory.NewStore(db, nil).Take(context.Background(), tx, lines)
		return err
	})
	return prices, err
}

func TestTake(t *testing.T) {
	t.Parallel()
	db := testenv.Pool(t)
	s := inventory.NewStore(db, nil)
	mustCreate(t, s, "A", 5)
	mustCreate(t, s, "B", 1)

	t.Run("all lines", func(t *testing.T) {
		prices, err := take(db, inventory.Line{SKU: "B", Quantity: 1}, inventory.Line{SKU: "A", Quantity: 2})
		if err != nil || prices["A"] != 100 || prices["B"] != 100 {
			t.Fatalf("take: %v %v", prices, err)
		}
		if a, b := stockOf(t, db, "A"), stockOf(t, db, "B"); a != 3 || b != 0 {
			t.Fatalf("stock A %d B %d, want 3 0", a, b)
		}
	})
	t.Run("one line short takes nothing", func(t *testing.T) {
		_, err := take(db, inventory.Line{SKU: "A", Quantity: 1}, inventory.Line{SKU: "B", Quantity: 1})
		p, ok := problem.As(err)
		if !ok || p.Code != problem.OutOfStock || p.Detail != "B: 0 available, 1 requested" {
			t.Fatalf("take: %v, want out_of_stock for B", err)
		}
		if a := stockOf(t, db, "A"); a != 3 {
			t.Fatalf("stock A %d after a refused order, want 3", a)
		}
	})
	t.Run("unknown sku", func(t *testing.T) {
		_, err := take(db, inventory.Line{SKU: "A", Quantity: 1}, inventory.Line{SKU: "NOPE", Quantity: 1})
		if !errors.Is(err, inventory.ErrNotFound) {
			t.Fatalf("take: %v, want not_found", err)
		}
	})
	t.Run("return", func(t *testing.T) {
		err := postgres.InTx(context.Background(), db, func(tx pgx.Tx) error {
			b := &pgx.Batch{}
			// Two orders' lines, one SKU twice: returned as one line each.
			inventory.QueueReturn(b, []inventory.Line{{SKU: "B", Quantity: 1}, {SKU: "A", Quantity: 1}, {SKU: "A", Quantity: 1}})
			return tx.SendBatch(context.Background(), b).Close()
		})
		if err != nil {
			t.Fatal(err)
		}
		if a, b := stockOf(t, db, "A"), stockOf(t, db, "B"); a != 5 || b != 1 {
			t.Fatalf("stock A %d B %d, want 5 1", a, b)
		}
	})
}

// Orders that share SKUs, listed in opposite orders, take their rows in SKU
// order and so never deadlock: every order succeeds and stock adds up.
func TestTake_NoDeadlock(t *testing.T) {
	t.Parallel()
	db := testenv.Pool(t)
	s := inventory.NewStore(db, nil)
	const n = 60
	skus := []string{"S1", "S2", "S3", "S4"}
	for _, sku := range skus {
		mustCreate(t, s, sku, n)
	}
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		lines := make([]inventory.Line, len(skus))
		for j, sku := range skus {
			if i%2 == 1 {
				sku = skus[len(skus)-1-j]
			}
			lines[j] = inventory.Line{SKU: sku, Quantity: 1}
		}
		wg.Go(func() {
			if _, err := take(db, lines...); err != nil {
				errs <- fmt.Errorf("order %d: %w", i, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err) // a deadlock shows here as SQLSTATE 40P01
	}
	for _, sku := range skus {
		if got := stockOf(t, db, sku); got != 0 {
			t.Errorf("stock %s = %d, want 0", sku, got)
		}
	}
}

func TestStore_UpdateAndRestock(t *testing.T) {
	t.Parallel()
	db := testenv.Pool(t)
	s := inventory.NewStore(db, nil)
	mustCreate(t, s, "P", 1)
	ctx := context.Background()
	price := int64(250)

	p, err := s.Update(ctx, "P", 1, inventory.Patch{PriceCents: &price})
	if err != nil || p.Version != 2 || p.PriceCents != 250 || p.Name != "P" {
		t.Fatalf("update: %+v %v", p, err)
	}
	if _, err := s.Update(ctx, "P", 1, inventory.Patch{PriceCents: &price}); !errors.Is(err, inventory.ErrVersionMismatch) {
		t.Fatalf("stale update: %v, want version_mismatch", err)
	}
	if _, err := s.Update(ctx, "NOPE", 1, inventory.Patch{PriceCents: &price}); !errors.Is(err, inventory.ErrNotFound) {
		t.Fatalf("update unknown: %v, want not_found", err)
	}
	p, err = s.Restock(ctx, "P", 9, nil)
	if err != nil || p.StockAvailable != 10 || p.Version != 2 {
		t.Fatalf("restock: %+v %v (stock moves do not change the version)", p, err)
	}
	if _, err := s.Restock(ctx, "P", 2_147_483_647, nil); problem.CodeOf(err) != problem.Invalid {
		t.Fatalf("restock past the integer range: %v, want invalid_request", err)
	}
	if _, err := s.Restock(ctx, "NOPE", 1, nil); !errors.Is(err, inventory.ErrNotFound) {
		t.Fatalf("restock unknown: %v, want not_found", err)
	}
	if _, err := s.Create(ctx, inventory.Product{SKU: "P", Name: "again", StockAvailable: 1}); !errors.Is(err, inventory.ErrExists) {
		t.Fatalf("create twice: %v, want already_exists", err)
	}
}

// Restocking stops at the stock a product may be created with: a restock
// that would pass inventory.MaxStock changes nothing.
func TestStore_RestockCap(t *testing.T) {
	t.Parallel()
	db := testenv.Pool(t)
	s := inventory.NewStore(db, nil)
	ctx := context.Background()
	mustCreate(t, s, "CAP", inventory.MaxStock-1)

	if p, err := s.Restock(ctx, "CAP", 1, nil); err != nil || p.StockAvailable != inventory.MaxStock {
		t.Fatalf("restock to the cap: %+v %v, want stock %d", p, err, inventory.MaxStock)
	}
	for _, q := range []int{1, inventory.MaxRestock} {
		if _, err := s.Restock(ctx, "CAP", q, nil); problem.CodeOf(err) != problem.Invalid {
			t.Errorf("restock %d past the cap: %v, want invalid_request", q, err)
		}
	}
	if got := stockOf(t, db, "CAP"); got != inventory.MaxStock {
		t.Errorf("stock %d, want %d (unchanged)", got, inventory.MaxStock)
	}
}
