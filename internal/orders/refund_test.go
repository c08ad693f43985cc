package orders_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/shop-example/shop/internal/inventory"
	"github.com/shop-example/shop/internal/orders"
	"github.com/shop-example/shop/internal/platform/problem"
)

// refundable is a paid order of u: 2 × A at 1500 and 1 × B at 2000, 5000
// in all, of which refunded is held by refunds and returnedA units of A
// were sent back.
func refundable(status orders.Status, refunded int64, returnedA int) orders.Order {
	return orders.Order{UserID: "u", Status: status, TotalCents: 5000, RefundedCents: refunded, Version: 3,
		Items: []orders.Item{{SKU: "A", Quantity: 2, UnitPriceCents: 1500, Returned: returnedA}, {SKU: "B", Quantity: 1, UnitPriceCents: 2000}}}
}

// The refund's rule, layer 2: what a refund may ask of an order as read,
// and what it holds of it once it may.
func TestChanges_Refund(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	owner := orders.Refunder{UserID: "u"}
	a1 := []inventory.Line{{SKU: "A", Quantity: 1}}
	for _, tt := range []struct {
		name     string
		o        orders.Order
		ask      orders.RefundAsk
		refunded int64  // RefundedCents once moved
		returned int    // units of A returned once moved
		code     string // the refusal's code, "" when it moves
		detail   string // a fragment of the refusal's detail
	}{
		{"Amount", refundable(orders.StatusPaid, 0, 0), orders.RefundAsk{By: owner, AmountCents: 3000}, 3000, 0, "", ""},
		{"Fulfilled", refundable(orders.StatusFulfilled, 0, 0), orders.RefundAsk{By: owner, AmountCents: 1}, 1, 0, "", ""},
		{"TheRemainder", refundable(orders.StatusPaid, 1200, 0), orders.RefundAsk{By: owner}, 5000, 0, "", ""},
		{"AReturnAtItsPrice", refundable(orders.StatusPaid, 0, 0), orders.RefundAsk{By: owner, Returns: a1}, 1500, 1, "", ""},
		{"AReturnAtAnAmount", refundable(orders.StatusPaid, 0, 1), orders.RefundAsk{By: owner, AmountCents: 700, Returns: a1}, 700, 2, "", ""},
		{"TheAdmin", refundable(orders.StatusPaid, 0, 0), orders.RefundAsk{By: orders.Refunder{Admin: true}, AmountCents: 10}, 10, 0, "", ""},
		{"AllThatIsLeft", refundable(orders.StatusPaid, 4000, 0), orders.RefundAsk{By: owner, AmountCents: 1000}, 5000, 0, "", ""},

		{"BeyondTheRemainder", refundable(orders.StatusPaid, 2000, 0), orders.RefundAsk{By: owner, AmountCents: 3001}, 0, 0, "refund_exceeds_remaining", "3000 of its 5000"},
		{"AReturnBeyondTheRemainder", refundable(orders.StatusPaid, 4000, 0), orders.RefundAsk{By: owner, Returns: a1}, 0, 0, "refund_exceeds_remaining", ""},
		{"NothingLeft", refundable(orders.StatusPaid, 5000, 0), orders.RefundAsk{By: owner}, 0, 0, "invalid_request", "nothing is left"},
		{"ReturnedBefore", refundable(orders.StatusPaid, 0, 2), orders.RefundAsk{By: owner, Returns: a1}, 0, 0, "invalid_request", "2 returned before"},
		{"NotInTheOrder", refundable(orders.StatusPaid, 0, 0), orders.RefundAsk{By: owner, Returns: []inventory.Line{{SKU: "C", Quantity: 1}}}, 0, 0, "invalid_request", "not in the order"},
		{"MoreThanBought", refundable(orders.StatusPaid, 0, 0), orders.RefundAsk{By: owner, Returns: []inventory.Line{{SKU: "B", Quantity: 2}}}, 0, 0, "invalid_request", "1 bought"},
		{"ANegativeAmount", refundable(orders.StatusPaid, 0, 0), orders.RefundAsk{By: owner, AmountCents: -5}, 0, 0, "invalid_request", "amount_cents"},
		{"Refunded", refundable(orders.StatusRefunded, 5000, 0), orders.RefundAsk{By: owner, AmountCents: 1}, 0, 0, "invalid_state", "refunded"},
		{"Pending", refundable(orders.StatusPendingPayment, 0, 0), orders.RefundAsk{By: owner}, 0, 0, "invalid_state", "pending_payment"},
		{"Paying", refundable(orders.StatusPaying, 0, 0), orders.RefundAsk{By: owner}, 0, 0, "invalid_state", "paying"},
		{"Cancelled", refundable(orders.StatusCancelled, 0, 0), orders.RefundAsk{By: owner}, 0, 0, "invalid_state", "cancelled"},
		{"Expired", refundable(orders.StatusExpired, 0, 0), orders.RefundAsk{By: owner}, 0, 0, "invalid_state", "expired"},
		{"SomeoneElses", refundable(orders.StatusPaid, 0, 0), orders.RefundAsk{By: orders.Refunder{UserID: "v"}, AmountCents: 1}, 0, 0, "not_found", ""},
		{"NoOne", refundable(orders.StatusPaid, 0, 0), orders.RefundAsk{AmountCents: 1}, 0, 0, "not_found", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			o := tt.o
			o.Items = append([]orders.Item(nil), tt.o.Items...)
			moved, err := orders.Refund(tt.ask, now)(&o)
			if tt.code != "" {
				p, _ := problem.As(err)
				if p == nil || string(p.Code) != tt.code || !strings.Contains(p.Detail, tt.detail) || moved || !reflect.DeepEqual(o, tt.o) {
					t.Fatalf("Refund: moved %t, %v, order %+v; want %s mentioning %q and the order as it was", moved, err, o, tt.code, tt.detail)
				}
				return
			}
			if err != nil || !moved || o.RefundedCents != tt.refunded || o.Items[0].Returned != tt.returned ||
				o.Status != tt.o.Status || !o.UpdatedAt.Equal(now) {
				t.Fatalf("Refund: moved %t, %v, order %+v; want %d cents held, %d of A returned", moved, err, o, tt.refunded, tt.returned)
			}
		})
	}
	t.Run("RemainingCents", func(t *testing.T) {
		o := refundable(orders.StatusPaid, 4500, 0)
		_, err := orders.Refund(orders.RefundAsk{By: owner, AmountCents: 600}, now)(&o)
		p, _ := problem.As(err)
		if !errors.Is(err, orders.ErrRefundExceedsRemaining) || p.Extra["remaining_cents"] != int64(500) {
			t.Fatalf("Refund beyond the remainder: %v %v, want refund_exceeds_remaining with remaining_cents 500", err, p)
		}
	})
}

// The settle's side: a refund that went through leaves the order paid
// until its refunds that succeeded cover the whole total; one the
// processor refused gives back what it held. Either way the order is
// written (moved), so that its version orders two settles.
func TestChanges_RefundSettled(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		name      string
		o         orders.Order
		succeeded int64
		want      orders.Status
	}{
		{"Part", refundable(orders.StatusPaid, 3000, 0), 3000, orders.StatusPaid},
		{"AllOfIt", refundable(orders.StatusPaid, 5000, 0), 5000, orders.StatusRefunded},
		{"AllOfItShipped", refundable(orders.StatusFulfilled, 5000, 0), 5000, orders.StatusRefunded},
		// Another refund still holds 2000 in flight.
		{"AllHeldNotAllSucceeded", refundable(orders.StatusPaid, 5000, 0), 3000, orders.StatusPaid},
	} {
		t.Run("Succeeded/"+tt.name, func(t *testing.T) {
			o := tt.o
			moved, err := orders.RefundSucceeded(tt.succeeded, now)(&o)
			if err != nil || !moved || o.Status != tt.want || o.RefundedCents != tt.o.RefundedCents {
				t.Fatalf("RefundSucceeded: %s, moved %t, %v; want %s", o.Status, moved, err, tt.want)
			}
		})
	}
	for _, from := range orders.Statuses {
		if from.Paid() {
			continue
		}
		t.Run("Succeeded/"+string(from), func(t *testing.T) {
			o := refundable(from, 5000, 0)
			if moved, err := orders.RefundSucceeded(5000, now)(&o); !errors.Is(err, orders.ErrInvalidState) || moved {
				t.Fatalf("RefundSucceeded of a %s order: moved %t, %v; want invalid_state", from, moved, err)
			}
		})
	}
	t.Run("Failed", func(t *testing.T) {
		o := refundable(orders.StatusPaid, 4500, 2)
		moved, err := orders.RefundFailed(3000, []inventory.Line{{SKU: "A", Quantity: 2}}, now)(&o)
		if err != nil || !moved || o.RefundedCents != 1500 || o.Items[0].Returned != 0 || o.Status != orders.StatusPaid {
			t.Fatalf("RefundFailed: %+v, moved %t, %v; want 1500 held and nothing of A returned", o, moved, err)
		}
	})
	t.Run("FailedHoldingNothing", func(t *testing.T) {
		o := refundable(orders.StatusPaid, 100, 0)
		if moved, err := orders.RefundFailed(3000, nil, now)(&o); !errors.Is(err, orders.ErrInvalidState) || moved {
			t.Fatalf("RefundFailed of more than is held: moved %t, %v; want invalid_state", moved, err)
		}
	})
}
