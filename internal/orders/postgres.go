package orders

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shop-example/shop/internal/inventory"
	"github.com/shop-example/shop/internal/platform/idempotency"
	"github.com/shop-example/shop/internal/platform/keyset"
	"github.com/shop-example/shop/internal/platform/layers"
	"github.com/shop-example/shop/internal/platform/outbox"
	"github.com/shop-example/shop/internal/platform/postgres"
)

// The constraints that back the order flows' rules, layer 4
// (migrations/000003_orders.up.sql); the stock's own is
// inventory.ConstraintStockNonNegative.
const (
	ConstraintUserRequestKey = "orders_user_request_key" // one order per (user, request key)
	ConstraintReleasedOnce   = "stock_releases_pkey"     // stock comes back once per order
)

// Constraints is the catalogue of layer 4 of the order flows, as the race
// lab and the ablation tests take it off.
var Constraints = []postgres.Constraint{
	{Table: "orders", Name: ConstraintUserRequestKey},
	{Table: "stock_releases", Name: ConstraintReleasedOnce},
	{Table: "fulfilments", Name: ConstraintFulfilledOnce},
}

const orderSelect = `SELECT o.id, o.user_id, o.request_key, o.status, o.total_cents, o.version,
		o.created_at, o.updated_at, o.expires_at,
		array_agg(i.sku ORDER BY i.sku), array_agg(i.quantity ORDER BY i.sku),
		array_agg(i.unit_price_cents ORDER BY i.sku)
	FROM orders o JOIN order_items i ON i.order_id = o.id `

const (
	sqlInsertOrder = `WITH o AS (
			INSERT INTO orders (id, user_id, request_key, status, total_cents, version, created_at, updated_at, expires_at)
			VALUES ($1, $2, $3, 'pending_payment', $4, 1, $5, $5, $6)
			RETURNING id)
		INSERT INTO order_items (order_id, sku, quantity, unit_price_cents)
		SELECT o.id, i.sku, i.quantity, i.price
		FROM o, unnest($7::text[], $8::integer[], $9::bigint[]) AS i (sku, quantity, price)`

	sqlGetOrder          = orderSelect + `WHERE o.id = $1 GROUP BY o.id`
	sqlGetByRequestKey   = orderSelect + `WHERE o.user_id = $1 AND o.request_key = $2 GROUP BY o.id`
	sqlListOrdersForUser = orderSelect + `WHERE o.user_id = $1 AND (o.created_at, o.id) < ($2, $3)
		GROUP BY o.id ORDER BY o.created_at DESC, o.id DESC LIMIT $4`

	// Layer 3: the version check. Zero rows means someone else moved the
	// order since we read it.
	sqlUpdateStatus = `UPDATE orders SET status = $3, version = version + 1, updated_at = $4
		WHERE id = $1 AND version = $2`

	// The same without the version check, as a naive implementation would
	// write it. Only the layer tests use it.
	sqlUpdateStatusUnversioned = `UPDATE orders SET status = $2, version = version + 1, updated_at = $3
		WHERE id = $1`

	// Layer 4: a second release of the same order violates the primary key.
	sqlInsertRelease = `INSERT INTO stock_releases (order_id, reason, released_at) VALUES ($1, $2, $3)`

	// Expiry claims due orders with SKIP LOCKED: jobs in several replicas
	// each take different rows instead of queueing behind each other, and a
	// row a user is cancelling right now is simply left for the next run.
	// Layer 2 is the status the job may expire: pending_payment only, never
	// paying, whose payment began in time and settles it either way.
	// Without it ($3 false, layer tests only) every unpaid order past its
	// time expires, the in-flight one too.
	sqlExpireDue = `WITH due AS (
			SELECT id FROM orders
			WHERE (status = 'pending_payment' OR (NOT $3 AND status = 'paying')) AND expires_at <= $1
			ORDER BY expires_at
			LIMIT $2
			FOR UPDATE SKIP LOCKED)
		UPDATE orders o SET status = 'expired', version = o.version + 1, updated_at = $1
		FROM due WHERE o.id = due.id
		RETURNING o.id`

	sqlInsertReleases = `INSERT INTO stock_releases (order_id, reason, released_at)
		SELECT unnest($1::uuid[]), 'expired', $2`

	sqlItemsOfOrders = `SELECT sku, sum(quantity)::integer FROM order_items
		WHERE order_id = ANY($1) GROUP BY sku ORDER BY sku`
)

// Store keeps orders in PostgreSQL. Each exported method is one transaction.
type Store struct {
	db *pgxpool.Pool
}

// NewStore returns a store over db.
func NewStore(db *pgxpool.Pool) *Store { return &Store{db: db} }

// Create reserves the stock of every line and inserts the order, in one
// transaction: all lines or none. It fills in items and total from the
// prices read while taking the stock, the way take says (the service's is
// inventory.TakeConditional). With rec (layer 0) the transaction claims
// the request's idempotency key first and completes it last with the
// order's answer (idempotency.Record), so the order and the record commit
// together: three round trips and one commit in all (postgres.InTxBatched).
//
//	BEGIN + claim               a copy of the request is refused here,
//	                            before it takes any product's row lock
//	take stock                  every line (inventory.TakeStock); the
//	                            insert needs the prices it returns
//	insert + complete + COMMIT  so the rows taken are held for one round
//	                            trip and the commit
func (s *Store) Create(ctx context.Context, o Order, lines []inventory.Line, take inventory.Take, rec *idempotency.Record) (Order, error) {
	err := postgres.InTxBatched(ctx, s.db, rec.QueueClaim, func(tx pgx.Tx) (*pgx.Batch, error) {
		prices, err := inventory.TakeStock(ctx, tx, lines, take)
		if err != nil {
			return nil, err
		}
		o.Items, o.TotalCents = priceItems(lines, prices)
		last := &pgx.Batch{}
		queueInsert(last, o)
		return last, rec.QueueComplete(last, created(o))
	})
	if err != nil {
		return Order{}, insertError(err)
	}
	return o, nil
}

// Insert writes a pending order with its items inside tx, in one
// statement, without touching stock: Create's insert, which the benchmark
// baselines run too. It returns ErrDuplicateRequest when the user already
// placed an order with o.RequestKey.
func Insert(ctx context.Context, tx pgx.Tx, o Order) error {
	n := len(o.Items)
	skus, qtys, unit := make([]string, n), make([]int32, n), make([]int64, n)
	for i, it := range o.Items {
		skus[i], qtys[i], unit[i] = it.SKU, int32(it.Quantity), it.UnitPriceCents
	}
	_, err := tx.Exec(ctx, sqlInsertOrder, o.ID, o.UserID, o.RequestKey, o.TotalCents,
		o.CreatedAt, o.ExpiresAt, skus, qtys, unit)
	switch err := insertError(err); {
	case errors.Is(err, ErrDuplicateRequest):
		return err
	case err != nil:
		return fmt.Errorf("insert order: %w", err)
	}
	return nil
}

// queueInsert queues Insert's statement.
func queueInsert(b *pgx.Batch, o Order) {
	n := len(o.Items)
	skus, qtys, unit := make([]string, n), make([]int32, n), make([]int64, n)
	for i, it := range o.Items {
		skus[i], qtys[i], unit[i] = it.SKU, int32(it.Quantity), it.UnitPriceCents
	}
	b.Queue(sqlInsertOrder, o.ID, o.UserID, o.RequestKey, o.TotalCents, o.CreatedAt, o.ExpiresAt, skus, qtys, unit)
}

// insertError translates an error of the insert: orders_user_request_key
// means the request placed its order before.
func insertError(err error) error {
	if postgres.ConstraintViolated(err) == ConstraintUserRequestKey {
		return ErrDuplicateRequest
	}
	return err
}

// Get returns an order, whoever owns it.
func (s *Store) Get(ctx context.Context, id string) (Order, error) {
	o, err := scanOrder(s.db.QueryRow(ctx, sqlGetOrder, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return Order{}, ErrNotFound
	}
	if err != nil {
		return Order{}, fmt.Errorf("get order %s: %w", id, err)
	}
	return o, nil
}

// ByRequestKey returns the order a user placed with a request key.
func (s *Store) ByRequestKey(ctx context.Context, userID, key string) (Order, error) {
	o, err := scanOrder(s.db.QueryRow(ctx, sqlGetByRequestKey, userID, key))
	if errors.Is(err, pgx.ErrNoRows) {
		return Order{}, ErrNotFound
	}
	if err != nil {
		return Order{}, fmt.Errorf("get order by request key: %w", err)
	}
	return o, nil
}

// List returns up to limit of the user's orders, newest first, after the
// cursor, and the cursor of the next page ("" on the last page).
func (s *Store) List(ctx context.Context, userID, cursor string, limit int) ([]Order, string, error) {
	beforeAt, beforeID, err := keyset.Decode(cursor)
	if err != nil {
		return nil, "", err
	}
	rows, err := s.db.Query(ctx, sqlListOrdersForUser, userID, beforeAt, beforeID, limit+1)
	if err != nil {
		return nil, "", fmt.Errorf("list orders: %w", err)
	}
	items, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Order, error) { return scanOrder(r) })
	if err != nil {
		return nil, "", fmt.Errorf("list orders: %w", err)
	}
	page, next := keyset.Page(items, limit, func(x Order) (time.Time, string) { return x.CreatedAt, x.ID })
	return page, next, nil
}

// Update reads the order, lets change apply a domain rule to it, and, when
// change says so, writes the new status back if the order is still at the
// version read, in one transaction (see UpdateTx). It returns
// ErrVersionConflict when another writer got there first; the caller
// re-reads and decides again.
func (s *Store) Update(ctx context.Context, id string, on layers.Set, change func(*Order) (write bool, err error)) (Order, error) {
	var o Order
	err := postgres.InTx(ctx, s.db, func(tx pgx.Tx) error {
		var err error
		o, err = UpdateTx(ctx, tx, id, on, change)
		return err
	})
	if err != nil {
		return Order{}, err
	}
	return o, nil
}

// UpdateTx is Update inside the caller's transaction, for flows that move
// an order together with rows of their own (a payment beginning or
// settling). Moving into cancelled or expired returns the stock in the
// same transaction, recorded once in stock_releases. The write is checked
// against the version read (layer 3) unless on has Version off.
func UpdateTx(ctx context.Context, tx pgx.Tx, id string, on layers.Set, change func(*Order) (write bool, err error)) (Order, error) {
	o, err := scanOrder(tx.QueryRow(ctx, sqlGetOrder, id))
	if err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return Order{}, ErrNotFound
		}
		return Order{}, fmt.Errorf("read order %s: %w", id, err)
	}
	write, err := change(&o)
	if err != nil || !write {
		return o, err
	}
	var tag pgconn.CommandTag
	if on.On(layers.Version) {
		tag, err = tx.Exec(ctx, sqlUpdateStatus, o.ID, o.Version, o.Status, o.UpdatedAt)
	} else {
		tag, err = tx.Exec(ctx, sqlUpdateStatusUnversioned, o.ID, o.Status, o.UpdatedAt)
	}
	if err != nil {
		return Order{}, fmt.Errorf("update order %s: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return Order{}, ErrVersionConflict
	}
	o.Version++
	if o.Status.ReleasesStock() {
		_, err = tx.Exec(ctx, sqlInsertRelease, o.ID, string(o.Status), o.UpdatedAt)
		if postgres.ConstraintViolated(err) == ConstraintReleasedOnce {
			return Order{}, ErrAlreadyReleased
		}
		if err != nil {
			return Order{}, fmt.Errorf("record release of %s: %w", id, err)
		}
		if err := inventory.ReturnStock(ctx, tx, o.Lines()); err != nil {
			return Order{}, err
		}
	}
	// The move's event, last: it commits with the move or not at all. A
	// second event of one move (outbox_one_per_event) means the order made
	// this move before: the caller reads it again and decides.
	e, announce, err := movedEvent(o)
	if err != nil || !announce {
		return o, err
	}
	err = outbox.Write(ctx, tx, e)
	if postgres.ConstraintViolated(err) == outbox.ConstraintOnePerEvent {
		return Order{}, ErrVersionConflict
	}
	if err != nil {
		return Order{}, err
	}
	return o, nil
}

// QueueWrite queues in b the write of o's new status, checked against the
// version o was read at (layer 3): for a flow that read the order before
// its transaction and applied its rule to that copy, so that the write
// travels with the transaction's other statements instead of a read and a
// write of their own. Once b's results are read, *moved says whether the
// order had moved since it was read (zero rows): the caller then reads it
// in the transaction and decides again (UpdateTx). Without the version
// check (on has Version off) a copy read earlier proves nothing, so it
// returns ErrVersionConflict at once and the caller takes that path.
// Moves that return stock (cancelled, expired) go through UpdateTx only.
func QueueWrite(b *pgx.Batch, o Order, on layers.Set, moved *bool) error {
	if !on.On(layers.Version) {
		return ErrVersionConflict
	}
	if o.Status.ReleasesStock() {
		return fmt.Errorf("queue the write of order %s: %s returns stock", o.ID, o.Status)
	}
	b.Queue(sqlUpdateStatus, o.ID, o.Version, o.Status, o.UpdatedAt).Exec(func(tag pgconn.CommandTag) error {
		*moved = tag.RowsAffected() == 0
		return nil
	})
	return nil
}

// QueueAnnounce queues in b the event of o's move into its status, if
// that move is announced (paid is; see movedEvent): for a caller whose
// QueueWrite of o was seen to take effect (moved false). It goes into a
// later batch than the write's, never the same one: a write that matched
// no row must not announce a move it did not make.
func QueueAnnounce(ctx context.Context, b *pgx.Batch, o Order) error {
	e, ok, err := movedEvent(o)
	if err != nil || !ok {
		return err
	}
	return outbox.Queue(ctx, b, e)
}

// movedEvent is the event of an order's move into its status, if that
// move is announced (outbox): paid, cancelled and expired are.
func movedEvent(o Order) (outbox.Event, bool, error) {
	var name string
	switch o.Status {
	case StatusPaid:
		name = outbox.OrderPaid
	case StatusCancelled:
		name = outbox.OrderCancelled
	case StatusExpired:
		name = outbox.OrderExpired
	default:
		return outbox.Event{}, false, nil
	}
	e, err := outbox.New(name, o.ID, o.UpdatedAt, eventOf(o))
	return e, err == nil, err
}

// EventBody is the body of an order's events.
type EventBody struct {
	OrderID    string `json:"order_id"`
	UserID     string `json:"user_id,omitempty"`
	Status     Status `json:"status"`
	TotalCents int64  `json:"total_cents"`
	Items      []struct {
		SKU      string `json:"sku"`
		Quantity int    `json:"quantity"`
	} `json:"items,omitempty"`
}

func eventOf(o Order) EventBody {
	b := EventBody{OrderID: o.ID, UserID: o.UserID, Status: o.Status, TotalCents: o.TotalCents}
	for _, it := range o.Items {
		b.Items = append(b.Items, struct {
			SKU      string `json:"sku"`
			Quantity int    `json:"quantity"`
		}{it.SKU, it.Quantity})
	}
	return b
}

// ExpireDue expires up to limit pending orders whose time is up and returns
// their stock, in one transaction. It returns how many it expired. The
// state rule (pending only, never paying) holds unless on has State off.
func (s *Store) ExpireDue(ctx context.Context, on layers.Set, now time.Time, limit int) (int, error) {
	var n int
	err := postgres.InTx(ctx, s.db, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, sqlExpireDue, now, limit, on.On(layers.State))
		if err != nil {
			return fmt.Errorf("expire due orders: %w", err)
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil || len(ids) == 0 {
			return err
		}
		n = len(ids)
		events := make([]outbox.Event, len(ids))
		for i, id := range ids {
			if events[i], err = outbox.New(outbox.OrderExpired, id, now, EventBody{OrderID: id, Status: StatusExpired}); err != nil {
				return err
			}
		}
		if err := outbox.Write(ctx, tx, events...); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, sqlInsertReleases, ids, now); err != nil {
			if postgres.ConstraintViolated(err) == ConstraintReleasedOnce {
				return ErrAlreadyReleased
			}
			return fmt.Errorf("record releases: %w", err)
		}
		rows, err = tx.Query(ctx, sqlItemsOfOrders, ids)
		if err != nil {
			return fmt.Errorf("read expired items: %w", err)
		}
		var lines []inventory.Line
		var l inventory.Line
		if _, err := pgx.ForEachRow(rows, []any{&l.SKU, &l.Quantity}, func() error {
			lines = append(lines, l)
			return nil
		}); err != nil {
			return fmt.Errorf("read expired items: %w", err)
		}
		return inventory.ReturnStock(ctx, tx, lines)
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}

// priceItems turns requested lines into order items at the prices read
// from the product rows, in SKU order, and totals them.
func priceItems(lines []inventory.Line, prices map[string]int64) ([]Item, int64) {
	items := make([]Item, len(lines))
	var total int64
	for i, l := range lines {
		items[i] = Item{SKU: l.SKU, Quantity: l.Quantity, UnitPriceCents: prices[l.SKU]}
		total += int64(l.Quantity) * prices[l.SKU]
	}
	slices.SortFunc(items, func(a, b Item) int { return strings.Compare(a.SKU, b.SKU) })
	return items, total
}

func scanOrder(row pgx.Row) (Order, error) {
	var o Order
	var status string
	var skus []string
	var qtys []int32
	var prices []int64
	err := row.Scan(&o.ID, &o.UserID, &o.RequestKey, &status, &o.TotalCents, &o.Version,
		&o.CreatedAt, &o.UpdatedAt, &o.ExpiresAt, &skus, &qtys, &prices)
	if err != nil {
		return Order{}, err
	}
	o.Status = Status(status)
	o.Items = make([]Item, len(skus))
	for i := range skus {
		o.Items[i] = Item{SKU: skus[i], Quantity: int(qtys[i]), UnitPriceCents: prices[i]}
	}
	return o, nil
}
