package payments

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shop-example/shop/internal/platform/postgres"
)

// The constraints that back the pay flow's rules (migrations/000004_payments.up.sql,
// 000008_hold_request_keys.up.sql).
const (
	ConstraintOneActive  = "payments_one_active_per_order" // one processing-or-succeeded payment per order
	ConstraintChargeID   = "payments_charge_id_key"        // a charge settles one payment
	ConstraintRequestKey = "payments_order_request_key"    // one payment per (order, request key): layer 0's
)

// Constraints is the catalogue of layer 4 of the pay flow, as the race
// lab and the tests take it off. The request key's belongs to layer 0.
var Constraints = []postgres.Constraint{
	{Table: "payments", Name: ConstraintOneActive, Index: true},
	{Table: "payments", Name: ConstraintChargeID},
}

const paymentColumns = `id, order_id, status, amount_cents, payment_method, charge_id, refund_id,
	failure_reason, version, created_at, updated_at`

const (
	// Layer 4: payments_one_active_per_order refuses a second processing
	// or succeeded payment of an order; payments_order_request_key a
	// second payment of one request.
	sqlInsertPayment = `INSERT INTO payments (id, order_id, request_key, status, amount_cents, payment_method, version, created_at, updated_at)
		VALUES ($1, $2, $3, 'processing', $4, $5, 1, $6, $6)`

	// Layer 3: the version check, the settler's first write, before the
	// order's: its row lock makes every other settler of the payment wait
	// for this one's answer and then find the version moved. Zero rows
	// means another settler (the request or the reconciler) recorded an
	// outcome first.
	sqlSettlePayment = `UPDATE payments
		SET status = $3, charge_id = NULLIF($4, ''), refund_id = NULLIF($5, ''), failure_reason = NULLIF($6, ''),
			version = version + 1, updated_at = $7
		WHERE id = $1 AND version = $2`

	// A payment the gateway refused as invalid never charged anything: it
	// is removed, if no settler has recorded an outcome meanwhile (at its
	// version, layer 3).
	sqlDiscardPayment = `DELETE FROM payments WHERE id = $1 AND status = 'processing' AND version = $2`

	sqlGetPayment    = `SELECT ` + paymentColumns + ` FROM payments WHERE id = $1`
	sqlPaymentExists = `SELECT EXISTS (SELECT 1 FROM payments WHERE id = $1)`
	// The request's payment and the order's active one, in one statement
	// (at most two rows, one when they are the same): what a request that
	// finds its order not payable is answered from.
	sqlPaymentsOfRequestAndActive = `SELECT ` + paymentColumns + `, request_key = $2 FROM payments
		WHERE order_id = $1 AND (request_key = $2 OR status IN ('processing', 'succeeded'))`
	sqlPaymentsOfOrder = `SELECT ` + paymentColumns + ` FROM payments WHERE order_id = $1 ORDER BY created_at, id`
	// The payment that paid the order: its one succeeded payment
	// (payments_one_active_per_order).
	sqlCapturedOf = `SELECT ` + paymentColumns + ` FROM payments WHERE order_id = $1 AND status = 'succeeded'
		ORDER BY created_at, id LIMIT 1`
	sqlProcessingBefore = `SELECT ` + paymentColumns + ` FROM payments
		WHERE status = 'processing' AND updated_at <= $1 ORDER BY updated_at LIMIT $2`
)

// Store keeps payments in PostgreSQL. The pay flow owns its
// transactions: the writes are queued in its batches, to travel with the
// order's move and the key's claim (Service.begin, Service.settle).
type Store struct {
	db *pgxpool.Pool
}

// NewStore returns a store on db, for the reads made outside any
// transaction.
func NewStore(db *pgxpool.Pool) *Store {
	return &Store{db: db}
}

// QueueInsert queues in b the insert of the processing payment p. Once b
// is sent, InsertError translates what the constraints refused.
func (s *Store) QueueInsert(b *pgx.Batch, p Payment) {
	b.Queue(sqlInsertPayment, p.ID, p.OrderID, p.RequestKey, p.AmountCents, p.Method, p.CreatedAt)
}

// InsertError translates the refusals of a payment's insert: another
// payment of the order is processing or succeeded (ErrActivePayment), or
// the request began one before (ErrDuplicateRequest).
func InsertError(err error) error {
	switch postgres.ConstraintViolated(err) {
	case ConstraintOneActive:
		return ErrActivePayment
	case ConstraintRequestKey:
		return ErrDuplicateRequest
	}
	return err
}

// QueueSettle queues in b the write of settled, the outcome of a payment
// read at version, at that version (layer 3). Once b is sent, a write
// that matched no row fails it with ErrVersionConflict: another settler
// got there first (Service.recorded says what it recorded).
func (s *Store) QueueSettle(b *pgx.Batch, settled Payment, version int64) {
	b.Queue(sqlSettlePayment, settled.ID, version, string(settled.Status), settled.ChargeID, settled.RefundID,
		settled.FailureReason, settled.UpdatedAt).Exec(settledRow)
}

// SettleError translates the refusal of a settlement's constraint: a
// charge that already settles another payment (ErrChargeSettled).
func SettleError(err error) error {
	if postgres.ConstraintViolated(err) == ConstraintChargeID {
		return fmt.Errorf("%w: %w", ErrChargeSettled, err)
	}
	return err
}

// QueueDiscard queues in b the removal of processing payment p, read at
// its version, as QueueSettle queues an outcome.
func (s *Store) QueueDiscard(b *pgx.Batch, p Payment) {
	b.Queue(sqlDiscardPayment, p.ID, p.Version).Exec(settledRow)
}

// settledRow fails the batch when a settlement's write matched no row.
func settledRow(tag pgconn.CommandTag) error {
	if tag.RowsAffected() == 0 {
		return ErrVersionConflict
	}
	return nil
}

// Get returns one payment.
func (s *Store) Get(ctx context.Context, id string) (Payment, error) {
	p, err := scanPayment(s.db.QueryRow(ctx, sqlGetPayment, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return Payment{}, ErrNotFound
	}
	if err != nil {
		return Payment{}, fmt.Errorf("read payment %s: %w", id, err)
	}
	return p, nil
}

// OfRequestAndActive returns, in one round trip, the payment of the order
// begun with requestKey and the order's processing or succeeded payment;
// either is the zero Payment when there is none, and both are the same
// payment when the request's is the active one.
func (s *Store) OfRequestAndActive(ctx context.Context, orderID, requestKey string) (mine, active Payment, err error) {
	rows, err := s.db.Query(ctx, sqlPaymentsOfRequestAndActive, orderID, requestKey)
	if err != nil {
		return Payment{}, Payment{}, fmt.Errorf("read payments of %s: %w", orderID, err)
	}
	defer rows.Close()
	for rows.Next() {
		var ofRequest bool
		p, err := scanPayment(rows, &ofRequest)
		if err != nil {
			return Payment{}, Payment{}, fmt.Errorf("read payments of %s: %w", orderID, err)
		}
		if ofRequest {
			p.RequestKey = requestKey
			mine = p
		}
		if p.Status == StatusProcessing || p.Status == StatusSucceeded {
			active = p
		}
	}
	if err := rows.Err(); err != nil {
		return Payment{}, Payment{}, fmt.Errorf("read payments of %s: %w", orderID, err)
	}
	return mine, active, nil
}

// Captured returns the payment that paid the order, the succeeded one
// whose charge a refund gives back; ErrNotFound when none did.
func (s *Store) Captured(ctx context.Context, orderID string) (Payment, error) {
	p, err := scanPayment(s.db.QueryRow(ctx, sqlCapturedOf, orderID))
	if errors.Is(err, pgx.ErrNoRows) {
		return Payment{}, ErrNotFound
	}
	if err != nil {
		return Payment{}, fmt.Errorf("read the payment of %s: %w", orderID, err)
	}
	return p, nil
}

// QueueCaptured queues in b the read of Captured into p, for a flow that
// reads it with its other statements in one round trip; p is left as it
// is when no payment paid the order.
func (s *Store) QueueCaptured(b *pgx.Batch, orderID string, p *Payment) {
	b.Queue(sqlCapturedOf, orderID).QueryRow(func(row pgx.Row) error {
		got, err := scanPayment(row)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return nil
		case err != nil:
			return fmt.Errorf("read the payment of %s: %w", orderID, err)
		}
		*p = got
		return nil
	})
}

// OfOrder returns every payment of an order, oldest first.
func (s *Store) OfOrder(ctx context.Context, orderID string) ([]Payment, error) {
	return s.query(ctx, sqlPaymentsOfOrder, orderID)
}

// ProcessingSince returns up to limit payments that have been processing
// since before t, longest-waiting first: the reconciler's work.
func (s *Store) ProcessingSince(ctx context.Context, t time.Time, limit int) ([]Payment, error) {
	return s.query(ctx, sqlProcessingBefore, t, limit)
}

// Exists reports whether payment id is there: a settlement that matched
// no row lost to another settler if it is, to a discard if not.
func (s *Store) Exists(ctx context.Context, id string) (bool, error) {
	var exists bool
	if err := s.db.QueryRow(ctx, sqlPaymentExists, id).Scan(&exists); err != nil {
		return false, fmt.Errorf("read payment %s: %w", id, err)
	}
	return exists, nil
}

func (s *Store) query(ctx context.Context, sql string, args ...any) ([]Payment, error) {
	rows, err := s.db.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("list payments: %w", err)
	}
	ps, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Payment, error) { return scanPayment(r) })
	if err != nil {
		return nil, fmt.Errorf("list payments: %w", err)
	}
	return ps, nil
}

// scanPayment scans paymentColumns, and then into extra, if the query
// selects more.
func scanPayment(row pgx.Row, extra ...any) (Payment, error) {
	var p Payment
	var status string
	var charge, refund, reason *string
	err := row.Scan(append([]any{&p.ID, &p.OrderID, &status, &p.AmountCents, &p.Method, &charge, &refund,
		&reason, &p.Version, &p.CreatedAt, &p.UpdatedAt}, extra...)...)
	if err != nil {
		return Payment{}, err
	}
	p.Status = Status(status)
	p.ChargeID, p.RefundID, p.FailureReason = deref(charge), deref(refund), deref(reason)
	return p, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
