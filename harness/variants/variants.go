package variants

import (
	"sync"

	"github.com/shop-example/shop/internal/app"
	"github.com/shop-example/shop/internal/likes"
	"github.com/shop-example/shop/internal/orders"
	"github.com/shop-example/shop/internal/payments"
	"github.com/shop-example/shop/internal/platform/layers"
	"github.com/shop-example/shop/internal/platform/outbox"
	"github.com/shop-example/shop/internal/refunds"
	"github.com/shop-example/shop/internal/seats"
)

// For returns the variants that take off's layers off every flow of an
// app (app.Deps.Variants), each telling probe when it took its layer off.
// naive is how an order takes stock without the version layer
// (Unconditional, ReadCheckWrite; "" is Unconditional), or StaleLook. The constraints
// are not among them: a test drops them from its schema.
func For(off layers.Set, naive string, probe *layers.Probe) app.Variants {
	var v app.Variants
	if isOff(off, layers.Idempotency) {
		v.Keys = NoKeys(probe)
		v.Inbox = func(outbox.Inbox) outbox.Inbox { return NoInbox{Probe: probe} }
	}
	if isOff(off, layers.Lock) {
		v.Locker = func(layers.Locker) layers.Locker { return NoLock{Probe: probe} }
	}
	if isOff(off, layers.Lock) || isOff(off, layers.State) || isOff(off, layers.Version) {
		v.Orders = func(rows orders.OrderRows) orders.OrderRows { return Orders(rows, off, probe) }
	}
	if naive == StaleLook && v.Orders != nil {
		rows, first := v.Orders, &sync.Map{}
		v.Orders = func(r orders.OrderRows) orders.OrderRows { return &StaleLookOrders{OrderRows: rows(r), First: first} }
	}
	if isOff(off, layers.State) || isOff(off, layers.Version) {
		v.Payments = func(rows payments.PaymentRows) payments.PaymentRows { return Payments(rows, off, probe) }
	}
	if isOff(off, layers.Lock) || isOff(off, layers.State) || isOff(off, layers.Version) {
		v.Holds = func(rows seats.HoldRows) seats.HoldRows { return Holds(rows, off, probe) }
	}
	if isOff(off, layers.Version) {
		v.Stock = func(s orders.Stock) orders.Stock { return Stock(s, off, naive, probe) }
	}
	if isOff(off, layers.Lock) || isOff(off, layers.State) || isOff(off, layers.Version) {
		v.Likes = func(rows likes.LikeRows) likes.LikeRows { return Likes(rows, off, probe) }
	}
	if isOff(off, layers.Lock) || isOff(off, layers.Version) {
		v.Refunds = func(rows refunds.RefundRows) refunds.RefundRows { return Refunds(rows, off, probe) }
	}
	return v
}
