package app

import (
	"github.com/labstack/echo/v4"

	"github.com/shop-example/shop/internal/inventory"
	"github.com/shop-example/shop/internal/orders"
	"github.com/shop-example/shop/internal/payments"
	"github.com/shop-example/shop/internal/platform/layers"
	"github.com/shop-example/shop/internal/platform/outbox"
	"github.com/shop-example/shop/internal/refunds"
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
	// Refunds wraps the refunds' rows, where the refund flow's lock (the
	// order's advisory lock) is one of the steps.
	Refunds func(refunds.RefundRows) refunds.RefundRows
	// Inbox wraps a consumer's inbox.
	Inbox func(outbox.Inbox) outbox.Inbox
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
