package testenv_test

import (
	"context"
	"testing"

	"github.com/shop-example/shop/harness/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func TestPool_IsMigratedAndPrivate(t *testing.T) {
	t.Parallel()
	a, b := testenv.Pool(t), testenv.Pool(t)
	ctx := context.Background()
	if _, err := a.Exec(ctx, `INSERT INTO products (sku, name, price_cents, stock_available, created_at, updated_at)
		VALUES ('SKU-1', 'one', 100, 1, now(), now())`); err != nil {
		t.Fatalf("insert into first database: %v", err)
	}
	var n int
	if err := b.QueryRow(ctx, "SELECT count(*) FROM products").Scan(&n); err != nil {
		t.Fatalf("count in second database: %v", err)
	}
	if n != 0 {
		t.Fatalf("second database sees %d products of the first", n)
	}
	if got := len(testenv.RedisAddrs(t)); got == 0 {
		t.Fatal("no redis nodes")
	}
}
