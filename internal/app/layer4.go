package app

import (
	"slices"

	"github.com/shop-example/shop/internal/inventory"
	"github.com/shop-example/shop/internal/likes"
	"github.com/shop-example/shop/internal/orders"
	"github.com/shop-example/shop/internal/payments"
	"github.com/shop-example/shop/internal/platform/outbox"
	"github.com/shop-example/shop/internal/refunds"
	"github.com/shop-example/shop/internal/seats"
)

// Layer4 is every flow's catalogue of the constraints layer 4 is made of:
// what the ablation tests drop, and what the race lab's bare sandbox
// schema goes without (harness/lab).
var Layer4 = slices.Concat(inventory.Constraints, orders.Constraints, payments.Constraints,
	likes.Constraints, seats.Constraints, outbox.Constraints, refunds.Constraints)
