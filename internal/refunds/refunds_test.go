package refunds_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/shop-example/shop/harness/testenv"
	"github.com/shop-example/shop/internal/inventory"
	"github.com/shop-example/shop/internal/orders"
	"github.com/shop-example/shop/internal/platform/layers"
	"github.com/shop-example/shop/internal/platform/problem"
	"github.com/shop-example/shop/internal/refunds"
)

// TestRequest_Validate: the form of a request, before anything is read.
func TestRequest_Validate(t *testing.T) {
	for _, tt := range []struct {
		name string
		req  refunds.Request
		want string // a fragment of the detail, "" when valid
	}{
		{"Empty", refunds.Request{}, ""},
		{"AnAmount", refunds.Request{AmountCents: 1, Reason: strings.Repeat("é", refunds.MaxReason)}, ""},
		{"AReturn", refunds.Request{Items: []inventory.Line{{SKU: "A", Quantity: 100}}}, ""},
		{"ANegativeAmount", refunds.Request{AmountCents: -1}, "amount_cents"},
		{"ALongReason", refunds.Request{Reason: strings.Repeat("x", refunds.MaxReason+1)}, "reason"},
		{"ABadSKU", refunds.Request{Items: []inventory.Line{{SKU: "A B", Quantity: 1}}}, "items[0].sku"},
		{"ARepeatedSKU", refunds.Request{Items: []inventory.Line{{SKU: "A", Quantity: 1}, {SKU: "A", Quantity: 1}}}, "more than once"},
		{"NoQuantity", refunds.Request{Items: []inventory.Line{{SKU: "A"}}}, "items[0].quantity"},
		{"TooMany", refunds.Request{Items: []inventory.Line{{SKU: "A", Quantity: 101}}}, "items[0].quantity"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.req.Validate()
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Validate: %v, want nil", err)
				}
				return
			}
			if p, ok := problem.As(err); !ok || p.Code != problem.Invalid || !strings.Contains(p.Detail, tt.want) {
				t.Fatalf("Validate: %v, want invalid_request mentioning %q", err, tt.want)
			}
		})
	}
}

// A refund of part of a paid order, then of the rest: each given back
// once at the processor, the order holding what its refunds took until
// the last makes it refunded.
func TestRefund_Parts(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	svc := f.service(t, layers.Set{})
	user, o := f.mustPaidOrder(t)
	owner := orders.Refunder{UserID: user}
	ctx := context.Background()

	first, err := svc.Refund(ctx, owner, newKey(), o.ID, refunds.Request{AmountCents: 3000, Reason: "scratched"})
	if err != nil || first.Status != refunds.StatusSucceeded || first.AmountCents != 3000 || first.ProcessorRefundID == "" {
		t.Fatalf("first part: %+v, %v; want 3000 succeeded", first, err)
	}
	if got := f.order(t, o.ID); got.Status != orders.StatusPaid || got.RefundedCents != 3000 {
		t.Fatalf("order after a part: %s with %d refunded, want paid with 3000", got.Status, got.RefundedCents)
	}

	t.Run("BeyondTheRemainder", func(t *testing.T) {
		_, err := svc.Refund(ctx, owner, newKey(), o.ID, refunds.Request{AmountCents: 2001})
		p, _ := problem.As(err)
		if p == nil || p.Code != problem.RefundExceedsRemaining || p.Extra["remaining_cents"] != int64(2000) {
			t.Fatalf("refund past the remainder: %v, want refund_exceeds_remaining with 2000 left", err)
		}
	})
	t.Run("SomeoneElses", func(t *testing.T) {
		if _, err := svc.Refund(ctx, orders.Refunder{UserID: "7f9c2ba4-e88f-4b6b-9d0e-5b7e2c3a1f00"}, newKey(), o.ID, refunds.Request{}); !errors.Is(err, refunds.ErrNotFound) {
			t.Fatalf("another user's refund: %v, want not_found", err)
		}
	})
	t.Run("TheRest", func(t *testing.T) {
		rest, err := svc.Refund(ctx, orders.Refunder{Admin: true}, newKey(), o.ID, refunds.Request{})
		if err != nil || rest.AmountCents != 2000 || rest.RequestedBy != "admin" {
			t.Fatalf("the rest by the admin: %+v, %v; want 2000", rest, err)
		}
		if got := f.order(t, o.ID); got.Status != orders.StatusRefunded || got.RefundedCents != orderTotal {
			t.Fatalf("order after all of it: %s with %d refunded, want refunded", got.Status, got.RefundedCents)
		}
		if _, err := svc.Refund(ctx, owner, newKey(), o.ID, refunds.Request{}); problem.CodeOf(err) != problem.InvalidState {
			t.Fatalf("a refund of a refunded order: %v, want invalid_state", err)
		}
	})
	ch := f.charge(t, o.ID)
	if ch.RefundedCents != orderTotal || len(f.gateway.Refunds(ch.ID)) != 2 {
		t.Fatalf("charge %+v with %d refunds, want all of it given back in two", ch, len(f.gateway.Refunds(ch.ID)))
	}
	if n := f.mustInt(t, `SELECT count(*)::int FROM watermill_outbox WHERE payload->>'destination_topic' = 'order.refunded'`); n != 2 {
		t.Errorf("%d order.refunded in the outbox, want one per refund, 2", n)
	}
	if r := f.books(t); !r.OK() || r.InFlight != 0 {
		t.Error(r)
	}
}

// A return: its units' stock comes back once, when the refund succeeds,
// and a line cannot be returned past what was bought.
func TestRefund_Return(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	svc := f.service(t, layers.Set{})
	user, o := f.mustPaidOrder(t)
	owner := orders.Refunder{UserID: user}
	ctx := context.Background()
	before := f.stock(t, "A")

	r, err := svc.Refund(ctx, owner, newKey(), o.ID, refunds.Request{Items: []inventory.Line{{SKU: "A", Quantity: 1}}})
	if err != nil || r.AmountCents != priceA || len(r.Items) != 1 {
		t.Fatalf("return of one A: %+v, %v; want %d cents", r, err, priceA)
	}
	if got := f.stock(t, "A"); got != before+1 {
		t.Errorf("stock of A %d, want %d: the returned unit back once", got, before+1)
	}
	if got := f.order(t, o.ID); got.Items[0].Returned != 1 || got.RefundedCents != priceA {
		t.Errorf("order after the return: %+v, want one A returned", got)
	}
	_, err = svc.Refund(ctx, owner, newKey(), o.ID, refunds.Request{Items: []inventory.Line{{SKU: "A", Quantity: 2}}})
	if problem.CodeOf(err) != problem.Invalid {
		t.Fatalf("return of two more A: %v, want invalid_request", err)
	}
	// A return at an amount of its own.
	if r, err := svc.Refund(ctx, owner, newKey(), o.ID, refunds.Request{AmountCents: 100, Items: []inventory.Line{{SKU: "B", Quantity: 1}}}); err != nil || r.AmountCents != 100 {
		t.Fatalf("return of B for 100: %+v, %v", r, err)
	}
	if got := f.stock(t, "A"); got != before+1 {
		t.Errorf("stock of A %d after a refused return, want %d", got, before+1)
	}
	if r := f.books(t); !r.OK() {
		t.Error(r)
	}
}

// The same request sent again gets its refund, refunded once; the same
// key for another refund of the order is idempotency_key_reused.
func TestRefund_SameKey(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	svc := f.service(t, layers.Set{})
	user, o := f.mustPaidOrder(t)
	owner := orders.Refunder{UserID: user}
	ctx := context.Background()
	key := newKey()
	req := refunds.Request{AmountCents: 1200, Reason: "late"}

	first, err := svc.Refund(ctx, owner, key, o.ID, req)
	if err != nil {
		t.Fatal(err)
	}
	again, err := svc.Refund(ctx, owner, key, o.ID, req)
	if err != nil || again.ID != first.ID || again.Status != refunds.StatusSucceeded {
		t.Fatalf("the request again: %+v, %v; want refund %s", again, err, first.ID)
	}
	for _, other := range []refunds.Request{{AmountCents: 1300, Reason: "late"}, {AmountCents: 1200}, {Items: []inventory.Line{{SKU: "A", Quantity: 1}}, Reason: "late"}} {
		if _, err := svc.Refund(ctx, owner, key, o.ID, other); problem.CodeOf(err) != problem.IdempotencyReused {
			t.Errorf("the key with %+v: %v, want idempotency_key_reused", other, err)
		}
	}
	if _, err := svc.Refund(ctx, orders.Refunder{Admin: true}, key, o.ID, req); problem.CodeOf(err) != problem.IdempotencyReused {
		t.Errorf("the owner's key from the admin: %v, want idempotency_key_reused", err)
	}
	if n := len(f.gateway.Refunds(f.charge(t, o.ID).ID)); n != 1 {
		t.Errorf("%d refunds at the processor, want 1", n)
	}
	if got := f.order(t, o.ID); got.RefundedCents != 1200 {
		t.Errorf("order holds %d, want 1200", got.RefundedCents)
	}
}

// Only a paid or fulfilled order is refunded; any other is invalid_state,
// and nothing changes.
func TestRefund_NotPaid(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	svc := f.service(t, layers.Set{})
	ctx := context.Background()
	user := testenv.Users(t, f.pool, 1)[0].ID
	o, err := f.orders.Create(ctx, user, newKey(), []inventory.Line{{SKU: "A", Quantity: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Refund(ctx, orders.Refunder{UserID: user}, newKey(), o.ID, refunds.Request{}); problem.CodeOf(err) != problem.InvalidState {
		t.Fatalf("refund of a pending order: %v, want invalid_state", err)
	}
	if n := f.mustInt(t, `SELECT count(*)::int FROM refunds`); n != 0 {
		t.Fatalf("%d refunds recorded, want none", n)
	}
}
