package bench

// Payment in the shoot-out: each operation pays a pending order through
// the stand-in gateway (a charge, fsynced) and records the outcome. Spread:
// every order is paid once. Hot: every order is handed to -clicks clients
// one after the other, so that about that many pay it at once (a user
// clicking again, each click with a key of its own). The audit reads the
// gateway's charges and the books (package books) for the cell's orders:
// every charge beyond the first of an order is a double charge. In
// flight, it checks what each payment answered its client against them:
// an order told paid more than once, or charged more often than told
// paid, was paid twice.

import (
	"context"
	"errors"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/shop-example/shop/harness/books"
	gw "github.com/shop-example/shop/harness/gateway"
	"github.com/shop-example/shop/internal/payments"
	"github.com/shop-example/shop/internal/platform/postgres"
)

// Statements of the payment baselines.
const (
	sqlOrderStatus          = `SELECT status FROM orders WHERE id = $1`
	sqlOrderStatusForUpdate = `SELECT status FROM orders WHERE id = $1 FOR UPDATE`
	sqlOrderVersioned       = `SELECT status, version FROM orders WHERE id = $1`
	// optimistic: the order's version is checked as it moves to paying.
	sqlClaimOrderVersioned = `UPDATE orders SET status = 'paying', version = version + 1, updated_at = $3
		WHERE id = $1 AND version = $2`
	sqlPayOrderFromPaying = `UPDATE orders SET status = 'paid', version = version + 1, updated_at = $2
		WHERE id = $1 AND status = 'paying'`
	// naive: the order is written paid whatever it was.
	sqlPayOrderBlind = `UPDATE orders SET status = 'paid', version = version + 1, updated_at = $2 WHERE id = $1`
	// unique only: the processing payment is opened first; the unique
	// index payments_one_active_per_order admits one per order.
	sqlOpenPayment = `INSERT INTO payments (id, order_id, status, amount_cents, payment_method, version, created_at, updated_at)
		VALUES ($1, $2, 'processing', $3, $4, 1, $5, $5)`
	sqlSucceedPayment = `UPDATE payments SET status = 'succeeded', charge_id = $2, version = version + 1, updated_at = $3
		WHERE id = $1 AND status = 'processing'`
)

var (
	errNotPendingRead = errors.New("order not pending (read)")
	errPayConflict    = errors.New("payment refused by a guard")
)

// payOp pays one order as client; owner is the client whose order it is.
type payOp func(ctx context.Context, client int, orderID string, owner int) string

func paymentsFlow() flowSpec {
	return flowSpec{
		name:     "payments",
		title:    "Payment",
		unit:     "payments/s",
		done:     "order paid",
		tables:   []string{"orders", "order_items", "payments", "idempotency_keys"},
		anomaly:  "double charges: charges at the gateway beyond the first of an order (or, if none, the books audit's problems)",
		inFlight: "orders told paid more than once, or charged more often than told paid",
		strategies: map[string]strategy{
			"naive": {how: "read the order's status, check in Go, charge, write paid and the payment",
				cell: payCell(func(a *arena) payOp { return a.payNaive })},
			"unique only": {how: "minimal correct: open the processing payment (unique index, one live per order), charge, settle; two commits, no lock, no key",
				cell: payCell(func(a *arena) payOp { return a.payUnique })},
			"optimistic": {how: "read the order's version, move it to paying only if unchanged (up to 5 attempts), charge, settle",
				cell: payCell(func(a *arena) payOp { return a.payOptimistic })},
			"row lock": {how: "SELECT … FOR UPDATE on the order, charge inside the transaction, write; one commit, the lock held over the gateway call",
				cell: payCell(func(a *arena) payOp { return a.payLocked(sqlOrderStatusForUpdate, false) })},
			"advisory": {how: "pg_advisory_xact_lock on the order, read, charge inside the transaction, write",
				cell: payCell(func(a *arena) payOp { return a.payLocked(sqlOrderStatus, true) })},
			"redsync only": {how: "the naive flow inside a Redlock on the order over the three nodes",
				cell: payCell(func(a *arena) payOp {
					return func(ctx context.Context, client int, id string, owner int) string {
						return underLock(ctx, a, "order:"+id, func(ctx context.Context) string { return a.payNaive(ctx, client, id, owner) })
					}
				})},
			"conditional": {how: "unsafe one commit: charge, then UPDATE … WHERE status = 'pending_payment' and the payment (the raw baseline of bench payments)",
				cell: payCell(func(a *arena) payOp {
					f := rawPayFlow{pool: a.pool, gateway: a.gateway}
					return func(ctx context.Context, _ int, id string, _ int) string { return f.payOrder(ctx, id) }
				})},
			"layered": {how: "POST /v1/orders/{id}/payments through the service: auth, idempotency, Redis lock, processing row, charge, versioned settle",
				cell: payCell(func(a *arena) payOp {
					f := layeredPayFlow{svc: a.svc}
					return func(ctx context.Context, _ int, id string, owner int) string { return f.payOrder(ctx, id, owner) }
				})},
		},
	}
}

// payCell seeds the pending orders of one cell and audits them
// afterwards. Each operation's key is the next order to pay, which it
// pays as its client; its owner is the client whose order it is.
func payCell(pay func(a *arena) payOp) func(ctx context.Context, a *arena, shape string) (cell, error) {
	return func(ctx context.Context, a *arena, shape string) (cell, error) {
		n := int(payOrdersPerSecond * (a.o.warmup + a.o.duration).Seconds())
		o, err := seedPendingOrders(ctx, a.pool, a.users, max(n, 1))
		if err != nil {
			return cell{}, err
		}
		if shape == hot {
			o.repeat = a.o.clicks
		}
		owners := make(map[string]int, len(o.ids))
		for i, id := range o.ids {
			owners[id] = o.owners[i]
		}
		pick := func(string) (string, string) {
			id, _, ok := o.take()
			if !ok {
				return "", outOfOrders()
			}
			return id, ""
		}
		p, t := pay(a), newTold()
		op := func(ctx context.Context, client int, id string) string { return p(ctx, client, id, owners[id]) }
		audit := func(ctx context.Context) (audit, error) { return a.auditPayments(ctx, o.ids, t.byKey()) }
		return cell{op: op, pick: pick, told: t, audit: audit}, nil
	}
}

// auditPayments counts the double charges of orders at the gateway, or,
// with none, what the books audit finds wrong with them instead (after);
// and, per order, the payments told beyond the first and the charges
// beyond those told (in flight).
func (a *arena) auditPayments(ctx context.Context, ids []string, paid map[string]int) (audit, error) {
	mine := make(map[string]bool, len(ids))
	for _, id := range ids {
		mine[id] = true
	}
	os, ps, err := books.FromDBFor(ctx, a.pool, ids)
	if err != nil {
		return audit{}, err
	}
	allCharges, err := a.gatewayCharges(ctx)
	if err != nil {
		return audit{}, err
	}
	var cs []books.Charge
	live := map[string]int{}
	doubles := 0
	for _, c := range allCharges {
		if !mine[c.Reference] {
			continue
		}
		cs = append(cs, c)
		if c.Status != "refunded" {
			if live[c.Reference]++; live[c.Reference] > 1 {
				doubles++
			}
		}
	}
	var found audit
	for _, id := range ids {
		found.inFlight += max(paid[id]-1, 0) + max(live[id]-paid[id], 0)
	}
	found.after = doubles
	if doubles == 0 {
		found.after = len(books.Audit(os, ps, cs).Problems)
	}
	return found, nil
}

// gatewayCharges are every charge of the gateway: read from its ledger
// when the arena runs it in process (the same charges its audit endpoint
// lists, without encoding them all as JSON for each cell), else from that
// endpoint.
func (a *arena) gatewayCharges(ctx context.Context) ([]books.Charge, error) {
	if a.processor == nil {
		return books.FromGateway(ctx, nil, a.gatewayURL)
	}
	all := a.processor.Charges("")
	charges := make([]books.Charge, len(all))
	for i, c := range all {
		charges[i] = books.Charge{ID: c.ID, Reference: c.Reference, Status: c.Status, AmountCents: c.AmountCents}
	}
	return charges, nil
}

// charge charges an order's price under key (a fresh one per attempt, so
// the gateway's own deduplication cannot hide a second charge).
func (a *arena) charge(ctx context.Context, key, orderID string) (string, error) {
	c, err := a.gateway.Charge(ctx, key, payments.ChargeRequest{AmountCents: payPrice, PaymentMethod: gw.MethodOK, Reference: orderID})
	if err != nil {
		return "", err
	}
	return c.ID, nil
}

// payNaive reads the order's status, checks it in Go, charges and writes.
func (a *arena) payNaive(ctx context.Context, _ int, orderID string, _ int) string {
	var status string
	if err := a.pool.QueryRow(ctx, sqlOrderStatus, orderID).Scan(&status); err != nil {
		return payFailure(ctx, err)
	}
	if status != "pending_payment" {
		return payFailure(ctx, errNotPendingRead)
	}
	id, err := newID()
	if err != nil {
		return payFailure(ctx, err)
	}
	chargeID, err := a.charge(ctx, id, orderID)
	if err != nil {
		return payFailure(ctx, err)
	}
	now := time.Now().UTC()
	err = pgx.BeginFunc(ctx, a.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, sqlPayOrderBlind, orderID, now); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, sqlRawInsertPayment, id, orderID, payPrice, gw.MethodOK, chargeID, now)
		return err
	})
	return payFailure(ctx, err)
}

// payUnique opens the processing payment (the unique index admits one live
// payment per order), charges, then settles the payment and the order.
func (a *arena) payUnique(ctx context.Context, _ int, orderID string, _ int) string {
	id, err := newID()
	if err != nil {
		return payFailure(ctx, err)
	}
	now := time.Now().UTC()
	if _, err := a.pool.Exec(ctx, sqlOpenPayment, id, orderID, payPrice, gw.MethodOK, now); err != nil {
		return payFailure(ctx, err)
	}
	chargeID, err := a.charge(ctx, id, orderID)
	if err != nil {
		return payFailure(ctx, err)
	}
	return payFailure(ctx, pgx.BeginFunc(ctx, a.pool, func(tx pgx.Tx) error {
		now := time.Now().UTC()
		if _, err := tx.Exec(ctx, sqlSucceedPayment, id, chargeID, now); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, sqlRawPayOrder, orderID, now)
		return err
	}))
}

// payOptimistic moves the order to paying with a version check, charges,
// then pays the order and records the payment.
func (a *arena) payOptimistic(ctx context.Context, _ int, orderID string, _ int) string {
	claimed := false
	for range optimisticAttempts {
		var status string
		var version int64
		if err := a.pool.QueryRow(ctx, sqlOrderVersioned, orderID).Scan(&status, &version); err != nil {
			return payFailure(ctx, err)
		}
		if status != "pending_payment" {
			return payFailure(ctx, errNotPendingRead)
		}
		tag, err := a.pool.Exec(ctx, sqlClaimOrderVersioned, orderID, version, time.Now().UTC())
		if err != nil {
			return payFailure(ctx, err)
		}
		if claimed = tag.RowsAffected() == 1; claimed {
			break
		}
	}
	if !claimed {
		return payFailure(ctx, errVersionConflict)
	}
	id, err := newID()
	if err != nil {
		return payFailure(ctx, err)
	}
	chargeID, err := a.charge(ctx, id, orderID)
	if err != nil {
		return payFailure(ctx, err)
	}
	now := time.Now().UTC()
	return payFailure(ctx, pgx.BeginFunc(ctx, a.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, sqlPayOrderFromPaying, orderID, now)
		if err != nil {
			return err
		}
		if tag.RowsAffected() != 1 {
			return errPayConflict
		}
		_, err = tx.Exec(ctx, sqlRawInsertPayment, id, orderID, payPrice, gw.MethodOK, chargeID, now)
		return err
	}))
}

// payLocked serialises the payments of an order inside PostgreSQL: the row
// lock of the read (readSQL FOR UPDATE) or, with advisory, a transaction
// advisory lock on the order. The charge runs inside the transaction, so
// the lock is held across the gateway call.
func (a *arena) payLocked(readSQL string, advisory bool) payOp {
	return func(ctx context.Context, _ int, orderID string, _ int) string {
		return payFailure(ctx, pgx.BeginFunc(ctx, a.pool, func(tx pgx.Tx) error {
			if advisory {
				if _, err := tx.Exec(ctx, sqlAdvisoryLock, "order:"+orderID); err != nil {
					return err
				}
			}
			var status string
			if err := tx.QueryRow(ctx, readSQL, orderID).Scan(&status); err != nil {
				return err
			}
			if status != "pending_payment" {
				return errNotPendingRead
			}
			id, err := newID()
			if err != nil {
				return err
			}
			chargeID, err := a.charge(ctx, id, orderID)
			if err != nil {
				return err
			}
			now := time.Now().UTC()
			if _, err := tx.Exec(ctx, sqlPayOrderBlind, orderID, now); err != nil {
				return err
			}
			_, err = tx.Exec(ctx, sqlRawInsertPayment, id, orderID, payPrice, gw.MethodOK, chargeID, now)
			return err
		}))
	}
}

func payFailure(ctx context.Context, err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, errNotPendingRead), errors.Is(err, errNotPending):
		return "not pending"
	case errors.Is(err, errVersionConflict), errors.Is(err, errPayConflict):
		return "version conflict"
	case payments.IsDeclined(err):
		return "declined"
	case errors.Is(err, payments.ErrOutcomeUnknown):
		return "gateway outcome unknown"
	case postgres.SQLState(err) == "23505":
		return "unique violation"
	case postgres.SQLState(err) != "":
		return "sqlstate " + postgres.SQLState(err)
	case ctx.Err() != nil:
		return "cancelled"
	}
	return "error"
}

// newID is a new payment id, which is also its charge's key.
func newID() (string, error) {
	id, err := uuid.NewV7()
	return id.String(), err
}
