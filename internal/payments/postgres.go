package payments

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shop-example/shop/internal/orders"
	"github.com/shop-example/shop/internal/platform/idempotency"
	"github.com/shop-example/shop/internal/platform/layers"
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
	sqlInsertPayment = `INSERT INTO payments (id, order_id, request_key, status, amount_cents, payment_method, version, created_at, updated_at)
		VALUES ($1, $2, $3, 'processing', $4, $5, 1, $6, $6)`

	// Layer 3: the version check, the settler's first statement, before it
	// looks at the order: the write takes the payment's row lock, so every
	// other settler of it waits for this one's answer and then finds the
	// version moved. Zero rows means another settler (the request or the
	// reconciler) recorded an outcome first.
	sqlSettlePayment = `UPDATE payments
		SET status = $3, charge_id = NULLIF($4, ''), refund_id = NULLIF($5, ''), failure_reason = NULLIF($6, ''),
			version = version + 1, updated_at = $7
		WHERE id = $1 AND version = $2`

	// The same without the version check. Only the layer tests use it.
	sqlSettlePaymentUnversioned = `UPDATE payments
		SET status = $3, charge_id = NULLIF($4, ''), refund_id = NULLIF($5, ''), failure_reason = NULLIF($6, ''),
			version = version + 1, updated_at = $7
		WHERE id = $1 AND $2::bigint IS NOT NULL`

	// A payment the gateway refused as invalid never charged anything:
	// it is removed, if no settler has recorded an outcome meanwhile (at
	// its version, layer 3), before the order is looked at.
	sqlDiscardPayment = `DELETE FROM payments WHERE id = $1 AND status = 'processing' AND version = $2`

	// The same without the version check. Only the layer tests use it.
	sqlDiscardPaymentUnversioned = `DELETE FROM payments WHERE id = $1 AND status = 'processing' AND $2::bigint IS NOT NULL`

	sqlGetPayment    = `SELECT ` + paymentColumns + ` FROM payments WHERE id = $1`
	sqlPaymentExists = `SELECT EXISTS (SELECT 1 FROM payments WHERE id = $1)`
	// The request's payment and the order's active one, in one statement
	// (at most two rows, one when they are the same): what a request that
	// finds its order not payable is answered from.
	sqlPaymentsOfRequestAndActive = `SELECT ` + paymentColumns + `, request_key = $2 FROM payments
		WHERE order_id = $1 AND (request_key = $2 OR status IN ('processing', 'succeeded'))`
	sqlPaymentOfRequest = `SELECT ` + paymentColumns + ` FROM payments WHERE order_id = $1 AND request_key = $2`
	sqlActivePayment    = `SELECT ` + paymentColumns + ` FROM payments WHERE order_id = $1 AND status IN ('processing', 'succeeded')`
	sqlPaymentsOfOrder  = `SELECT ` + paymentColumns + ` FROM payments WHERE order_id = $1 ORDER BY created_at, id`
	sqlProcessingBefore = `SELECT ` + paymentColumns + ` FROM payments
		WHERE status = 'processing' AND updated_at <= $1 ORDER BY updated_at LIMIT $2`
)

// Store keeps payments in PostgreSQL.
type Store struct {
	db *pgxpool.Pool
}

// NewStore returns a store on db.
func NewStore(db *pgxpool.Pool) *Store {
	return &Store{db: db}
}

// Begin opens the processing payment p of its order and moves the order
// to paying, in one transaction that also claims the request's
// idempotency key (rec, layer 0; nil without the layer). read is the order
// as the caller read it before the transaction (the read that let the
// request go for the lock), and move applies the order's rules to it
// (orders.Order.BeginPayment moves it to paying); the order is written at
// the version read (layer 3, orders.QueueWrite), so anything that moved
// it since (a cancel, another payment whose lock lapsed) makes Begin
// return orders.ErrVersionConflict. The caller then tries again with a
// zero read, and Begin reads the order in the transaction
// (orders.UpdateTx), as it always does with layer 3 off. p's amount is
// the order's total as read: an order's total is fixed when it is placed.
// Two round trips and one commit with the order read
// (postgres.InTxBatched), four without:
//
//	BEGIN + claim + write the order     the claim and the order's row lock;
//	                                    a copy of the request refused by
//	                                    the claim is rolled back
//	insert p + COMMIT                   layer 4 refuses a second active
//	                                    payment
//
// It returns the order as written. It returns ErrActivePayment when the
// order already has a payment processing or succeeded, and
// ErrDuplicateRequest when it has a payment begun with p's request key.
//
// Locks are taken order row, then payment index entries; Settle and
// Discard lock the row of a payment that exists, then the order row. The
// insert's unique checks wait only on another uncommitted insert, never on
// a settler's row lock, so no two of them each hold what the other waits
// for.
func (s *Store) Begin(ctx context.Context, p Payment, on layers.Set, rec *idempotency.Record, read orders.Order,
	move func(*orders.Order) error) (Payment, orders.Order, error) {
	// With the version check, the order as read is written at its version
	// in the first round trip; without it, it is read in the transaction.
	asRead := read.ID != "" && on.On(layers.Version)
	written, moved := read, false
	if asRead {
		if err := move(&written); err != nil {
			return Payment{}, orders.Order{}, err
		}
	}
	var queued error
	err := postgres.InTxBatched(ctx, s.db, func(b *pgx.Batch) {
		rec.QueueClaim(b)
		if asRead {
			queued = orders.QueueWrite(b, written, on, &moved)
		}
	}, func(tx pgx.Tx) (*pgx.Batch, error) {
		switch {
		case queued != nil:
			return nil, queued
		case asRead && moved:
			return nil, orders.ErrVersionConflict
		case asRead:
			written.Version++
		default:
			var err error
			written, err = orders.UpdateTx(ctx, tx, p.OrderID, on, func(o *orders.Order) (bool, error) {
				return true, move(o)
			})
			if err != nil {
				return nil, err
			}
		}
		last := &pgx.Batch{}
		last.Queue(sqlInsertPayment, p.ID, p.OrderID, p.RequestKey, p.AmountCents, p.Method, p.CreatedAt)
		return last, nil
	})
	switch postgres.ConstraintViolated(err) {
	case ConstraintOneActive:
		return Payment{}, orders.Order{}, ErrActivePayment
	case ConstraintRequestKey:
		return Payment{}, orders.Order{}, ErrDuplicateRequest
	}
	if err != nil {
		return Payment{}, orders.Order{}, err
	}
	return p, written, nil
}

// Resume reads payment id again in a transaction whose first statements
// claim the request's idempotency key (rec): a request that carries its
// own payment on (a retry whose first try began it) does so as the key's
// owner, or is refused (*idempotency.Refusal) while another request of
// the key runs, or gets the key's stored answer. When answer gives one
// for the payment as read (it has succeeded meanwhile), the record is
// completed with it in the same transaction. Two round trips.
func (s *Store) Resume(ctx context.Context, id string, rec *idempotency.Record, answer func(Payment) (idempotency.Answer, bool)) (Payment, error) {
	var p Payment
	err := postgres.InTxBatched(ctx, s.db, func(b *pgx.Batch) {
		rec.QueueClaim(b)
		b.Queue(sqlGetPayment, id).QueryRow(func(row pgx.Row) error {
			var err error
			p, err = scanPayment(row)
			return err
		})
	}, func(pgx.Tx) (*pgx.Batch, error) {
		a, ok := answer(p)
		if !ok {
			return nil, nil
		}
		last := &pgx.Batch{}
		return last, rec.QueueComplete(last, a)
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return Payment{}, ErrNotFound
	}
	if err != nil {
		return Payment{}, err
	}
	return p, nil
}

// Settle records p's outcome if the payment is still at p.Version, and,
// when moveOrder is not nil, applies it to the order in the same
// transaction (version-checked). Either both are written or neither. It
// returns the payment as written.
//
// With rec (layer 0) the transaction claims the request's key again
// first: it is still this request's own claim, or it was taken over after
// its lease ran out, and the stale settlement is refused before it writes
// anything. When answer is not nil, the transaction completes the record
// with the answer of the payment as written, with its COMMIT.
//
// The payment's own row decides next. Its version-checked write travels
// with BEGIN, and Settle returns ErrVersionConflict, before moveOrder's
// write counts, if another settler (the request, a reconciler on another
// replica, one whose lock lapsed) has recorded an outcome since p was
// read; the write's row lock makes every other settler of the payment
// wait for this one's answer. Only a settler whose payment was still
// processing moves the order, so when moveOrder finds the order no longer
// being paid, it was cancelled for a reason other than this payment: the
// payment and its order move together, in one transaction.
//
// order is the order as this payment's begin left it (Begin's answer), or
// the zero Order when the caller does not know it (a request carrying its
// payment on, the reconciler). Known, moveOrder is applied to it and its
// write, at its version, travels with the payment's (orders.QueueWrite):
// two round trips and one commit,
//
//	BEGIN + claim + settle p +     the payment's row first, then the
//	write the order                order's, each at its version
//	complete + COMMIT              the answer that a retry replays
//
// and when the order moved since (or moveOrder returns stock, or layer 3
// is off), it is read in the transaction and moveOrder decides on it as
// it is (orders.UpdateTx), two round trips more.
func (s *Store) Settle(ctx context.Context, p Payment, on layers.Set, rec *idempotency.Record, order orders.Order,
	moveOrder func(*orders.Order) (bool, error), answer func(Payment) idempotency.Answer) (Payment, error) {
	written := p
	written.Version++
	// The order as begun, moved: written with the payment's row, or, if
	// that cannot be, read in the transaction.
	asKnown, moved := false, false
	if moveOrder != nil && order.ID != "" && on.On(layers.Version) {
		next := order
		write, err := moveOrder(&next)
		if asKnown = err == nil && write && !next.Status.ReleasesStock(); asKnown {
			order = next
		}
	}
	err := postgres.InTxBatched(ctx, s.db, func(b *pgx.Batch) {
		rec.QueueClaim(b)
		query := layers.Pick(on, layers.Version, sqlSettlePayment, sqlSettlePaymentUnversioned)
		b.Queue(query, p.ID, p.Version, string(p.Status), p.ChargeID, p.RefundID, p.FailureReason, p.UpdatedAt).
			Exec(func(tag pgconn.CommandTag) error {
				if tag.RowsAffected() == 0 {
					return errNotSettled
				}
				return nil
			})
		if asKnown {
			_ = orders.QueueWrite(b, order, on, &moved) // asKnown: versioned, and no stock returned
		}
	}, func(tx pgx.Tx) (*pgx.Batch, error) {
		last := &pgx.Batch{}
		if moveOrder != nil && (!asKnown || moved) {
			if _, err := orders.UpdateTx(ctx, tx, p.OrderID, on, moveOrder); err != nil {
				return nil, err
			}
		} else if asKnown {
			// The order's write took effect: its event (order.paid)
			// commits with it.
			if err := orders.QueueAnnounce(ctx, last, order); err != nil {
				return nil, err
			}
		}
		if answer != nil {
			if err := rec.QueueComplete(last, answer(written)); err != nil {
				return nil, err
			}
		}
		if last.Len() == 0 {
			return nil, nil
		}
		return last, nil
	})
	switch {
	case errors.Is(err, errNotSettled):
		return Payment{}, s.notSettled(ctx, p.ID)
	case postgres.ConstraintViolated(err) == ConstraintChargeID:
		return Payment{}, fmt.Errorf("settle payment %s: charge %s already settles another payment: %w", p.ID, p.ChargeID, ErrChargeSettled)
	case err != nil:
		return Payment{}, err
	}
	return written, nil
}

// errNotSettled: the settlement's write matched no row.
var errNotSettled = errors.New("payment not settled")

// notSettled says why a settlement of payment id matched no row: another
// settler changed it (ErrVersionConflict), or it is gone (ErrNotFound,
// discarded).
func (s *Store) notSettled(ctx context.Context, id string) error {
	var exists bool
	if err := s.db.QueryRow(ctx, sqlPaymentExists, id).Scan(&exists); err != nil {
		return fmt.Errorf("settle payment %s: %w", id, err)
	}
	if !exists {
		return ErrNotFound
	}
	return ErrVersionConflict
}

// Discard removes a processing payment at p.Version, one whose request
// the gateway refused as invalid, so that nothing of it remains, and
// applies moveOrder to its order (back to pending) in the same
// transaction. Like Settle, it claims the request's key (rec) again
// first, and the payment's own row decides before the order: it returns
// ErrVersionConflict when another settler got there first.
func (s *Store) Discard(ctx context.Context, p Payment, on layers.Set, rec *idempotency.Record, moveOrder func(*orders.Order) (bool, error)) error {
	err := postgres.InTxBatched(ctx, s.db, func(b *pgx.Batch) {
		rec.QueueClaim(b)
		query := layers.Pick(on, layers.Version, sqlDiscardPayment, sqlDiscardPaymentUnversioned)
		b.Queue(query, p.ID, p.Version).Exec(func(tag pgconn.CommandTag) error {
			if tag.RowsAffected() == 0 {
				return errNotSettled
			}
			return nil
		})
	}, func(tx pgx.Tx) (*pgx.Batch, error) {
		_, err := orders.UpdateTx(ctx, tx, p.OrderID, on, moveOrder)
		return nil, err
	})
	if errors.Is(err, errNotSettled) {
		return s.notSettled(ctx, p.ID)
	}
	return err
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

// OfRequest returns the payment of the order begun with a request key.
func (s *Store) OfRequest(ctx context.Context, orderID, requestKey string) (Payment, error) {
	p, err := scanPayment(s.db.QueryRow(ctx, sqlPaymentOfRequest, orderID, requestKey))
	if errors.Is(err, pgx.ErrNoRows) {
		return Payment{}, ErrNotFound
	}
	if err != nil {
		return Payment{}, fmt.Errorf("read payment of request: %w", err)
	}
	p.RequestKey = requestKey
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

// Active returns the order's processing or succeeded payment.
func (s *Store) Active(ctx context.Context, orderID string) (Payment, error) {
	p, err := scanPayment(s.db.QueryRow(ctx, sqlActivePayment, orderID))
	if errors.Is(err, pgx.ErrNoRows) {
		return Payment{}, ErrNotFound
	}
	if err != nil {
		return Payment{}, fmt.Errorf("read active payment of %s: %w", orderID, err)
	}
	return p, nil
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
