package bench

// Refund in the shoot-out: each operation gives back 60 % of a paid order
// (refundAsk of its payPrice) at the stand-in gateway, fsynced, and
// records it. Spread: every order is refunded once. Hot: every order is
// handed to -clicks clients one after the other, so that about that many
// ask for 60 % of it at once (support agents, each with a key of its own):
// at most one of them fits. The orders are seeded paid, each with its
// succeeded payment and a charge at the gateway, whose own check of
// refunds is off for the whole shoot-out: every refund a strategy asks
// for is made, so what its guard does not stop is given back. The audit
// reads the gateway's refunds of the cell's charges: every cent given
// back beyond what an order's charge took is an anomaly (after); if there
// is none, the books audit's problems with the cell's orders, payments,
// refunds and charges count instead. In flight, it checks what each
// refund answered its client against them: cents told refunded beyond
// what was captured, and cents given back beyond those told.

import (
	"context"
	crand "crypto/rand"
	"errors"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sync/errgroup"

	"github.com/shop-example/shop/harness/books"
	gw "github.com/shop-example/shop/harness/gateway"
	"github.com/shop-example/shop/internal/payments"
	"github.com/shop-example/shop/internal/platform/postgres"
)

const (
	// refundAsk is what each refund asks back of an order of payPrice:
	// two of them never fit.
	refundAsk = payPrice * 6 / 10
	// refundOrdersPerSecond sizes the paid orders seeded for each run of
	// a refund cell, each with a charge at the gateway (an fsync each,
	// one at a time: the seeding takes about as long as the run). If a
	// run shows "out of orders", raise it.
	refundOrdersPerSecond = 2500
)

// Statements of the refund baselines.
const (
	// The seed: paid orders of one unit of the bench product (ids $1,
	// owned by users $2), and their succeeded payments ($6) recording
	// the charges $7, in one statement.
	sqlSeedPaidOrders = `WITH o AS (
			INSERT INTO orders (id, user_id, request_key, status, total_cents, version, created_at, updated_at, expires_at)
			SELECT t.id, t.user_id, t.id::text, 'paid', $3, 1, $4::timestamptz, $4::timestamptz, $4::timestamptz + interval '1 day'
			FROM unnest($1::uuid[], $2::uuid[]) AS t (id, user_id)
			RETURNING id),
		i AS (
			INSERT INTO order_items (order_id, sku, quantity, unit_price_cents)
			SELECT o.id, $5, 1, $3 FROM o)
		INSERT INTO payments (id, order_id, status, amount_cents, payment_method, charge_id, version, created_at, updated_at)
		SELECT p.id, p.order_id, 'succeeded', $3, $8, p.charge_id, 1, $4, $4
		FROM unnest($6::uuid[], $1::uuid[], $7::text[]) AS p (id, order_id, charge_id)`

	sqlRefundRead          = `SELECT total_cents, refunded_cents FROM orders WHERE id = $1`
	sqlRefundReadForUpdate = `SELECT total_cents, refunded_cents FROM orders WHERE id = $1 FOR UPDATE`
	sqlRefundReadVersioned = `SELECT total_cents, refunded_cents, version FROM orders WHERE id = $1`
	// naive, row lock, advisory, redsync only: what the order's refunds
	// hold is written as the value read plus the refund.
	sqlRefundWriteBlind = `UPDATE orders SET refunded_cents = $2, version = version + 1, updated_at = $3 WHERE id = $1`
	// optimistic: the same write, only at the version read.
	sqlRefundHoldVersioned = `UPDATE orders SET refunded_cents = $2, version = version + 1, updated_at = $4
		WHERE id = $1 AND version = $3`
	// unique only: the refund added to what the order holds, whatever it
	// was; orders_refunded_within_total refuses what passes the total.
	sqlRefundHoldAdd = `UPDATE orders SET refunded_cents = refunded_cents + $2, version = version + 1, updated_at = $3 WHERE id = $1`
	// conditional: the same, only if it fits.
	sqlRefundAddIfFits = `UPDATE orders SET refunded_cents = refunded_cents + $2, version = version + 1, updated_at = $3
		WHERE id = $1 AND refunded_cents + $2 <= total_cents`
	// Every baseline records a refund the gateway made as succeeded, its
	// own id its request key ($6).
	sqlInsertRefund = `INSERT INTO refunds (id, order_id, request_key, requested_by, amount_cents, status, processor_refund_id,
			version, created_at, updated_at)
		VALUES ($1, $2, $6, 'bench', $3, 'succeeded', $4, 1, $5, $5)`
)

var errExceedsRemaining = errors.New("refund exceeds what the order has left")

// refundOp refunds refundAsk of one order, whose charge is chargeID, as
// client; owner is the client whose order it is.
type refundOp func(ctx context.Context, client int, orderID, chargeID string, owner int) string

func refundsFlow() flowSpec {
	return flowSpec{
		name:     "refunds",
		title:    "Refund",
		unit:     "refunds/s",
		done:     "refund made",
		tables:   []string{"orders", "order_items", "payments", "refunds", "idempotency_keys"},
		anomaly:  "cents given back beyond what the order's charge captured, at the gateway (or, if none, the books audit's problems)",
		inFlight: "cents told refunded beyond what was captured, and cents given back beyond those told",
		strategies: map[string]strategy{
			"naive": {how: "read what the order's refunds hold, check in Go, refund at the gateway, write the value read plus the refund and the refund's row",
				cell: refundCell(func(a *arena) refundOp { return a.refundNaive })},
			"unique only": {how: "minimal correct: add the refund to what the order holds (orders_refunded_within_total refuses what passes the total), refund at the gateway, record it; two commits, no lock, no key",
				cell: refundCell(func(a *arena) refundOp { return a.refundHeldFirst(a.holdByConstraint) })},
			"optimistic": {how: "read what the order holds and its version, write it plus the refund only if unchanged (up to 5 attempts), refund at the gateway, record it",
				cell: refundCell(func(a *arena) refundOp { return a.refundHeldFirst(a.holdOptimistic) })},
			"row lock": {how: "SELECT … FOR UPDATE on the order, check, refund at the gateway inside the transaction, write; one commit, the lock held over the gateway call",
				cell: refundCell(func(a *arena) refundOp { return a.refundLocked(sqlRefundReadForUpdate, false) })},
			"advisory": {how: "pg_advisory_xact_lock on the order, read, check, refund at the gateway inside the transaction, write",
				cell: refundCell(func(a *arena) refundOp { return a.refundLocked(sqlRefundRead, true) })},
			"redsync only": {how: "the naive refund inside a Redlock on the order over the three nodes",
				cell: refundCell(func(a *arena) refundOp {
					return func(ctx context.Context, client int, id, charge string, owner int) string {
						return underLock(ctx, a, "refund:"+id, func(ctx context.Context) string { return a.refundNaive(ctx, client, id, charge, owner) })
					}
				})},
			"conditional": {how: "unsafe one commit: refund at the gateway, then UPDATE … SET refunded_cents = refunded_cents + n WHERE it fits, and the refund's row. The guard comes after the money went",
				cell: refundCell(func(a *arena) refundOp { return a.refundConditional })},
			"layered": {how: "POST /v1/orders/{id}/refunds through the service: token, idempotency claim with the order's advisory lock in one round trip, the refund rule, the order written at its version, processing row; the gateway call; the settle at the refund's version",
				cell: refundCell(func(a *arena) refundOp {
					return func(ctx context.Context, _ int, id, _ string, owner int) string {
						return a.svc.post(ctx, a.svc.tokens[owner], "/v1/orders/"+id+"/refunds", refundBody, crand.Text()).failure()
					}
				})},
		},
	}
}

// refundBody asks refundAsk back.
var refundBody = `{"amount_cents":` + strconv.Itoa(refundAsk) + `}`

// refundCell seeds the paid orders of one cell and audits them
// afterwards. Each operation's key is the next order to refund, which it
// refunds as its client.
func refundCell(refund func(a *arena) refundOp) func(ctx context.Context, a *arena, shape string) (cell, error) {
	return func(ctx context.Context, a *arena, shape string) (cell, error) {
		n := int(refundOrdersPerSecond * (a.o.warmup + a.o.duration).Seconds())
		o, charges, err := a.seedPaidOrders(ctx, max(n, 1))
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
		r, t := refund(a), newTold()
		op := func(ctx context.Context, client int, id string) string {
			return r(ctx, client, id, charges[id], owners[id])
		}
		audit := func(ctx context.Context) (audit, error) { return a.auditRefunds(ctx, o.ids, charges, t.byKey()) }
		return cell{op: op, pick: pick, told: t, audit: audit}, nil
	}
}

// seedPaidOrders charges n orders at the gateway, then writes them paid,
// with their payments, in one statement; it returns the orders and the
// charge of each.
func (a *arena) seedPaidOrders(ctx context.Context, n int) (*pendingOrders, map[string]string, error) {
	o := &pendingOrders{ids: make([]string, n), owners: make([]int, n)}
	owners, paymentIDs, chargeIDs := make([]string, n), make([]string, n), make([]string, n)
	for i := range n {
		var err error
		if o.ids[i], err = newID(); err != nil {
			return nil, nil, err
		}
		if paymentIDs[i], err = newID(); err != nil {
			return nil, nil, err
		}
		o.owners[i] = i % len(a.users)
		owners[i] = a.users[o.owners[i]]
	}
	// The gateway journals one charge at a time; a few in flight keep it
	// busy.
	var g errgroup.Group
	g.SetLimit(8)
	for i := range n {
		g.Go(func() error {
			c, err := a.gateway.Charge(ctx, paymentIDs[i], payments.ChargeRequest{AmountCents: payPrice, PaymentMethod: gw.MethodOK, Reference: o.ids[i]})
			chargeIDs[i] = c.ID
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, nil, err
	}
	now := time.Now().UTC().Truncate(time.Microsecond)
	if _, err := a.pool.Exec(ctx, sqlSeedPaidOrders, o.ids, owners, payPrice, now, payPrefix+"1", paymentIDs, chargeIDs, gw.MethodOK); err != nil {
		return nil, nil, err
	}
	charges := make(map[string]string, n)
	for i, id := range o.ids {
		charges[id] = chargeIDs[i]
	}
	return o, charges, nil
}

// auditRefunds counts, per order of the cell, the cents the gateway gave
// back beyond what its charge took, or, with none, what the books audit
// finds wrong with the orders, payments, refunds and charges instead
// (after); and the cents told refunded beyond the charge, and given back
// beyond those told (in flight).
func (a *arena) auditRefunds(ctx context.Context, ids []string, charges map[string]string, told map[string]int) (audit, error) {
	os, ps, err := books.FromDBFor(ctx, a.pool, ids)
	if err != nil {
		return audit{}, err
	}
	fs, err := books.RefundsFromDBFor(ctx, a.pool, ids)
	if err != nil {
		return audit{}, err
	}
	cs := make([]books.Charge, 0, len(ids))
	var found audit
	for _, id := range ids {
		c := books.Charge{ID: charges[id], Reference: id, Status: "succeeded", AmountCents: payPrice}
		for _, ch := range a.processor.Charges(id) {
			c.Status, c.AmountCents, c.RefundedCents = ch.Status, ch.AmountCents, ch.RefundedCents
		}
		var given int64
		for _, f := range a.processor.Refunds(c.ID) {
			c.Refunds = append(c.Refunds, books.ChargeRefund{ID: f.ID, AmountCents: f.AmountCents})
			given += f.AmountCents
		}
		cs = append(cs, c)
		toldCents := int64(told[id]) * refundAsk
		found.after += int(max(given-c.AmountCents, 0))
		found.inFlight += int(max(toldCents-c.AmountCents, 0) + max(given-toldCents, 0))
	}
	if found.after == 0 {
		found.after = len(books.Books{Orders: os, Payments: ps, Refunds: fs, Charges: cs}.Audit().Problems)
	}
	return found, nil
}

// refund gives refundAsk of chargeID back under a fresh key (the refund's
// id, as the service keys it): the refund's id and the gateway's.
func (a *arena) refund(ctx context.Context, chargeID string) (id, processorID string, err error) {
	if id, err = newID(); err != nil {
		return "", "", err
	}
	r, err := a.gateway.Refund(ctx, id, chargeID, refundAsk)
	return id, r.ID, err
}

// refundNaive reads what the order's refunds hold, checks in Go, refunds
// at the gateway and writes the value read plus the refund.
func (a *arena) refundNaive(ctx context.Context, _ int, orderID, chargeID string, _ int) string {
	var total, held int64
	if err := a.pool.QueryRow(ctx, sqlRefundRead, orderID).Scan(&total, &held); err != nil {
		return refundFailure(ctx, err)
	}
	if held+refundAsk > total {
		return refundFailure(ctx, errExceedsRemaining)
	}
	id, processorID, err := a.refund(ctx, chargeID)
	if err != nil {
		return refundFailure(ctx, err)
	}
	now := time.Now().UTC()
	return refundFailure(ctx, pgx.BeginFunc(ctx, a.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, sqlRefundWriteBlind, orderID, held+refundAsk, now); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, sqlInsertRefund, id, orderID, refundAsk, processorID, now, id)
		return err
	}))
}

// refundHeldFirst holds the refund on the order first (hold), then
// refunds at the gateway and records it: two commits.
func (a *arena) refundHeldFirst(hold func(ctx context.Context, orderID string) error) refundOp {
	return func(ctx context.Context, _ int, orderID, chargeID string, _ int) string {
		if err := hold(ctx, orderID); err != nil {
			return refundFailure(ctx, err)
		}
		id, processorID, err := a.refund(ctx, chargeID)
		if err != nil {
			return refundFailure(ctx, err)
		}
		_, err = a.pool.Exec(ctx, sqlInsertRefund, id, orderID, refundAsk, processorID, time.Now().UTC(), id)
		return refundFailure(ctx, err)
	}
}

// holdByConstraint adds the refund to what the order holds; the CHECK
// refuses it past the total.
func (a *arena) holdByConstraint(ctx context.Context, orderID string) error {
	_, err := a.pool.Exec(ctx, sqlRefundHoldAdd, orderID, refundAsk, time.Now().UTC())
	return err
}

// holdOptimistic reads what the order holds and its version, checks, and
// writes it plus the refund at the version read, up to
// optimisticAttempts times.
func (a *arena) holdOptimistic(ctx context.Context, orderID string) error {
	for range optimisticAttempts {
		var total, held, version int64
		if err := a.pool.QueryRow(ctx, sqlRefundReadVersioned, orderID).Scan(&total, &held, &version); err != nil {
			return err
		}
		if held+refundAsk > total {
			return errExceedsRemaining
		}
		tag, err := a.pool.Exec(ctx, sqlRefundHoldVersioned, orderID, held+refundAsk, version, time.Now().UTC())
		if err != nil || tag.RowsAffected() == 1 {
			return err
		}
	}
	return errVersionConflict
}

// refundLocked serialises the refunds of an order inside PostgreSQL: the
// row lock of the read (readSQL FOR UPDATE) or, with advisory, a
// transaction advisory lock on the order. The gateway's refund runs
// inside the transaction, so the lock is held across the call.
func (a *arena) refundLocked(readSQL string, advisory bool) refundOp {
	return func(ctx context.Context, _ int, orderID, chargeID string, _ int) string {
		return refundFailure(ctx, pgx.BeginFunc(ctx, a.pool, func(tx pgx.Tx) error {
			if advisory {
				if _, err := tx.Exec(ctx, sqlAdvisoryLock, "refund:"+orderID); err != nil {
					return err
				}
			}
			var total, held int64
			if err := tx.QueryRow(ctx, readSQL, orderID).Scan(&total, &held); err != nil {
				return err
			}
			if held+refundAsk > total {
				return errExceedsRemaining
			}
			id, processorID, err := a.refund(ctx, chargeID)
			if err != nil {
				return err
			}
			now := time.Now().UTC()
			if _, err := tx.Exec(ctx, sqlRefundWriteBlind, orderID, held+refundAsk, now); err != nil {
				return err
			}
			_, err = tx.Exec(ctx, sqlInsertRefund, id, orderID, refundAsk, processorID, now, id)
			return err
		}))
	}
}

// refundConditional refunds at the gateway, then adds the refund to what
// the order holds only if it fits, and records it: a refund that does not
// fit was given back already.
func (a *arena) refundConditional(ctx context.Context, _ int, orderID, chargeID string, _ int) string {
	id, processorID, err := a.refund(ctx, chargeID)
	if err != nil {
		return refundFailure(ctx, err)
	}
	now := time.Now().UTC()
	return refundFailure(ctx, pgx.BeginFunc(ctx, a.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, sqlRefundAddIfFits, orderID, refundAsk, now)
		if err != nil {
			return err
		}
		if tag.RowsAffected() != 1 {
			return errExceedsRemaining
		}
		_, err = tx.Exec(ctx, sqlInsertRefund, id, orderID, refundAsk, processorID, now, id)
		return err
	}))
}

// refundFailure is the word for what stopped a refund, or "".
func refundFailure(ctx context.Context, err error) string {
	var refused *payments.RefundRefusedError
	switch {
	case err == nil:
		return ""
	case errors.Is(err, errExceedsRemaining), postgres.SQLState(err) == "23514":
		// Checked in Go or in the statement, or refused by
		// orders_refunded_within_total.
		return "exceeds remaining"
	case errors.Is(err, errVersionConflict):
		return "version conflict"
	case errors.As(err, &refused):
		return "refused by the gateway"
	case errors.Is(err, payments.ErrOutcomeUnknown):
		return "gateway outcome unknown"
	case postgres.SQLState(err) != "":
		return "sqlstate " + postgres.SQLState(err)
	case ctx.Err() != nil:
		return "cancelled"
	}
	return "error"
}
