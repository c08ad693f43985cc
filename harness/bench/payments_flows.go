package bench

import (
	"context"
	crand "crypto/rand"
	"errors"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	gw "github.com/shop-example/shop/harness/gateway"
	"github.com/shop-example/shop/internal/payments"
	"github.com/shop-example/shop/internal/platform/postgres"
)

// payBody is the body of every bench pay request: a card that is charged.
const payBody = `{"payment_method":"` + gw.MethodOK + `"}`

// layeredPayFlow pays orders through the service, as their owners.
type layeredPayFlow struct {
	svc    *service
	orders *pendingOrders
}

// pay sends POST /v1/orders/{id}/payments for a fresh order with its
// owner's token and a fresh Idempotency-Key. Only a 201 that is not a
// replay is a payment.
func (f layeredPayFlow) pay(ctx context.Context, _ int, _ string) string {
	id, owner, ok := f.orders.take()
	if !ok {
		return outOfOrders()
	}
	return f.payOrder(ctx, id, owner)
}

// payOrder pays order id as its owner, with a fresh Idempotency-Key.
func (f layeredPayFlow) payOrder(ctx context.Context, id string, owner int) string {
	return f.svc.post(ctx, f.svc.tokens[owner], "/v1/orders/"+id+"/payments", payBody, crand.Text()).failure()
}

// rawPayFlow is the baseline: the gateway call, then one transaction, on a
// pool with a connection per client.
type rawPayFlow struct {
	pool    *pgxpool.Pool
	gateway *payments.Gateway
	orders  *pendingOrders
}

// The baseline's transaction: the order moves to paid only from pending
// (a guard, not a version check), and the payment is written once, already
// succeeded.
const (
	sqlRawPayOrder = `UPDATE orders SET status = 'paid', version = version + 1, updated_at = $2
		WHERE id = $1 AND status = 'pending_payment'`
	sqlRawInsertPayment = `INSERT INTO payments (id, order_id, status, amount_cents, payment_method, charge_id, version, created_at, updated_at)
		VALUES ($1, $2, 'succeeded', $3, $4, $5, 1, $6, $6)`
)

var errNotPending = errors.New("order not pending")

// pay charges a fresh order under a fresh key (the payment's id, as the
// service does), then records it. The order's amount is known from the
// seed: the baseline reads nothing.
func (f rawPayFlow) pay(ctx context.Context, _ int, _ string) string {
	orderID, _, ok := f.orders.take()
	if !ok {
		return outOfOrders()
	}
	return f.payOrder(ctx, orderID)
}

// payOrder charges orderID under a fresh key, then records the payment.
func (f rawPayFlow) payOrder(ctx context.Context, orderID string) string {
	id, err := uuid.NewV7()
	if err != nil {
		return "uuid"
	}
	c, err := f.gateway.Charge(ctx, id.String(), payments.ChargeRequest{AmountCents: payPrice, PaymentMethod: gw.MethodOK, Reference: orderID})
	switch {
	case payments.IsDeclined(err):
		return "declined"
	case errors.Is(err, payments.ErrOutcomeUnknown):
		return "gateway outcome unknown"
	case err != nil:
		return "gateway"
	}
	now := time.Now().UTC()
	err = pgx.BeginFunc(ctx, f.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, sqlRawPayOrder, orderID, now)
		if err != nil {
			return err
		}
		if tag.RowsAffected() != 1 {
			return errNotPending
		}
		_, err = tx.Exec(ctx, sqlRawInsertPayment, id, orderID, payPrice, gw.MethodOK, c.ID, now)
		return err
	})
	switch {
	case err == nil:
		return ""
	case errors.Is(err, errNotPending):
		return "not pending"
	case postgres.SQLState(err) != "":
		return "sqlstate " + postgres.SQLState(err)
	case ctx.Err() != nil:
		return "cancelled"
	}
	return "error"
}
