package payments

import (
	"fmt"
	"time"

	"github.com/shop-example/shop/internal/platform/problem"
)

// Status is where a payment is in its life.
//
//	processing ──charge succeeded, order paid──▶ succeeded
//	     │ ├────charge declined───────────────▶ failed
//	     │ └────charged, order gone meanwhile──▶ refunded
//	     └─ outcome unknown: stays processing until the reconciler settles it
type Status string

// The states of a payment.
const (
	StatusProcessing Status = "processing"
	StatusSucceeded  Status = "succeeded"
	StatusFailed     Status = "failed"
	StatusRefunded   Status = "refunded"
)

// Payment is one attempt to charge an order. Its ID is the idempotency key
// the gateway sees for the charge.
type Payment struct {
	ID      string
	OrderID string
	// RequestKey is the Idempotency-Key of the request that began the
	// payment: one payment per (order, key), payments_order_request_key.
	RequestKey    string
	Status        Status
	AmountCents   int64
	Method        string
	ChargeID      string // the gateway's charge, once known
	RefundID      string // the gateway's refund, when refunded
	FailureReason string
	// Version is bumped by every change of Status; a settlement writes
	// "WHERE version = $read", so two settlers (the request and the
	// reconciler) cannot both settle one payment.
	Version   int64
	CreatedAt time.Time
	UpdatedAt time.Time
}

// Errors returned by this package, matched with errors.Is.
var (
	ErrNotFound = problem.New(problem.NotFound, "no such order")
	// ErrActivePayment means the order already has a payment that is
	// processing or succeeded (the partial unique index said so).
	ErrActivePayment = fmt.Errorf("order already has a payment in flight or succeeded")
	// ErrDuplicateRequest means the order already has a payment begun
	// with the request's key (payments_order_request_key said so).
	ErrDuplicateRequest = fmt.Errorf("order already has a payment of this request")
	// ErrVersionConflict means another settler changed the payment between
	// read and write. It never reaches a client: the flow re-reads.
	ErrVersionConflict = fmt.Errorf("payment changed since it was read")
	// ErrChargeSettled means a settlement named a charge that already
	// settles another payment (payments_charge_id_key said so).
	ErrChargeSettled = fmt.Errorf("charge already settles another payment")
	// ErrOutcomeUnknown means the gateway did not say whether it charged:
	// the payment stays processing and the reconciler settles it.
	ErrOutcomeUnknown = fmt.Errorf("payment outcome unknown")
)

// MaxMethodLength bounds payment_method.
const MaxMethodLength = 64

// ValidateMethod checks the payment method's form; which methods exist is
// the gateway's business.
func ValidateMethod(m string) error {
	if m == "" || len(m) > MaxMethodLength {
		return problem.Errorf(problem.Invalid, "payment_method: must be 1–%d characters", MaxMethodLength)
	}
	for _, r := range m {
		if !(r == '_' || r == '-' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			return problem.New(problem.Invalid, "payment_method: only A-Z, a-z, 0-9, _ and - are allowed")
		}
	}
	return nil
}

// Succeed settles a processing payment whose charge went through.
func (p *Payment) Succeed(chargeID string, now time.Time) error {
	if err := p.settle(now); err != nil {
		return err
	}
	p.Status, p.ChargeID = StatusSucceeded, chargeID
	return nil
}

// Fail settles a processing payment whose charge was declined.
func (p *Payment) Fail(reason string, now time.Time) error {
	if err := p.settle(now); err != nil {
		return err
	}
	p.Status, p.FailureReason = StatusFailed, reason
	return nil
}

// Refund settles a processing payment whose charge went through after its
// order stopped waiting for it (cancelled or expired): the money went back.
func (p *Payment) Refund(chargeID, refundID string, now time.Time) error {
	if err := p.settle(now); err != nil {
		return err
	}
	p.Status, p.ChargeID, p.RefundID = StatusRefunded, chargeID, refundID
	return nil
}

// settle admits a settlement only from processing: an outcome is recorded
// once.
func (p *Payment) settle(now time.Time) error {
	if p.Status != StatusProcessing {
		return problem.Errorf(problem.InvalidState, "payment is %s and already settled", p.Status)
	}
	p.UpdatedAt = now
	return nil
}
