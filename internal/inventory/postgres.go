package inventory

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shop-example/shop/internal/platform/idempotency"
	"github.com/shop-example/shop/internal/platform/postgres"
	"github.com/shop-example/shop/internal/platform/problem"
)

// The constraints that back the stock's rules (migrations/000002_inventory.up.sql).
const (
	ConstraintStockNonNegative = "products_stock_nonnegative" // no stock below zero: no oversell
	ConstraintPrimaryKey       = "products_pkey"              // one product per SKU
)

// Constraints is the catalogue of layer 4 of the stock, which the order
// flows lean on, as the race lab and the ablation tests take it off.
var Constraints = []postgres.Constraint{
	{Table: "products", Name: ConstraintStockNonNegative},
}

const productColumns = `sku, name, price_cents, stock_available, version, created_at, updated_at`

const (
	sqlInsertProduct = `INSERT INTO products (` + productColumns + `)
		VALUES ($1, $2, $3, $4, 1, $5, $5) RETURNING ` + productColumns

	sqlGetProduct = `SELECT ` + productColumns + ` FROM products WHERE sku = $1`

	sqlListProducts = `SELECT ` + productColumns + ` FROM products
		WHERE sku > $1 ORDER BY sku LIMIT $2`

	// Layer 3: the version check. The row changes only if nobody edited it
	// since the client read the version it sends in If-Match.
	sqlUpdateProduct = `UPDATE products
		SET name = COALESCE($3, name), price_cents = COALESCE($4, price_cents),
		    version = version + 1, updated_at = $5
		WHERE sku = $1 AND version = $2
		RETURNING ` + productColumns

	// A restock stops at MaxStock ($4), the most a product is created
	// with. Returned stock (sqlReturnStock) is not capped: it was in stock
	// before, and a cancel must never fail for it.
	sqlRestock = `UPDATE products SET stock_available = stock_available + $2, updated_at = $3
		WHERE sku = $1 AND stock_available <= $4::integer - $2::integer RETURNING ` + productColumns

	// The atomic conditional decrement: check and change in one statement.
	sqlTakeStock = `UPDATE products SET stock_available = stock_available - $2
		WHERE sku = $1 AND stock_available >= $2 RETURNING price_cents`

	sqlReturnStock = `UPDATE products SET stock_available = stock_available + $2 WHERE sku = $1`

	sqlStockOf = `SELECT sku, stock_available FROM products WHERE sku = ANY($1)`
)

// Store keeps products in PostgreSQL. Each exported method is one
// transaction (or one statement); Take and QueueReturn run inside a
// caller's transaction so an order and its stock change commit together.
type Store struct {
	db  *pgxpool.Pool
	now func() time.Time
}

// NewStore returns a store over db.
func NewStore(db *pgxpool.Pool, now func() time.Time) *Store {
	if now == nil {
		now = time.Now
	}
	return &Store{db: db, now: now}
}

// Create inserts a new product.
func (s *Store) Create(ctx context.Context, p Product) (Product, error) {
	now := s.now().UTC().Truncate(time.Microsecond)
	out, err := scanProduct(s.db.QueryRow(ctx, sqlInsertProduct, p.SKU, p.Name, p.PriceCents, p.StockAvailable, now))
	if postgres.ConstraintViolated(err) == ConstraintPrimaryKey {
		return Product{}, problem.Errorf(problem.AlreadyExists, "product %s already exists", p.SKU)
	}
	if err != nil {
		return Product{}, fmt.Errorf("insert product %s: %w", p.SKU, err)
	}
	return out, nil
}

// Get returns one product.
func (s *Store) Get(ctx context.Context, sku string) (Product, error) {
	p, err := scanProduct(s.db.QueryRow(ctx, sqlGetProduct, sku))
	if errors.Is(err, pgx.ErrNoRows) {
		return Product{}, notFound(sku)
	}
	if err != nil {
		return Product{}, fmt.Errorf("get product %s: %w", sku, err)
	}
	return p, nil
}

// List returns up to limit products after the cursor, ordered by SKU, and
// the cursor of the next page ("" on the last page).
func (s *Store) List(ctx context.Context, cursor string, limit int) ([]Product, string, error) {
	after, err := decodeCursor(cursor)
	if err != nil {
		return nil, "", err
	}
	rows, err := s.db.Query(ctx, sqlListProducts, after, limit+1)
	if err != nil {
		return nil, "", fmt.Errorf("list products: %w", err)
	}
	items, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Product, error) { return scanProduct(r) })
	if err != nil {
		return nil, "", fmt.Errorf("list products: %w", err)
	}
	next := ""
	if len(items) > limit {
		items = items[:limit]
		next = base64.RawURLEncoding.EncodeToString([]byte(items[limit-1].SKU))
	}
	return items, next, nil
}

// Update applies patch if the product is still at version.
func (s *Store) Update(ctx context.Context, sku string, version int64, patch Patch) (Product, error) {
	now := s.now().UTC().Truncate(time.Microsecond)
	p, err := scanProduct(s.db.QueryRow(ctx, sqlUpdateProduct, sku, version, patch.Name, patch.PriceCents, now))
	if errors.Is(err, pgx.ErrNoRows) {
		current, getErr := s.Get(ctx, sku)
		if getErr != nil {
			return Product{}, getErr
		}
		return Product{}, problem.Errorf(problem.VersionMismatch,
			"product %s is at version %d, not %d", sku, current.Version, version)
	}
	if err != nil {
		return Product{}, fmt.Errorf("update product %s: %w", sku, err)
	}
	return p, nil
}

// Restock adds quantity to the product's stock, up to MaxStock. With rec
// (layer 0, the route's idempotency.Store.Atomic) the same transaction
// claims the request's key first and completes it last with the answer,
// so the stock added and the answer that replays it commit together.
func (s *Store) Restock(ctx context.Context, sku string, quantity int, rec *idempotency.Record) (Product, error) {
	now := s.now().UTC().Truncate(time.Microsecond)
	overLimit := problem.Errorf(problem.Invalid, "quantity: stock of %s would exceed the limit of %d", sku, MaxStock)
	var p Product
	err := postgres.InTxBatched(ctx, s.db, rec.QueueClaim, func(tx pgx.Tx) (*pgx.Batch, error) {
		var err error
		p, err = scanProduct(tx.QueryRow(ctx, sqlRestock, sku, quantity, now, MaxStock))
		if errors.Is(err, pgx.ErrNoRows) {
			// The update refused; say whether the product is missing or full.
			if _, err := scanProduct(tx.QueryRow(ctx, sqlGetProduct, sku)); errors.Is(err, pgx.ErrNoRows) {
				return nil, notFound(sku)
			} else if err != nil {
				return nil, fmt.Errorf("get product %s: %w", sku, err)
			}
			return nil, overLimit
		}
		if err != nil {
			if postgres.SQLState(err) == "22003" { // numeric_value_out_of_range
				return nil, overLimit
			}
			return nil, fmt.Errorf("restock %s: %w", sku, err)
		}
		// The completion travels with the COMMIT.
		last := &pgx.Batch{}
		return last, rec.QueueComplete(last, restocked(p))
	})
	if err != nil {
		return Product{}, err
	}
	return p, nil
}

// Take takes every line from stock inside tx, all or nothing, and
// returns the unit price of each SKU: the conditional decrement of each
// product's row, the check and the change in one statement (layer 3 for a
// counter), with CHECK (stock_available >= 0) behind it (layer 4). Lines
// are taken in SKU order, so two orders sharing SKUs lock the rows in the
// same order and cannot deadlock; all statements go in one round trip. A
// product with too little fails the whole order with out_of_stock, naming
// the first short line; one the CHECK refused wraps ErrStockConstraint.
func (s *Store) Take(ctx context.Context, tx pgx.Tx, lines []Line) (map[string]int64, error) {
	sorted := BySKU(lines)
	batch := &pgx.Batch{}
	for _, l := range sorted {
		batch.Queue(sqlTakeStock, l.SKU, l.Quantity)
	}
	results := tx.SendBatch(ctx, batch)
	prices := make(map[string]int64, len(sorted))
	var short []Line
	for _, l := range sorted {
		var price int64
		err := results.QueryRow().Scan(&price)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			short = append(short, l)
		case postgres.ConstraintViolated(err) == ConstraintStockNonNegative:
			_ = results.Close()
			return nil, StockConstraint(l)
		case err != nil:
			_ = results.Close()
			return nil, fmt.Errorf("take stock of %s: %w", l.SKU, err)
		default:
			prices[l.SKU] = price
		}
	}
	if err := results.Close(); err != nil {
		return nil, fmt.Errorf("take stock: %w", err)
	}
	if len(short) > 0 {
		return nil, Shortfall(ctx, tx, short)
	}
	return prices, nil
}

// StockConstraint is the error of a line whose decrement
// products_stock_nonnegative refused: out_of_stock to the client,
// ErrStockConstraint to errors.Is.
func StockConstraint(l Line) error {
	return fmt.Errorf("%w: %w", problem.Errorf(problem.OutOfStock,
		"%s: not enough stock for %d", l.SKU, l.Quantity), ErrStockConstraint)
}

// QueueReturn queues in b the return of every line to the shelf, in SKU
// order, to travel with the rest of the transaction's round trip.
func QueueReturn(b *pgx.Batch, lines []Line) {
	for _, l := range merged(lines) {
		b.Queue(sqlReturnStock, l.SKU, l.Quantity)
	}
}

// merged is lines with one line per SKU, in SKU order: what several
// orders give back together.
func merged(lines []Line) []Line {
	var out []Line
	for _, l := range BySKU(lines) {
		if n := len(out); n > 0 && out[n-1].SKU == l.SKU {
			out[n-1].Quantity += l.Quantity
			continue
		}
		out = append(out, l)
	}
	return out
}

// BySKU returns a copy of lines in SKU order: the one order in which every
// transaction locks product rows, so no two of them can deadlock.
func BySKU(lines []Line) []Line {
	sorted := slices.Clone(lines)
	slices.SortFunc(sorted, func(a, b Line) int { return strings.Compare(a.SKU, b.SKU) })
	return sorted
}

// Shortfall explains why lines could not be taken: an unknown SKU is
// not_found, otherwise the first line short of stock is out_of_stock.
func Shortfall(ctx context.Context, tx pgx.Tx, short []Line) error {
	skus := make([]string, len(short))
	for i, l := range short {
		skus[i] = l.SKU
	}
	rows, err := tx.Query(ctx, sqlStockOf, skus)
	if err != nil {
		return fmt.Errorf("read stock: %w", err)
	}
	available := map[string]int{}
	var sku string
	var n int
	if _, err := pgx.ForEachRow(rows, []any{&sku, &n}, func() error { available[sku] = n; return nil }); err != nil {
		return fmt.Errorf("read stock: %w", err)
	}
	for _, l := range short {
		if _, ok := available[l.SKU]; !ok {
			return notFound(l.SKU)
		}
	}
	l := short[0]
	return problem.Errorf(problem.OutOfStock, "%s: %d available, %d requested", l.SKU, available[l.SKU], l.Quantity)
}

func notFound(sku string) error {
	return problem.Errorf(problem.NotFound, "product %s not found", sku)
}

func scanProduct(row pgx.Row) (Product, error) {
	var p Product
	err := row.Scan(&p.SKU, &p.Name, &p.PriceCents, &p.StockAvailable, &p.Version, &p.CreatedAt, &p.UpdatedAt)
	return p, err
}

func decodeCursor(cursor string) (string, error) {
	if cursor == "" {
		return "", nil
	}
	b, err := base64.RawURLEncoding.DecodeString(cursor)
	if err != nil || !ValidSKU(string(b)) {
		return "", problem.New(problem.Invalid, "cursor: not a cursor this service issued")
	}
	return string(b), nil
}
