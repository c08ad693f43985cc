package orders

import (
	"fmt"
	"time"

	"github.com/shop-example/shop/internal/inventory"
	"github.com/shop-example/shop/internal/platform/problem"
)

// Status is where an order is in its life.
//
//	pending_payment ──begin payment──▶ paying ──charged──▶ paid ──shipped──▶ fulfilled
//	  │  │     ▲                          │ │
//	  │  │     └───declined or refused────┘ │
//	  │  ├─cancel─▶ cancelled ◀───cancel────┘  (the charge in flight is refunded)
//	  │  └─expire─▶ expired                    (never while paying)
//
// paying is how an order says "a payment of mine is in flight": the expiry
// job and a second payment ask the order's own row, not the payments.
// fulfilled is a paid order shipped: the fulfilment consumer moves it, on
// order.paid (Service.Fulfil).
type Status string

// The states of an order.
const (
	StatusPendingPayment Status = "pending_payment"
	StatusPaying         Status = "paying"
	StatusPaid           Status = "paid"
	StatusFulfilled      Status = "fulfilled"
	StatusCancelled      Status = "cancelled"
	StatusExpired        Status = "expired"
)

// Item is one line of an order, priced when the order was placed.
type Item struct {
	SKU            string
	Quantity       int
	UnitPriceCents int64
}

// Order is a customer's reservation of stock, waiting for payment.
type Order struct {
	ID         string
	UserID     string
	RequestKey string
	Status     Status
	Items      []Item
	TotalCents int64
	// Version is bumped by every change of Status. Writes are made with
	// "WHERE version = $read": the version is the fencing token that stops
	// a stale writer, whatever lock it believes it holds.
	Version   int64
	CreatedAt time.Time
	UpdatedAt time.Time
	ExpiresAt time.Time
}

// Limits of an order request (API.md).
const (
	MaxItems    = 20
	MaxQuantity = 100
)

// Errors returned by this package, matched with errors.Is.
var (
	ErrNotFound     = problem.New(problem.NotFound, "no such order")
	ErrInvalidState = problem.New(problem.InvalidState, "the order is not in a state that allows this")
	// ErrVersionConflict means another writer changed the order between
	// read and write. It never reaches a client: the service re-reads.
	ErrVersionConflict = fmt.Errorf("order changed since it was read")
	// ErrDuplicateRequest means the user already placed an order with this
	// request key (the unique constraint said so).
	ErrDuplicateRequest = fmt.Errorf("order already placed with this request key")
	// ErrAlreadyReleased means the order's stock was already returned (the
	// stock_releases primary key said so).
	ErrAlreadyReleased = fmt.Errorf("order's stock already returned")
)

// ValidateLines checks an order request: 1–20 lines, known SKU format,
// distinct SKUs, quantities 1–100.
func ValidateLines(lines []inventory.Line) error {
	if len(lines) == 0 {
		return problem.New(problem.Invalid, "items: must hold at least one item")
	}
	if len(lines) > MaxItems {
		return problem.Errorf(problem.Invalid, "items: at most %d items, got %d", MaxItems, len(lines))
	}
	seen := make(map[string]bool, len(lines))
	for i, l := range lines {
		if !inventory.ValidSKU(l.SKU) {
			return problem.Errorf(problem.Invalid, "items[%d].sku: must be 1–64 characters of A-Z, a-z, 0-9, _ and -", i)
		}
		if seen[l.SKU] {
			return problem.Errorf(problem.Invalid, "items[%d].sku: %s appears more than once", i, l.SKU)
		}
		seen[l.SKU] = true
		if l.Quantity < 1 || l.Quantity > MaxQuantity {
			return problem.Errorf(problem.Invalid, "items[%d].quantity: must be 1–%d, got %d", i, MaxQuantity, l.Quantity)
		}
	}
	return nil
}

// Lines returns what the order holds of each SKU, as stock lines.
func (o *Order) Lines() []inventory.Line {
	lines := make([]inventory.Line, len(o.Items))
	for i, it := range o.Items {
		lines[i] = inventory.Line{SKU: it.SKU, Quantity: it.Quantity}
	}
	return lines
}

// Cancel moves a pending order, or one being paid, to cancelled.
// Cancelling a cancelled order changes nothing and is not an error
// (changed is false); a paid or expired order cannot be cancelled. A cancel
// does not wait for a payment in flight: it wins on the order row, and the
// charge, if it goes through, finds the order cancelled and is refunded.
func (o *Order) Cancel(now time.Time) (changed bool, err error) {
	switch o.Status {
	case StatusPendingPayment, StatusPaying:
		o.Status, o.UpdatedAt = StatusCancelled, now
		return true, nil
	case StatusCancelled:
		return false, nil
	default:
		return false, problem.Errorf(problem.InvalidState, "order is %s and cannot be cancelled", o.Status)
	}
}

// ErrPaymentInFlight means the order is being paid by another payment.
var ErrPaymentInFlight = problem.New(problem.ResourceBusy, "a payment of this order is in flight")

// BeginPayment moves a pending order to paying, when a payment of it may
// begin now: it must be pending (ErrPaymentInFlight if another payment is
// in flight), not past its expiry time, and have something to charge.
func (o *Order) BeginPayment(now time.Time) error {
	switch o.Status {
	case StatusPendingPayment:
	case StatusPaying:
		return ErrPaymentInFlight
	default:
		return problem.Errorf(problem.InvalidState, "order is %s and cannot be paid", o.Status)
	}
	if o.TotalCents <= 0 {
		return problem.New(problem.InvalidState, "order's total is 0: there is nothing to charge")
	}
	if !now.Before(o.ExpiresAt) {
		return problem.Errorf(problem.InvalidState, "order expired at %s and cannot be paid", o.ExpiresAt.UTC().Format(time.RFC3339))
	}
	o.Status, o.UpdatedAt = StatusPaying, now
	return nil
}

// Pay moves an order being paid to paid, once its charge has succeeded.
// The expiry time is not checked again: a payment that began in time may
// settle late, and the expiry job never expires an order being paid.
func (o *Order) Pay(now time.Time) error {
	if o.Status != StatusPaying {
		return problem.Errorf(problem.InvalidState, "order is %s and cannot be paid", o.Status)
	}
	o.Status, o.UpdatedAt = StatusPaid, now
	return nil
}

// PaymentEnded moves an order being paid back to pending when its payment
// ended without a charge (declined, or refused as invalid): it can be paid
// again. An order that moved on meanwhile (cancelled) stays as it is
// (changed is false).
func (o *Order) PaymentEnded(now time.Time) (changed bool) {
	if o.Status != StatusPaying {
		return false
	}
	o.Status, o.UpdatedAt = StatusPendingPayment, now
	return true
}

// Expire moves a pending order whose time is up to expired. The expiry job
// applies the same rule in SQL (sqlExpireDue), to a batch of orders at once;
// this is the rule stated for one order. An order being paid does not
// expire: its payment began in time.
func (o *Order) Expire(now time.Time) error {
	if o.Status != StatusPendingPayment {
		return problem.Errorf(problem.InvalidState, "order is %s and cannot expire", o.Status)
	}
	if now.Before(o.ExpiresAt) {
		return problem.Errorf(problem.InvalidState, "order does not expire before %s", o.ExpiresAt.Format(time.RFC3339))
	}
	o.Status, o.UpdatedAt = StatusExpired, now
	return nil
}

// Fulfil moves a paid order to fulfilled. A fulfilled order is left as it
// is (changed is false); any other cannot be shipped.
func (o *Order) Fulfil(now time.Time) (changed bool, err error) {
	switch o.Status {
	case StatusPaid:
		o.Status, o.UpdatedAt = StatusFulfilled, now
		return true, nil
	case StatusFulfilled:
		return false, nil
	default:
		return false, problem.Errorf(problem.InvalidState, "order is %s and cannot be fulfilled", o.Status)
	}
}

// Paid reports whether an order in s has been paid for: paid, or paid and
// since fulfilled.
func (s Status) Paid() bool { return s == StatusPaid || s == StatusFulfilled }

// ReleasesStock reports whether moving into s gives the reserved stock back.
func (s Status) ReleasesStock() bool {
	return s == StatusCancelled || s == StatusExpired
}
