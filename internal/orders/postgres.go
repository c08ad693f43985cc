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
	"github.com/shop-example/shop/internal/platform/keyset"
	"github.com/shop-example/shop/internal/platform/outbox"
	"github.com/shop-example/shop/internal/platform/postgres"
)

// The constraints that back the order flows' rules, layer 4
// (migrations/000003_orders.up.sql, 000012_outbox.up.sql,
// 000015_refunds.up.sql); the stock's own is
// inventory.ConstraintStockNonNegative.
const (
	ConstraintUserRequestKey = "orders_user_request_key" // one order per (user, request key)
	ConstraintReleasedOnce   = "stock_releases_pkey"     // stock comes back once per order
	ConstraintFulfilledOnce  = "fulfilments_pkey"        // an order ships once
	// An order's refunds hold at most its total, and a line's returns at
	// most what was bought: the refund flow's (package refunds), on the
	// order's rows.
	ConstraintRefundedWithinTotal    = "orders_refunded_within_total"
	ConstraintReturnedWithinQuantity = "order_items_returned_within_quantity"
)

// Constraints is the catalogue of layer 4 of the order flows, as the race
// lab and the ablation tests take it off.
var Constraints = []postgres.Constraint{
	{Table: "orders", Name: ConstraintUserRequestKey},
	{Table: "stock_releases", Name: ConstraintReleasedOnce},
	{Table: "fulfilments", Name: ConstraintFulfilledOnce},
	{Table: "orders", Name: ConstraintRefundedWithinTotal},
	{Table: "order_items", Name: ConstraintReturnedWithinQuantity},
}

const orderSelect = `SELECT o.id, o.user_id, o.request_key, o.status, o.total_cents, o.refunded_cents, o.version,
		o.created_at, o.updated_at, o.expires_at,
		array_agg(i.sku ORDER BY i.sku), array_agg(i.quantity ORDER BY i.sku),
		array_agg(i.unit_price_cents ORDER BY i.sku), array_agg(i.returned ORDER BY i.sku)
	FROM orders o JOIN order_items i ON i.order_id = o.id `

const (
	// Layer 4: orders_user_request_key refuses a second order of one
	// (user, request key).
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

	// The orders due to expire, claimed with SKIP LOCKED: jobs in several
	// replicas each take different rows instead of queueing behind each
	// other, and a row a user is cancelling right now is left for the
	// next run. Only pending orders are looked at (Expire is the rule
	// that decides): an order being paid waits for its payment.
	sqlDueOrders = `WITH due AS (
			SELECT id FROM orders
			WHERE status = 'pending_payment' AND expires_at <= $1
			ORDER BY expires_at
			LIMIT $2
			FOR UPDATE SKIP LOCKED)
		` + orderSelect + `WHERE o.id IN (SELECT id FROM due) GROUP BY o.id`

	// Layer 3: the version check. Zero rows means someone else moved the
	// order since it was read. What its refunds hold moves by what the
	// move changed ($5), not to a value read before: a write that got
	// past the version check cannot lose another's refund, and
	// orders_refunded_within_total sees the sum of both (layer 4).
	sqlUpdateOrder = `UPDATE orders SET status = $3, refunded_cents = refunded_cents + $5, version = version + 1, updated_at = $4
		WHERE id = $1 AND version = $2`

	// The units a move returned (or gave back), by what it changed, under
	// order_items_returned_within_quantity (layer 4). The order's write at
	// its version goes first, in the same transaction.
	sqlReturnItems = `UPDATE order_items SET returned = order_items.returned + r.n
		FROM unnest($2::text[], $3::integer[]) AS r (sku, n)
		WHERE order_items.order_id = $1 AND order_items.sku = r.sku`

	// Layer 4: a second release of the same order violates the primary key.
	sqlInsertRelease = `INSERT INTO stock_releases (order_id, reason, released_at) VALUES ($1, $2, $3)`

	// Layer 4: a second fulfilment of the same order violates the primary key.
	sqlInsertFulfilment = `INSERT INTO fulfilments (order_id, event_id, fulfilled_at) VALUES ($1, $2, $3)`

	// Layer 1 in PostgreSQL: the order's advisory lock, to the end of the
	// transaction, named as the Redis lock on the order is.
	sqlLockOrder = `SELECT pg_advisory_xact_lock(hashtextextended('order:' || $1::text, 0))`
)

// Store keeps orders in PostgreSQL. The flows own their transactions:
// each method that writes takes the flow's transaction, so that an order,
// its stock and the rows of other packages change together.
type Store struct {
	db *pgxpool.Pool
}

// NewStore returns a store over db, for the reads made outside any
// transaction.
func NewStore(db *pgxpool.Pool) *Store { return &Store{db: db} }

// Insert writes a pending order with its items, in one statement. It
// returns ErrDuplicateRequest when the user already placed an order with
// o.RequestKey (orders_user_request_key).
func (s *Store) Insert(ctx context.Context, tx pgx.Tx, o Order) error {
	b := &pgx.Batch{}
	QueueInsert(b, o)
	return insertError(tx.SendBatch(ctx, b).Close())
}

// QueueInsert queues Insert's statement in b, to travel with the
// statements of the same round trip; Insert's errors come back from the
// batch (insertError maps them).
func QueueInsert(b *pgx.Batch, o Order) {
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
	switch {
	case postgres.ConstraintViolated(err) == ConstraintUserRequestKey:
		return ErrDuplicateRequest
	case err != nil:
		return fmt.Errorf("insert order: %w", err)
	}
	return nil
}

// Get returns an order, whoever owns it.
func (s *Store) Get(ctx context.Context, id string) (Order, error) {
	return getOrder(ctx, s.db, id)
}

// Look reads order id and asks change of a copy of it, writing nothing:
// the early answer of a flow that asks the rule of a snapshot before it
// takes a lock (a payment's click on an order already being paid). It
// returns the order as read and what the rule said; the rule is asked
// again, of the order the flow writes, in its transaction.
func (s *Store) Look(ctx context.Context, id string, change Change) (Order, error) {
	o, err := getOrder(ctx, s.db, id)
	if err != nil {
		return Order{}, err
	}
	try := o.copy()
	_, err = change(&try)
	return o, err
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

// Update reads order id in tx, applies change to it (layer 2), and, when
// the order moved, writes it at the version read (layer 3) with what the
// move brings, in one round trip:
//
//   - into cancelled or expired, the order's stock is returned, recorded
//     once under stock_releases_pkey (layer 4);
//   - into paid, cancelled or expired, the move is announced in the
//     outbox (order.paid, order.cancelled, order.expired), to commit with
//     it or not at all.
//
// It returns the order as written, or as read when it did not move, and
// whether it moved. An
// order that moved since it was read gives ErrVersionConflict, and a
// second release ErrAlreadyReleased; either way tx must roll back, and
// the flow reads again and decides on the order as it is then.
func (s *Store) Update(ctx context.Context, tx pgx.Tx, id string, change Change) (Order, bool, error) {
	read, err := getOrder(ctx, tx, id)
	if err != nil {
		return Order{}, false, err
	}
	o := read.copy()
	moved, err := change(&o)
	if err != nil || !moved {
		return read, false, err
	}
	if err := s.write(ctx, tx, move{from: read, to: o}); err != nil {
		return Order{}, false, err
	}
	o.Version++
	return o, true, nil
}

// QueueGet queues in b the read of order id into o, for a flow that reads
// the order in a round trip of its transaction (behind a lock taken in
// the same round trip). Once b is sent, an order that is not there fails
// it with ErrNotFound.
func (s *Store) QueueGet(b *pgx.Batch, id string, o *Order) {
	b.Queue(sqlGetOrder, id).QueryRow(func(row pgx.Row) error {
		read, err := scanOrder(row)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return ErrNotFound
		case err != nil:
			return fmt.Errorf("read order %s: %w", id, err)
		}
		*o = read
		return nil
	})
}

// ExpireDue claims up to limit pending orders whose time is up (SKIP
// LOCKED), applies change to each (the flow's Expire), and writes those
// that moved, each at the version read, returning their stock, in two
// round trips. It returns how many moved.
func (s *Store) ExpireDue(ctx context.Context, tx pgx.Tx, now time.Time, limit int, change Change) (int, error) {
	rows, err := tx.Query(ctx, sqlDueOrders, now, limit)
	if err != nil {
		return 0, fmt.Errorf("read due orders: %w", err)
	}
	due, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Order, error) { return scanOrder(r) })
	if err != nil {
		return 0, fmt.Errorf("read due orders: %w", err)
	}
	var expired []move
	for _, read := range due {
		o := read.copy()
		if moved, err := change(&o); err == nil && moved {
			expired = append(expired, move{from: read, to: o})
		}
	}
	return len(expired), s.write(ctx, tx, expired...)
}

// QueueLock queues in b the order's advisory lock, held to the end of
// the transaction (layer 1, for a flow whose lock is in PostgreSQL: the
// fulfilment).
func (s *Store) QueueLock(b *pgx.Batch, id string) {
	b.Queue(sqlLockOrder, id)
}

// QueueFulfilled queues in b the order's one fulfilment, made by the
// event eventID (fulfilments_pkey, layer 4): once b is sent, a second
// fulfilment of the order fails it, ConstraintFulfilledOnce.
func (s *Store) QueueFulfilled(b *pgx.Batch, orderID, eventID string, now time.Time) {
	b.Queue(sqlInsertFulfilment, orderID, eventID, now)
}

// QueueMove applies change to known, the order as the flow read it before
// its transaction, and queues in b the order's write at that version
// (layer 3) with what the move brings, as Update does: for a flow that
// sends the write with its other statements in one round trip. Nothing
// is queued when change refuses or finds nothing to do. Once b is sent,
// a write that matched no row fails it with ErrVersionConflict, and
// WriteError translates the rest of what PostgreSQL answered; either way
// the transaction rolls back, and the flow reads the order again.
func (s *Store) QueueMove(ctx context.Context, b *pgx.Batch, known Order, change Change) (Order, bool, error) {
	o := known.copy()
	moved, err := change(&o)
	if err != nil || !moved {
		return known, false, err
	}
	returned, err := queueWrite(ctx, b, move{from: known, to: o})
	if err != nil {
		return Order{}, false, err
	}
	inventory.QueueReturn(b, returned)
	o.Version++
	return o, true, nil
}

// move is an order as read, and as a change moved it.
type move struct{ from, to Order }

// write writes each moved order at the version it was read at, and what
// its move brings, in one round trip.
func (s *Store) write(ctx context.Context, tx pgx.Tx, moved ...move) error {
	if len(moved) == 0 {
		return nil
	}
	b := &pgx.Batch{}
	var returned []inventory.Line
	for _, m := range moved {
		lines, err := queueWrite(ctx, b, m)
		if err != nil {
			return err
		}
		returned = append(returned, lines...)
	}
	// Every product row in SKU order, whichever orders it comes back from:
	// the one order every transaction locks them in.
	inventory.QueueReturn(b, returned)
	return WriteError(tx.SendBatch(ctx, b).Close())
}

// queueWrite queues in b the write of a moved order at the version it was
// read at, and what its move brings (Update): what its refunds hold, and
// the units its lines returned, moved by what the move changed; into
// cancelled or expired, its release, and it returns the lines whose stock
// the caller queues back; into paid, cancelled or expired, its event. A
// move that keeps the status (a refund held or settled) brings neither. A
// write that matched no row fails the batch, and the transaction rolls
// back.
func queueWrite(ctx context.Context, b *pgx.Batch, m move) ([]inventory.Line, error) {
	o := m.to
	b.Queue(sqlUpdateOrder, o.ID, m.from.Version, o.Status, o.UpdatedAt, o.RefundedCents-m.from.RefundedCents).Exec(func(tag pgconn.CommandTag) error {
		if tag.RowsAffected() == 0 {
			return ErrVersionConflict
		}
		return nil
	})
	if skus, n := returnedBy(m); len(skus) > 0 {
		b.Queue(sqlReturnItems, o.ID, skus, n)
	}
	if o.Status == m.from.Status {
		// A move within a status (a refund held or settled) releases
		// nothing and announces nothing of the order's.
		return nil, nil
	}
	var returned []inventory.Line
	if o.Status.ReleasesStock() {
		b.Queue(sqlInsertRelease, o.ID, string(o.Status), o.UpdatedAt)
		returned = o.Lines()
	}
	e, announce, err := movedEvent(o)
	if err != nil || !announce {
		return returned, err
	}
	return returned, outbox.Queue(ctx, b, e)
}

// returnedBy is, for each line whose returned units m changed, its SKU
// and by how many, in SKU order.
func returnedBy(m move) ([]string, []int32) {
	var skus []string
	var n []int32
	for i, it := range m.to.Items {
		if i < len(m.from.Items) && it.Returned != m.from.Items[i].Returned {
			skus, n = append(skus, it.SKU), append(n, int32(it.Returned-m.from.Items[i].Returned))
		}
	}
	return skus, n
}

// WriteError translates what PostgreSQL answered the writes of moved
// orders: a second release of an order's stock is ErrAlreadyReleased; a
// second event of one move (outbox_one_per_event) means the order made
// this move before, a version conflict; refunds beyond the total or
// returns beyond what was bought are ErrRefundedBeyondTotal and
// ErrReturnedBeyondQuantity.
func WriteError(err error) error {
	switch {
	case err == nil, errors.Is(err, ErrVersionConflict):
		return err
	case postgres.ConstraintViolated(err) == ConstraintReleasedOnce:
		return ErrAlreadyReleased
	case postgres.ConstraintViolated(err) == outbox.ConstraintOnePerEvent:
		return ErrVersionConflict
	case postgres.ConstraintViolated(err) == ConstraintRefundedWithinTotal:
		return fmt.Errorf("%w: %w", ErrRefundedBeyondTotal, err)
	case postgres.ConstraintViolated(err) == ConstraintReturnedWithinQuantity:
		return fmt.Errorf("%w: %w", ErrReturnedBeyondQuantity, err)
	}
	return fmt.Errorf("write orders: %w", err)
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
	OrderID    string      `json:"order_id"`
	UserID     string      `json:"user_id,omitempty"`
	Status     Status      `json:"status"`
	TotalCents int64       `json:"total_cents"`
	Items      []EventItem `json:"items,omitempty"`
}

// EventItem is one line of an order's event.
type EventItem struct {
	SKU      string `json:"sku"`
	Quantity int    `json:"quantity"`
}

func eventOf(o Order) EventBody {
	b := EventBody{OrderID: o.ID, UserID: o.UserID, Status: o.Status, TotalCents: o.TotalCents}
	for _, it := range o.Items {
		b.Items = append(b.Items, EventItem{SKU: it.SKU, Quantity: it.Quantity})
	}
	return b
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

// getOrder reads one order on db (the pool, or a transaction).
func getOrder(ctx context.Context, db interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, id string) (Order, error) {
	o, err := scanOrder(db.QueryRow(ctx, sqlGetOrder, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return Order{}, ErrNotFound
	}
	if err != nil {
		return Order{}, fmt.Errorf("read order %s: %w", id, err)
	}
	return o, nil
}

func scanOrder(row pgx.Row) (Order, error) {
	var o Order
	var status string
	var skus []string
	var qtys, returned []int32
	var prices []int64
	err := row.Scan(&o.ID, &o.UserID, &o.RequestKey, &status, &o.TotalCents, &o.RefundedCents, &o.Version,
		&o.CreatedAt, &o.UpdatedAt, &o.ExpiresAt, &skus, &qtys, &prices, &returned)
	if err != nil {
		return Order{}, err
	}
	o.Status = Status(status)
	o.Items = make([]Item, len(skus))
	for i := range skus {
		o.Items[i] = Item{SKU: skus[i], Quantity: int(qtys[i]), UnitPriceCents: prices[i], Returned: int(returned[i])}
	}
	return o, nil
}

// copy is o with its own items, for a change to move.
func (o Order) copy() Order {
	o.Items = slices.Clone(o.Items)
	return o
}
