package orders

import (
	"fmt"
	"slices"
	"time"

	"github.com/shop-example/shop/internal/inventory"
	"github.com/shop-example/shop/internal/platform/problem"
)

// Status is where an order is in its life.
//
//	pending_payment ──begin payment──▶ paying ──charged──▶ paid ──shipped──▶ fulfilled
//	  │  │     ▲                          │ │     │                    │
//	  │  │     └───declined or refused────┘ │     └──all refunded──▶ refunded ◀──all refunded
//	  │  ├─cancel─▶ cancelled ◀───cancel────┘  (the charge in flight is refunded)
//	  │  └─expire─▶ expired                    (never while paying)
//
// paying is how an order says "a payment of mine is in flight": the expiry
// job and a second payment ask the order's own row, not the payments.
// fulfilled is a paid order shipped: the fulfilment consumer moves it, on
// order.paid (Service.Fulfil). A paid or fulfilled order can be refunded,
// in parts (package refunds): RefundedCents says how much of its total its
// refunds hold, those in flight included, and it becomes refunded, for
// good, once refunds that went through cover its whole total.
type Status string

// The states of an order.
const (
	StatusPendingPayment Status = "pending_payment"
	StatusPaying         Status = "paying"
	StatusPaid           Status = "paid"
	StatusFulfilled      Status = "fulfilled"
	StatusRefunded       Status = "refunded"
	StatusCancelled      Status = "cancelled"
	StatusExpired        Status = "expired"
)

// Statuses are every state of an order, in the order of its life.
var Statuses = []Status{StatusPendingPayment, StatusPaying, StatusPaid, StatusFulfilled, StatusRefunded, StatusCancelled, StatusExpired}

// Item is one line of an order, priced when the order was placed.
type Item struct {
	SKU            string
	Quantity       int
	UnitPriceCents int64
	// Returned is how many of its units a return sent back, the return's
	// refund in flight or succeeded.
	Returned int
}

// Order is a customer's reservation of stock, waiting for payment.
type Order struct {
	ID         string
	UserID     string
	RequestKey string
	Status     Status
	Items      []Item
	TotalCents int64
	// RefundedCents is what the order's refunds hold of TotalCents: every
	// refund not failed, those in flight included, so that two refunds
	// never both pass the check of what is left.
	RefundedCents int64
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
	// ErrPaymentInFlight means the order is being paid by another payment.
	ErrPaymentInFlight = problem.New(problem.ResourceBusy, "a payment of this order is in flight")
	// ErrKeyReused means the request's Idempotency-Key placed an order of
	// other items: the same key sent with another request.
	ErrKeyReused = problem.New(problem.IdempotencyReused,
		"this Idempotency-Key was used for an order of other items; send a new key for a new request")
	// ErrVersionConflict means another writer changed the order between
	// read and write. It never reaches a client: the flow reads again.
	ErrVersionConflict = fmt.Errorf("order changed since it was read")
	// ErrDuplicateRequest means the user already placed an order with this
	// request key (the unique constraint said so).
	ErrDuplicateRequest = fmt.Errorf("order already placed with this request key")
	// ErrAlreadyReleased means the order's stock was already returned (the
	// stock_releases primary key said so).
	ErrAlreadyReleased = fmt.Errorf("order's stock already returned")
	// ErrRefundedBeyondTotal means a write would have made the order's
	// refunds hold more than its total (orders_refunded_within_total said
	// so): a refund that got past the rule.
	ErrRefundedBeyondTotal = fmt.Errorf("order's refunds would exceed its total")
	// ErrReturnedBeyondQuantity means a write would have returned more
	// units of a line than were bought (order_items_returned_within_quantity
	// said so).
	ErrReturnedBeyondQuantity = fmt.Errorf("order's returns would exceed what was bought")
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

// Holds reports whether the order holds exactly lines, in any order: a
// request sent again with its key asks for what the order placed.
func (o *Order) Holds(lines []inventory.Line) bool {
	mine := o.Lines()
	if len(mine) != len(lines) {
		return false
	}
	for _, l := range lines {
		if !slices.Contains(mine, l) {
			return false
		}
	}
	return true
}

// A Change is one move of the order's state machine, layer 2: given the
// order as it was read, it says whether the move is allowed, makes it,
// and reports whether the order moved. A change that is refused returns
// an error and leaves the order as it was; one with nothing to do (a
// cancel of a cancelled order) returns false.
//
// A change is pure: Store.Update applies it to the order it reads in the
// flow's transaction (cancel, expiry), Store.QueueMove to an order the
// flow read before (pay: before its transaction; refund: in its first
// round trip, under its lock), and either writes the order only if it
// moved, at the version read (layer 3).
type Change func(o *Order) (moved bool, err error)

// Cancel is userID's cancel: a pending order, or one being paid, moves to
// cancelled. A cancelled order is left as it is (no error); a paid or
// expired one cannot be cancelled, and another user's does not exist for
// userID. A cancel does not wait for a payment in flight: it wins on the
// order row, and the charge, if it goes through, finds the order
// cancelled and is refunded.
func Cancel(userID string, now time.Time) Change {
	return func(o *Order) (bool, error) {
		if o.UserID != userID {
			return false, ErrNotFound
		}
		switch o.Status {
		case StatusPendingPayment, StatusPaying:
			o.Status, o.UpdatedAt = StatusCancelled, now
			return true, nil
		case StatusCancelled:
			return false, nil
		}
		return false, problem.Errorf(problem.InvalidState, "order is %s and cannot be cancelled", o.Status)
	}
}

// BeginPayment is the move of userID's order when a payment of it
// begins: a pending order within its time, with something to charge,
// moves to paying. An order already paying answers ErrPaymentInFlight.
func BeginPayment(userID string, now time.Time) Change {
	return func(o *Order) (bool, error) {
		if o.UserID != userID {
			return false, ErrNotFound
		}
		switch o.Status {
		case StatusPendingPayment:
		case StatusPaying:
			return false, ErrPaymentInFlight
		default:
			return false, problem.Errorf(problem.InvalidState, "order is %s and cannot be paid", o.Status)
		}
		if o.TotalCents <= 0 {
			return false, problem.New(problem.InvalidState, "order's total is 0: there is nothing to charge")
		}
		if !now.Before(o.ExpiresAt) {
			return false, problem.Errorf(problem.InvalidState, "order expired at %s and cannot be paid", o.ExpiresAt.UTC().Format(time.RFC3339))
		}
		o.Status, o.UpdatedAt = StatusPaying, now
		return true, nil
	}
}

// Pay is the move of an order being paid once its charge has gone
// through: paying → paid. The expiry time is not asked again: a payment
// that began in time may settle late, and the expiry job never expires
// an order being paid.
func Pay(now time.Time) Change {
	return func(o *Order) (bool, error) {
		if o.Status != StatusPaying {
			return false, problem.Errorf(problem.InvalidState, "order is %s and cannot be paid", o.Status)
		}
		o.Status, o.UpdatedAt = StatusPaid, now
		return true, nil
	}
}

// PaymentEnded is the move of an order whose payment ended without a
// charge (declined, or refused as invalid): paying → pending_payment, so
// it can be paid again. An order that moved on meanwhile (cancelled)
// stays as it is.
func PaymentEnded(now time.Time) Change {
	return func(o *Order) (bool, error) {
		if o.Status != StatusPaying {
			return false, nil
		}
		o.Status, o.UpdatedAt = StatusPendingPayment, now
		return true, nil
	}
}

// Expire is the expiry job's move: a pending order whose time is up
// moves to expired. An order being paid does not expire: its payment
// began in time, and it settles the order either way.
func Expire(now time.Time) Change {
	return func(o *Order) (bool, error) {
		if o.Status != StatusPendingPayment {
			return false, problem.Errorf(problem.InvalidState, "order is %s and cannot expire", o.Status)
		}
		if now.Before(o.ExpiresAt) {
			return false, problem.Errorf(problem.InvalidState, "order does not expire before %s", o.ExpiresAt.Format(time.RFC3339))
		}
		o.Status, o.UpdatedAt = StatusExpired, now
		return true, nil
	}
}

// Fulfil is the fulfilment's move: a paid order ships, paid → fulfilled.
// A fulfilled order is left as it is; any other cannot ship.
func Fulfil(now time.Time) Change {
	return func(o *Order) (bool, error) {
		switch o.Status {
		case StatusPaid:
			o.Status, o.UpdatedAt = StatusFulfilled, now
			return true, nil
		case StatusFulfilled:
			return false, nil
		}
		return false, problem.Errorf(problem.InvalidState, "order is %s and cannot be fulfilled", o.Status)
	}
}

// Refunder is who asks for a refund: the order's owner, by their user
// id, or the admin, who may refund any order. The zero Refunder owns no
// order.
type Refunder struct {
	UserID string
	Admin  bool
}

// May reports whether r may refund o: the admin any order, a user their own.
func (r Refunder) May(o Order) bool { return r.Admin || (r.UserID != "" && o.UserID == r.UserID) }

// RefundAsk is what a refund asks of an order: money, units sent back, or
// both.
type RefundAsk struct {
	By Refunder
	// AmountCents is the money asked for; 0 asks for the returned units'
	// price or, with none returned, for all that is left.
	AmountCents int64
	// Returns are the units sent back, each line's stock to come back once
	// the refund succeeds; none for a refund of money alone.
	Returns []inventory.Line
}

// ErrRefundExceedsRemaining is a refund of more than an order has left.
var ErrRefundExceedsRemaining = problem.New(problem.RefundExceedsRemaining, "the refund is more than the order has left to refund")

// ExceedsRemaining is the refusal of a refund of asked cents from o, with
// what o has left (remaining_cents).
func ExceedsRemaining(o Order, asked int64) error {
	left := o.TotalCents - o.RefundedCents
	return &problem.Error{Code: problem.RefundExceedsRemaining,
		Detail: fmt.Sprintf("a refund of %d cents asked; the order has %d of its %d cents left to refund", asked, left, o.TotalCents),
		Extra:  map[string]any{"remaining_cents": max(left, 0)}}
}

// Refund is the move of an order when a refund of it begins: a paid or
// fulfilled order of the refunder's holds the refund's amount
// (RefundedCents) and records the units it returns, so that the next
// refund is measured against what is left. The amount is ask's, or the
// returned units' price, or with neither all that is left; it must be
// at least a cent and at most what is left (refund_exceeds_remaining).
// Each returned line must be of the order, and at most what was bought
// and not yet returned.
func Refund(ask RefundAsk, now time.Time) Change {
	return func(o *Order) (bool, error) {
		if !ask.By.May(*o) {
			return false, ErrNotFound
		}
		switch {
		case ask.AmountCents < 0:
			return false, problem.New(problem.Invalid, "amount_cents: must be a positive integer")
		case o.Status == StatusRefunded:
			return false, problem.New(problem.InvalidState, "order is refunded: all of its total was refunded")
		case !o.Status.Paid():
			return false, problem.Errorf(problem.InvalidState, "order is %s and cannot be refunded", o.Status)
		}
		left := o.TotalCents - o.RefundedCents
		amount := ask.AmountCents
		returned := slices.Clone(o.Items)
		for i, l := range ask.Returns {
			j := slices.IndexFunc(returned, func(it Item) bool { return it.SKU == l.SKU })
			if j < 0 {
				return false, problem.Errorf(problem.Invalid, "items[%d].sku: %s is not in the order", i, l.SKU)
			}
			it := &returned[j]
			if l.Quantity > it.Quantity-it.Returned {
				return false, problem.Errorf(problem.Invalid, "items[%d].quantity: %d of %s asked back; %d bought, %d returned before",
					i, l.Quantity, l.SKU, it.Quantity, it.Returned)
			}
			it.Returned += l.Quantity
			if ask.AmountCents == 0 {
				amount += int64(l.Quantity) * it.UnitPriceCents
			}
		}
		if ask.AmountCents == 0 && len(ask.Returns) == 0 {
			amount = left
		}
		switch {
		case amount > left:
			return false, ExceedsRemaining(*o, amount)
		case amount < 1 && left == 0:
			return false, problem.New(problem.Invalid, "nothing is left to refund: the order's refunds hold all of its total")
		case amount < 1:
			return false, problem.New(problem.Invalid, "the refund comes to 0 cents: the units returned cost nothing; name an amount_cents")
		}
		o.Items, o.RefundedCents, o.UpdatedAt = returned, o.RefundedCents+amount, now
		return true, nil
	}
}

// RefundSucceeded is the move of an order whose refund went through at the
// processor. succeededCents is what the order's refunds that succeeded
// come to, this one included: when it is the whole total, and so no other
// refund holds any of it in flight, the order is refunded. Either way the
// order is written, at its version: of two refunds that settle at once,
// the second decides on what the first wrote, and never leaves an order
// whose refunds all went through short of refunded.
func RefundSucceeded(succeededCents int64, now time.Time) Change {
	return func(o *Order) (bool, error) {
		if !o.Status.Paid() {
			return false, problem.Errorf(problem.InvalidState, "order is %s and has no refund in flight", o.Status)
		}
		if succeededCents >= o.TotalCents && o.RefundedCents == o.TotalCents {
			o.Status = StatusRefunded
		}
		o.UpdatedAt = now
		return true, nil
	}
}

// RefundFailed is the move of an order whose refund the processor
// refused: the order gives back what the refund held, its amount and the
// units it returned, so they can be refunded again.
func RefundFailed(amountCents int64, returns []inventory.Line, now time.Time) Change {
	return func(o *Order) (bool, error) {
		if !o.Status.Paid() || o.RefundedCents < amountCents {
			return false, problem.Errorf(problem.InvalidState, "order is %s with %d cents held by refunds, and holds no refund of %d",
				o.Status, o.RefundedCents, amountCents)
		}
		items := slices.Clone(o.Items)
		for _, l := range returns {
			j := slices.IndexFunc(items, func(it Item) bool { return it.SKU == l.SKU })
			if j < 0 || items[j].Returned < l.Quantity {
				return false, problem.Errorf(problem.InvalidState, "order holds no return of %d %s", l.Quantity, l.SKU)
			}
			items[j].Returned -= l.Quantity
		}
		o.Items, o.RefundedCents, o.UpdatedAt = items, o.RefundedCents-amountCents, now
		return true, nil
	}
}

// Paid reports whether an order in s has been paid for, and not refunded:
// paid, or paid and since fulfilled.
func (s Status) Paid() bool { return s == StatusPaid || s == StatusFulfilled }

// ReleasesStock reports whether moving into s gives the reserved stock back.
func (s Status) ReleasesStock() bool {
	return s == StatusCancelled || s == StatusExpired
}
