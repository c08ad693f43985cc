package app

import (
	"github.com/labstack/echo/v4"

	"github.com/shop-example/shop/internal/inventory"
	"github.com/shop-example/shop/internal/likes"
	"github.com/shop-example/shop/internal/notify"
	"github.com/shop-example/shop/internal/orders"
	"github.com/shop-example/shop/internal/payments"
	"github.com/shop-example/shop/internal/platform/layers"
	"github.com/shop-example/shop/internal/platform/outbox"
	"github.com/shop-example/shop/internal/refunds"
	"github.com/shop-example/shop/internal/seats"
)

// Variants are how the ablation tests and the race lab's sandboxes take
// layers off: each function, when set, is handed a production step of the
// flows and returns the step they run instead, the same with one layer
// taken off (harness/variants builds them). Production sets none, and
// every flow runs its own steps.
type Variants struct {
	// Keys wraps the Idempotency-Key middleware of each keyed route.
	Keys func(echo.MiddlewareFunc) echo.MiddlewareFunc
	// Locker wraps the lock the flows take in Redis.
	Locker func(layers.Locker) layers.Locker
	// Orders wraps the order rows of every flow that moves an order.
	Orders   func(orders.OrderRows) orders.OrderRows
	Stock    func(orders.Stock) orders.Stock
	Payments func(payments.PaymentRows) payments.PaymentRows
	// Likes wraps the like rows of the like flow.
	Likes func(likes.LikeRows) likes.LikeRows
	// Refunds wraps the refunds' rows, where the refund flow's lock (the
	// order's advisory lock) is one of the steps.
	Refunds func(refunds.RefundRows) refunds.RefundRows
	// Inbox wraps a consumer's inbox.
	Inbox func(outbox.Inbox) outbox.Inbox
	// Holds wraps the steps of the seat flows (their locks in PostgreSQL,
	// their rules and their conditional writes).
	Holds func(seats.HoldRows) seats.HoldRows
}

// keys is the middleware of a keyed route.
func (v Variants) keys(guard echo.MiddlewareFunc) echo.MiddlewareFunc {
	if v.Keys == nil {
		return guard
	}
	return v.Keys(guard)
}

// locker is the lock the flows take.
func (v Variants) locker(l layers.Locker) layers.Locker {
	if v.Locker == nil {
		return l
	}
	return v.Locker(l)
}

// orders returns the order flows' config with its steps, cfg's own or
// their variants.
func (v Variants) orders(cfg orders.Config) orders.Config {
	if v.Orders != nil {
		cfg.Orders = v.Orders(orders.NewStore(cfg.DB))
	}
	if v.Stock != nil {
		cfg.Stock = v.Stock(inventory.NewStore(cfg.DB, cfg.Now))
	}
	if v.Inbox != nil {
		cfg.Inbox = v.Inbox(outbox.NewInbox(cfg.DB))
	}
	cfg.Locker = v.locker(cfg.Locker)
	return cfg
}

// payments returns the pay flow's config with its steps, cfg's own or
// their variants.
func (v Variants) payments(cfg payments.Config) payments.Config {
	if v.Orders != nil {
		cfg.Orders = v.Orders(orders.NewStore(cfg.DB))
	}
	if v.Payments != nil {
		cfg.Payments = v.Payments(payments.NewStore(cfg.DB))
	}
	cfg.Locker = v.locker(cfg.Locker)
	return cfg
}

// likes returns the like flow's config with its step, cfg's own or its
// variant.
func (v Variants) likes(cfg likes.Config) likes.Config {
	if v.Likes != nil {
		cfg.Likes = v.Likes(likes.NewStore(cfg.DB))
	}
	cfg.Locker = v.locker(cfg.Locker)
	return cfg
}

// seats returns the seat flows' config with their steps, cfg's own or
// their variants.
func (v Variants) seats(cfg seats.Config) seats.Config {
	if v.Holds != nil {
		cfg.Holds = v.Holds(seats.NewStore(cfg.DB))
	}
	cfg.Locker = v.locker(cfg.Locker)
	return cfg
}

// notify returns the mail consumer's config with its inbox, cfg's own or
// its variant.
func (v Variants) notify(cfg notify.Config) notify.Config {
	if v.Inbox != nil {
		cfg.Inbox = v.Inbox(outbox.NewInbox(cfg.DB))
	}
	return cfg
}

// refunds returns the refund flow's config with its steps, cfg's own or
// their variants. Its lock is one of the refunds' rows, not the Locker.
func (v Variants) refunds(cfg refunds.Config) refunds.Config {
	if v.Orders != nil {
		cfg.Orders = v.Orders(orders.NewStore(cfg.DB))
	}
	if v.Refunds != nil {
		cfg.Refunds = v.Refunds(refunds.NewStore(cfg.DB))
	}
	return cfg
}
