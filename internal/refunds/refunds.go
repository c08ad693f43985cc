package refunds

import (
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/shop-example/shop/internal/inventory"
	"github.com/shop-example/shop/internal/orders"
	"github.com/shop-example/shop/internal/platform/auth"
	"github.com/shop-example/shop/internal/platform/problem"
)

// Status is where a refund is in its life.
//
//	processing ──the processor gave the money back──▶ succeeded
//	     │ └─────the processor refused──────────────▶ failed (the order gets back what it held)
//	     └─ outcome unknown: stays processing until the reconciler settles it
type Status string

// The states of a refund.
const (
	StatusProcessing Status = "processing"
	StatusSucceeded  Status = "succeeded"
	StatusFailed     Status = "failed"
)

// Refund is one request to give money back, and the units it returns. Its
// ID is the Idempotency-Key the processor sees.
type Refund struct {
	ID      string
	OrderID string
	// RequestKey is the Idempotency-Key of the request that asked for it:
	// one refund per (order, key), refunds_order_request_key.
	RequestKey string
	// RequestedBy is the order's owner (their user id) or auth.AdminScope.
	RequestedBy       string
	AmountCents       int64
	Status            Status
	Reason            string
	Items             []inventory.Line // the units returned, in SKU order; none for money alone
	ProcessorRefundID string           // the processor's refund, once known
	FailureReason     string
	// Version is bumped by every change of Status; a settle writes
	// "WHERE version = $read", so the request and the reconciler cannot
	// both settle one refund.
	Version   int64
	CreatedAt time.Time
	UpdatedAt time.Time
}

// MaxReason bounds a refund's reason, in characters.
const MaxReason = 200

// Errors returned by this package, matched with errors.Is.
var (
	ErrNotFound = problem.New(problem.NotFound, "no such order")
	// ErrDuplicateRequest means the order already has a refund of the
	// request's key (refunds_order_request_key said so).
	ErrDuplicateRequest = fmt.Errorf("order already has a refund of this request")
	// ErrVersionConflict means another settler changed the refund between
	// read and write. It never reaches a client: the flow reads again.
	ErrVersionConflict = fmt.Errorf("refund changed since it was read")
	// ErrProcessorRefundSettled means a settle named a processor refund
	// that settles another refund (refunds_processor_refund_id_key).
	ErrProcessorRefundSettled = fmt.Errorf("processor refund already settles another refund")
	// ErrOutcomeUnknown means the processor did not say whether it gave
	// the money back, or the answer could not be recorded: the refund
	// stays processing and the reconciler settles it.
	ErrOutcomeUnknown = fmt.Errorf("refund outcome unknown")
	// errKeyReused answers a request whose key asked for another refund
	// of the order.
	errKeyReused = problem.New(problem.IdempotencyReused,
		"this Idempotency-Key was used for another refund of this order; send a new key for a new request")
)

// Request is what a client asks for: money, units sent back, or both.
type Request struct {
	// AmountCents is the money asked for; 0 (left out) asks for the
	// returned units' price, or with none returned for all that is left.
	AmountCents int64
	Reason      string
	Items       []inventory.Line // the units sent back
}

// Validate checks a request's form; what the order allows is its rule's
// (orders.Refund). An amount below a cent, a reason over MaxReason
// characters, more lines than an order holds, a line of a malformed SKU,
// repeated SKUs or a quantity out of 1–100 are invalid_request.
func (q Request) Validate() error {
	if q.AmountCents < 0 {
		return problem.New(problem.Invalid, "amount_cents: must be a positive integer")
	}
	if n := utf8.RuneCountInString(q.Reason); n > MaxReason {
		return problem.Errorf(problem.Invalid, "reason: at most %d characters, got %d", MaxReason, n)
	}
	if len(q.Items) > orders.MaxItems {
		return problem.Errorf(problem.Invalid, "items: at most %d items, got %d", orders.MaxItems, len(q.Items))
	}
	seen := make(map[string]bool, len(q.Items))
	for i, l := range q.Items {
		switch {
		case !inventory.ValidSKU(l.SKU):
			return problem.Errorf(problem.Invalid, "items[%d].sku: must be 1–64 characters of A-Z, a-z, 0-9, _ and -", i)
		case seen[l.SKU]:
			return problem.Errorf(problem.Invalid, "items[%d].sku: %s appears more than once", i, l.SKU)
		case l.Quantity < 1 || l.Quantity > orders.MaxQuantity:
			return problem.Errorf(problem.Invalid, "items[%d].quantity: must be 1–%d, got %d", i, orders.MaxQuantity, l.Quantity)
		}
		seen[l.SKU] = true
	}
	return nil
}

// ask is the request as the order's rule reads it, from by.
func (q Request) ask(by orders.Refunder) orders.RefundAsk {
	return orders.RefundAsk{By: by, AmountCents: q.AmountCents, Returns: q.Items}
}

// asks reports whether q, from by, is the request that began r: the same
// requester, reason and units, and the same amount if it names one.
func (q Request) asks(r Refund, by orders.Refunder) bool {
	return r.RequestedBy == requester(by) && q.Reason == r.Reason &&
		(q.AmountCents == 0 || q.AmountCents == r.AmountCents) &&
		slices.Equal(inventory.BySKU(q.Items), inventory.BySKU(r.Items))
}

// requester is how a refund names who asked for it.
func requester(by orders.Refunder) string {
	if by.Admin {
		return auth.AdminScope
	}
	return by.UserID
}

// Succeed settles a processing refund the processor made as processorID.
func (r *Refund) Succeed(processorID string, now time.Time) error {
	if err := r.settle(now); err != nil {
		return err
	}
	r.Status, r.ProcessorRefundID = StatusSucceeded, processorID
	return nil
}

// Fail settles a processing refund the processor refused: nothing was
// given back.
func (r *Refund) Fail(reason string, now time.Time) error {
	if err := r.settle(now); err != nil {
		return err
	}
	r.Status, r.FailureReason = StatusFailed, strings.TrimSpace(reason)
	return nil
}

// settle admits a settlement only from processing: an outcome is recorded
// once.
func (r *Refund) settle(now time.Time) error {
	if r.Status != StatusProcessing {
		return problem.Errorf(problem.InvalidState, "refund is %s and already settled", r.Status)
	}
	r.UpdatedAt = now
	return nil
}

// Outcome is the error that goes with a refund's status: nil for
// succeeded, and for the others what the client is told.
func Outcome(r Refund) error {
	switch r.Status {
	case StatusSucceeded:
		return nil
	case StatusFailed:
		return problem.Errorf(problem.InvalidState, "the processor refused the refund, and nothing was refunded: %s", r.FailureReason)
	default:
		return fmt.Errorf("refund %s: %w", r.ID, ErrOutcomeUnknown)
	}
}
