package bench

// Order creation in the shoot-out: each operation places a one-unit order
// (the stock taken and the order inserted in one transaction, with
// inventory.Store.Take and orders.Store.Insert where the strategy allows), on one
// SKU (hot) or one of -skus (spread). The audit compares, per SKU, the
// units taken from stock with the orders the clients were told were
// placed (in flight) and with the units the orders hold (after): every
// unit sold that the stock did not count is a unit oversold (a lost
// update of the stock).

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/shop-example/shop/harness/variants"
	"github.com/shop-example/shop/internal/inventory"
	"github.com/shop-example/shop/internal/orders"
	"github.com/shop-example/shop/internal/platform/postgres"
)

// Statements of the baselines that no store runs.
const (
	// optimistic: the version column of products, checked on the write.
	sqlStockVersioned      = `SELECT stock_available, price_cents, version FROM products WHERE sku = $1`
	sqlWriteStockVersioned = `UPDATE products SET stock_available = $2, version = version + 1 WHERE sku = $1 AND version = $3`
	// row lock: the read takes the row's lock until the transaction ends.
	sqlStockForUpdate = `SELECT stock_available, price_cents FROM products WHERE sku = $1 FOR UPDATE`
	sqlWriteStock     = `UPDATE products SET stock_available = $2 WHERE sku = $1`
	// advisory: a transaction-scoped lock on a key derived from the
	// resource (seed 001), taken before the naive read.
	sqlAdvisoryLock = `SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`

	// The audit: per SKU of a cell, the units taken from stock and the
	// units in orders. order_items has no index on sku, so its rows are
	// summed in one pass, not once per SKU.
	sqlStockAudit = `SELECT p.sku, $2::bigint - p.stock_available, coalesce(s.sold, 0)
		FROM products p
		LEFT JOIN (SELECT sku, sum(quantity) AS sold FROM order_items WHERE sku = ANY($1) GROUP BY sku) s ON s.sku = p.sku
		WHERE p.sku = ANY($1)`
)

// optimisticAttempts bounds the optimistic strategies' retries: the read
// and the version-checked write, up to this many times.
const optimisticAttempts = 5

var (
	errVersionConflict = errors.New("version changed on every attempt")
	errOutOfStockGo    = errors.New("out of stock (checked in Go)")
)

func ordersFlow() flowSpec {
	txn := func(how func(ctx context.Context, tx pgx.Tx, sku string) (int64, error)) func(ctx context.Context, a *arena, shape string) (cell, error) {
		return stockCell(func(a *arena) orderFunc { return a.placeOrder(how) })
	}
	return flowSpec{
		name:     "orders",
		title:    "Order creation (stock)",
		unit:     "orders/s",
		done:     "order placed",
		tables:   []string{"products", "orders", "order_items", "idempotency_keys"},
		anomaly:  "units oversold: units the orders hold that the stock never counted (lost updates of stock_available)",
		inFlight: "orders the clients were told were placed beyond the units the stock counted",
		strategies: map[string]strategy{
			"naive": {how: "read the stock, check in Go, write the difference (variants.ReadCheckWriteStock)",
				cell: txn(takeWith(variants.ReadCheckWriteStock{}))},
			"unique only": {how: "unconditional decrement; the CHECK (stock_available >= 0) is the only guard (variants.UnconditionalStock)",
				cell: txn(takeWith(variants.UnconditionalStock{Stock: &inventory.Store{}}))},
			"optimistic": {how: "read stock and version, write only if the version is unchanged; up to 5 attempts",
				cell: stockCell(func(a *arena) orderFunc { return a.placeOrderOptimistic })},
			"row lock": {how: "SELECT … FOR UPDATE, check in Go, write",
				cell: txn(takeForUpdate)},
			"advisory": {how: "pg_advisory_xact_lock on the SKU, then the naive read, check, write",
				cell: txn(func(ctx context.Context, tx pgx.Tx, sku string) (int64, error) {
					if _, err := tx.Exec(ctx, sqlAdvisoryLock, "sku:"+sku); err != nil {
						return 0, err
					}
					return takeWith(variants.ReadCheckWriteStock{})(ctx, tx, sku)
				})},
			"redsync only": {how: "the naive transaction inside a Redlock on the SKU over the three nodes",
				cell: stockCell(func(a *arena) orderFunc {
					naive := a.placeOrder(takeWith(variants.ReadCheckWriteStock{}))
					return func(ctx context.Context, client int, sku string) string {
						return underLock(ctx, a, "sku:"+sku, func(ctx context.Context) string { return naive(ctx, client, sku) })
					}
				})},
			"conditional": {how: "one conditional UPDATE … WHERE stock_available >= 1 (inventory.Store.Take; the raw baseline of bench orders)",
				cell: txn(takeWith(&inventory.Store{}))},
			"layered": {how: "POST /v1/orders through the service: auth, idempotency claim, conditional decrement, constraints",
				cell: stockCell(func(a *arena) orderFunc { return a.svc.order })},
		},
	}
}

// stockCell seeds the SKUs of one cell, with more stock than any run
// sells, and audits them afterwards.
func stockCell(op func(a *arena) orderFunc) func(ctx context.Context, a *arena, shape string) (cell, error) {
	return func(ctx context.Context, a *arena, shape string) (cell, error) {
		n := 1
		if shape == spread {
			n = a.o.skus
		}
		prefix := a.prefix("SKU")
		if _, err := a.pool.Exec(ctx, sqlSeedProducts, prefix, n, benchStock); err != nil {
			return cell{}, fmt.Errorf("seed products: %w", err)
		}
		skus := make([]string, n)
		for i := range skus {
			skus[i] = prefix + strconv.Itoa(i+1)
		}
		t := newTold()
		audit := func(ctx context.Context) (audit, error) { return auditStock(ctx, a, skus, t.byKey()) }
		return cell{op: op(a), keys: skus, told: t, audit: audit}, nil
	}
}

// auditStock counts, per SKU, the orders told placed beyond the units
// taken from stock (in flight), and the units sold that the stock did not
// count or the other way round (after).
func auditStock(ctx context.Context, a *arena, skus []string, placed map[string]int) (audit, error) {
	rows, err := a.pool.Query(ctx, sqlStockAudit, skus, benchStock)
	if err != nil {
		return audit{}, err
	}
	var found audit
	var sku string
	var taken, sold int
	_, err = pgx.ForEachRow(rows, []any{&sku, &taken, &sold}, func() error {
		found.inFlight += max(placed[sku]-taken, 0)
		found.after += abs(sold - taken)
		return nil
	})
	return found, err
}

func abs(n int) int { return max(n, -n) }

// takeWith is stock's Take of one unit: the store's own statements, or a
// variant's (harness/variants).
func takeWith(stock orders.Stock) func(ctx context.Context, tx pgx.Tx, sku string) (int64, error) {
	return func(ctx context.Context, tx pgx.Tx, sku string) (int64, error) {
		prices, err := stock.Take(ctx, tx, []inventory.Line{{SKU: sku, Quantity: 1}})
		return prices[sku], err
	}
}

// takeForUpdate reads the stock under the row's lock, checks it in Go and
// writes the difference.
func takeForUpdate(ctx context.Context, tx pgx.Tx, sku string) (int64, error) {
	var stock, price int64
	if err := tx.QueryRow(ctx, sqlStockForUpdate, sku).Scan(&stock, &price); err != nil {
		return 0, err
	}
	if stock < 1 {
		return 0, errOutOfStockGo
	}
	_, err := tx.Exec(ctx, sqlWriteStock, sku, stock-1)
	return price, err
}

// placeOrder returns the operation that takes one unit of sku with take
// and inserts the order, in one transaction.
func (a *arena) placeOrder(take func(ctx context.Context, tx pgx.Tx, sku string) (int64, error)) orderFunc {
	return func(ctx context.Context, client int, sku string) string {
		err := pgx.BeginFunc(ctx, a.pool, func(tx pgx.Tx) error {
			price, err := take(ctx, tx, sku)
			if err != nil {
				return err
			}
			return a.insertOrder(ctx, tx, client, sku, price)
		})
		return orderFailure(ctx, err)
	}
}

// placeOrderOptimistic reads the stock and its version, then writes the
// order and the stock only if the version is still the one read; on a
// conflict it starts over, up to optimisticAttempts times.
func (a *arena) placeOrderOptimistic(ctx context.Context, client int, sku string) string {
	for range optimisticAttempts {
		var stock, price, version int64
		if err := a.pool.QueryRow(ctx, sqlStockVersioned, sku).Scan(&stock, &price, &version); err != nil {
			return orderFailure(ctx, err)
		}
		if stock < 1 {
			return orderFailure(ctx, errOutOfStockGo)
		}
		err := pgx.BeginFunc(ctx, a.pool, func(tx pgx.Tx) error {
			tag, err := tx.Exec(ctx, sqlWriteStockVersioned, sku, stock-1, version)
			if err != nil {
				return err
			}
			if tag.RowsAffected() != 1 {
				return errVersionConflict
			}
			return a.insertOrder(ctx, tx, client, sku, price)
		})
		if !errors.Is(err, errVersionConflict) {
			return orderFailure(ctx, err)
		}
	}
	return orderFailure(ctx, errVersionConflict)
}

// insertOrder inserts a one-unit order of sku with the order store's own
// statement.
func (a *arena) insertOrder(ctx context.Context, tx pgx.Tx, client int, sku string, price int64) error {
	id, err := uuid.NewV7()
	if err != nil {
		return err
	}
	now := time.Now().UTC()
	return orders.NewStore(a.pool).Insert(ctx, tx, orders.Order{ID: id.String(), UserID: a.users[client], RequestKey: id.String(),
		Status: orders.StatusPendingPayment, TotalCents: price, Version: 1, CreatedAt: now, ExpiresAt: now.Add(15 * time.Minute),
		Items: []orders.Item{{SKU: sku, Quantity: 1, UnitPriceCents: price}}})
}

func orderFailure(ctx context.Context, err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, inventory.ErrOutOfStock), errors.Is(err, errOutOfStockGo):
		return "out of stock"
	case errors.Is(err, errVersionConflict):
		return "version conflict"
	case lockBusy(err):
		return "lock busy"
	case postgres.SQLState(err) != "":
		return "sqlstate " + postgres.SQLState(err)
	case ctx.Err() != nil:
		return "cancelled"
	}
	return "error"
}
