package refunds

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shop-example/shop/internal/inventory"
	"github.com/shop-example/shop/internal/platform/outbox"
	"github.com/shop-example/shop/internal/platform/postgres"
)

// The constraints that back the refund flow's rules, layer 4, on the
// refunds' own rows (migrations/000015_refunds.up.sql); those on the
// order's rows are orders.ConstraintRefundedWithinTotal and
// orders.ConstraintReturnedWithinQuantity.
const (
	ConstraintRequestKey        = "refunds_order_request_key"       // one refund per (order, request key)
	ConstraintProcessorRefundID = "refunds_processor_refund_id_key" // a processor refund settles one refund
)

// Constraints is the catalogue of layer 4 of the refund flow on its own
// rows, as the race lab and the ablation tests take it off.
var Constraints = []postgres.Constraint{
	{Table: "refunds", Name: ConstraintRequestKey},
	{Table: "refunds", Name: ConstraintProcessorRefundID},
}

const refundColumns = `r.id, r.order_id, r.request_key, r.requested_by, r.amount_cents, r.status,
	coalesce(r.reason, ''), coalesce(r.processor_refund_id, ''), coalesce(r.failure_reason, ''),
	r.version, r.created_at, r.updated_at,
	coalesce(array_agg(i.sku ORDER BY i.sku) FILTER (WHERE i.sku IS NOT NULL), '{}'),
	coalesce(array_agg(i.quantity ORDER BY i.sku) FILTER (WHERE i.sku IS NOT NULL), '{}')`

const refundSelect = `SELECT ` + refundColumns + ` FROM refunds r LEFT JOIN refund_items i ON i.refund_id = r.id `

const (
	// Layer 1: the order's refunds begin one at a time, across replicas.
	// The lock is the transaction's: COMMIT or ROLLBACK releases it, and
	// no refund holds it across the processor's call.
	sqlLockOrder = `SELECT pg_advisory_xact_lock(hashtextextended('refund:' || $1::text, 0))`

	// Layer 4: refunds_order_request_key refuses a second refund of one
	// request.
	sqlInsertRefund = `WITH r AS (
			INSERT INTO refunds (id, order_id, request_key, requested_by, amount_cents, status, reason, version, created_at, updated_at)
			VALUES ($1, $2, $3, $4, $5, 'processing', NULLIF($6, ''), 1, $7, $7)
			RETURNING id)
		INSERT INTO refund_items (refund_id, sku, quantity)
		SELECT r.id, i.sku, i.quantity FROM r, unnest($8::text[], $9::integer[]) AS i (sku, quantity)`

	// Layer 3: the version check, the settle's first write, before the
	// order's: its row lock makes every other settler of the refund wait
	// for this one's answer and then find the version moved. Zero rows
	// means another settler (the request or the reconciler) recorded an
	// outcome first. Layer 4: refunds_processor_refund_id_key.
	sqlSettleRefund = `UPDATE refunds
		SET status = $3, processor_refund_id = NULLIF($4, ''), failure_reason = NULLIF($5, ''),
			version = version + 1, updated_at = $6
		WHERE id = $1 AND version = $2`

	sqlGetRefund        = refundSelect + `WHERE r.id = $1 GROUP BY r.id`
	sqlRefundOfRequest  = refundSelect + `WHERE r.order_id = $1 AND r.request_key = $2 GROUP BY r.id`
	sqlRefundsOfOrder   = refundSelect + `WHERE r.order_id = $1 GROUP BY r.id ORDER BY r.created_at, r.id`
	sqlProcessingBefore = refundSelect + `WHERE r.status = 'processing' AND r.updated_at <= $1
		GROUP BY r.id ORDER BY r.updated_at LIMIT $2`
	// What the order's refunds that succeeded come to: whether the next
	// one to succeed makes the order refunded.
	sqlSucceededOf = `SELECT coalesce(sum(amount_cents), 0)::bigint FROM refunds WHERE order_id = $1 AND status = 'succeeded'`
)

// Store keeps refunds in PostgreSQL. The refund flow owns its
// transactions: the writes are queued in its batches, to travel with the
// order's move and the key's claim (Service.begin, Service.settle).
type Store struct {
	db *pgxpool.Pool
}

// NewStore returns a store on db, for the reads made outside any
// transaction.
func NewStore(db *pgxpool.Pool) *Store { return &Store{db: db} }

// QueueLockOrder queues in b the advisory lock on refund:{order} (layer
// 1), held to the end of the transaction: the order's refunds begin one at
// a time. It is the refunds' own lock, not the order's order:{id} that a
// fulfilment takes; the version check orders a refund and a fulfilment.
func (s *Store) QueueLockOrder(b *pgx.Batch, orderID string) {
	b.Queue(sqlLockOrder, orderID)
}

// QueueInsert queues in b the insert of the processing refund r and its
// items. Once b is sent, InsertError translates what the constraints
// refused.
func (s *Store) QueueInsert(b *pgx.Batch, r Refund) {
	skus, qtys := lines(r.Items)
	b.Queue(sqlInsertRefund, r.ID, r.OrderID, r.RequestKey, r.RequestedBy, r.AmountCents, r.Reason, r.CreatedAt, skus, qtys)
}

// InsertError translates the refusal of a refund's insert: the request
// began one before (ErrDuplicateRequest).
func InsertError(err error) error {
	if postgres.ConstraintViolated(err) == ConstraintRequestKey {
		return fmt.Errorf("%w: %w", ErrDuplicateRequest, err)
	}
	return err
}

// QueueSettle queues in b the write of settled, the outcome of a refund
// read at version, at that version (layer 3). Once b is sent, a write
// that matched no row fails it with ErrVersionConflict: another settler
// got there first.
func (s *Store) QueueSettle(b *pgx.Batch, settled Refund, version int64) {
	b.Queue(sqlSettleRefund, settled.ID, version, string(settled.Status), settled.ProcessorRefundID,
		settled.FailureReason, settled.UpdatedAt).Exec(func(tag pgconn.CommandTag) error {
		if tag.RowsAffected() == 0 {
			return ErrVersionConflict
		}
		return nil
	})
}

// SettleError translates the refusals of a settle's constraints: a
// processor refund that settles another refund
// (ErrProcessorRefundSettled), and a second order.refunded of one refund
// (outbox_one_per_event), which means another settler recorded it: a
// version conflict of the refund's.
func SettleError(err error) error {
	switch postgres.ConstraintViolated(err) {
	case ConstraintProcessorRefundID:
		return fmt.Errorf("%w: %w", ErrProcessorRefundSettled, err)
	case outbox.ConstraintOnePerEvent:
		return fmt.Errorf("%w: %w", ErrVersionConflict, err)
	}
	return err
}

// QueueOfRequest queues in b the read of the order's refund begun with
// requestKey into r; r is left as it is when there is none.
func (s *Store) QueueOfRequest(b *pgx.Batch, orderID, requestKey string, r *Refund) {
	b.Queue(sqlRefundOfRequest, orderID, requestKey).QueryRow(func(row pgx.Row) error {
		got, err := scanRefund(row)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return nil
		case err != nil:
			return fmt.Errorf("read the refund of request %q: %w", requestKey, err)
		}
		*r = got
		return nil
	})
}

// QueueSucceeded queues in b the read of what the order's refunds that
// succeeded come to, into cents.
func (s *Store) QueueSucceeded(b *pgx.Batch, orderID string, cents *int64) {
	b.Queue(sqlSucceededOf, orderID).QueryRow(func(row pgx.Row) error {
		if err := row.Scan(cents); err != nil {
			return fmt.Errorf("read the refunds of %s: %w", orderID, err)
		}
		return nil
	})
}

// Get returns one refund.
func (s *Store) Get(ctx context.Context, id string) (Refund, error) {
	r, err := scanRefund(s.db.QueryRow(ctx, sqlGetRefund, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return Refund{}, ErrNotFound
	}
	if err != nil {
		return Refund{}, fmt.Errorf("read refund %s: %w", id, err)
	}
	return r, nil
}

// OfOrder returns every refund of an order, oldest first.
func (s *Store) OfOrder(ctx context.Context, orderID string) ([]Refund, error) {
	return s.query(ctx, sqlRefundsOfOrder, orderID)
}

// ProcessingSince returns up to limit refunds that have been processing
// since before t, longest-waiting first: the reconciler's work.
func (s *Store) ProcessingSince(ctx context.Context, t time.Time, limit int) ([]Refund, error) {
	return s.query(ctx, sqlProcessingBefore, t, limit)
}

func (s *Store) query(ctx context.Context, sql string, args ...any) ([]Refund, error) {
	rows, err := s.db.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("list refunds: %w", err)
	}
	rs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Refund, error) { return scanRefund(r) })
	if err != nil {
		return nil, fmt.Errorf("list refunds: %w", err)
	}
	return rs, nil
}

func scanRefund(row pgx.Row) (Refund, error) {
	var r Refund
	var status string
	var skus []string
	var qtys []int32
	err := row.Scan(&r.ID, &r.OrderID, &r.RequestKey, &r.RequestedBy, &r.AmountCents, &status,
		&r.Reason, &r.ProcessorRefundID, &r.FailureReason, &r.Version, &r.CreatedAt, &r.UpdatedAt, &skus, &qtys)
	if err != nil {
		return Refund{}, err
	}
	r.Status = Status(status)
	for i := range skus {
		r.Items = append(r.Items, inventory.Line{SKU: skus[i], Quantity: int(qtys[i])})
	}
	return r, nil
}

// lines is items as the two arrays the statements take.
func lines(items []inventory.Line) ([]string, []int32) {
	skus, qtys := make([]string, len(items)), make([]int32, len(items))
	for i, l := range items {
		skus[i], qtys[i] = l.SKU, int32(l.Quantity)
	}
	return skus, qtys
}
