package orders_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/shop-example/shop/internal/inventory"
	"github.com/shop-example/shop/internal/orders"
	"github.com/shop-example/shop/internal/platform/problem"
)

func TestValidateLines(t *testing.T) {
	many := make([]inventory.Line, 21)
	for i := range many {
		many[i] = inventory.Line{SKU: "SKU-" + strings.Repeat("x", i+1), Quantity: 1}
	}
	tests := []struct {
		name  string
		lines []inventory.Line
		want  string // "" for valid, else a fragment of the detail
	}{
		{"one item", []inventory.Line{{SKU: "A", Quantity: 1}}, ""},
		{"max quantity", []inventory.Line{{SKU: "A", Quantity: 100}}, ""},
		{"twenty items", many[:20], ""},
		{"no items", nil, "at least one"},
		{"twenty-one items", many, "at most 20"},
		{"quantity zero", []inventory.Line{{SKU: "A", Quantity: 0}}, "quantity"},
		{"quantity negative", []inventory.Line{{SKU: "A", Quantity: -1}}, "quantity"},
		{"quantity 101", []inventory.Line{{SKU: "A", Quantity: 101}}, "quantity"},
		{"duplicate sku", []inventory.Line{{SKU: "A", Quantity: 1}, {SKU: "A", Quantity: 2}}, "more than once"},
		{"empty sku", []inventory.Line{{SKU: "", Quantity: 1}}, "sku"},
		{"bad sku", []inventory.Line{{SKU: "A B", Quantity: 1}}, "sku"},
		{"long sku", []inventory.Line{{SKU: strings.Repeat("a", 65), Quantity: 1}}, "sku"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := orders.ValidateLines(tt.lines)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("ValidateLines: %v, want nil", err)
				}
				return
			}
			p, ok := problem.As(err)
			if !ok || p.Code != problem.Invalid || !strings.Contains(p.Detail, tt.want) {
				t.Fatalf("ValidateLines: %v, want invalid_request mentioning %q", err, tt.want)
			}
		})
	}
}

// The moves of a cancel and of the expiry job, from every state.
func TestChanges_CancelAndExpire(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		from        orders.Status
		cancel      orders.Status // status after Cancel; "" when refused
		cancelNoop  bool
		expireAfter orders.Status // status after Expire past the deadline; "" when refused
	}{
		{orders.StatusPendingPayment, orders.StatusCancelled, false, orders.StatusExpired},
		// A cancel wins over a payment in flight; expiry never does.
		{orders.StatusPaying, orders.StatusCancelled, false, ""},
		{orders.StatusCancelled, orders.StatusCancelled, true, ""},
		{orders.StatusPaid, "", false, ""},
		{orders.StatusFulfilled, "", false, ""},
		{orders.StatusExpired, "", false, ""},
	}
	for _, tt := range tests {
		t.Run(string(tt.from), func(t *testing.T) {
			o := orders.Order{UserID: "u", Status: tt.from, ExpiresAt: now}
			moved, err := orders.Cancel("u", now)(&o)
			switch {
			case tt.cancel == "" && (!errors.Is(err, orders.ErrInvalidState) || o.Status != tt.from):
				t.Errorf("Cancel from %s: %s, %v; want invalid_state and no move", tt.from, o.Status, err)
			case tt.cancel != "" && (err != nil || o.Status != tt.cancel || moved == tt.cancelNoop):
				t.Errorf("Cancel from %s: status %s moved %t err %v", tt.from, o.Status, moved, err)
			}

			o = orders.Order{Status: tt.from, ExpiresAt: now}
			moved, err = orders.Expire(now.Add(time.Second))(&o)
			switch {
			case tt.expireAfter == "" && (!errors.Is(err, orders.ErrInvalidState) || moved):
				t.Errorf("Expire from %s: %v, want invalid_state", tt.from, err)
			case tt.expireAfter != "" && (err != nil || !moved || o.Status != tt.expireAfter):
				t.Errorf("Expire from %s: status %s err %v", tt.from, o.Status, err)
			}
		})
	}
	t.Run("someone else's order", func(t *testing.T) {
		o := orders.Order{UserID: "u", Status: orders.StatusPendingPayment, ExpiresAt: now}
		if moved, err := orders.Cancel("v", now)(&o); !errors.Is(err, orders.ErrNotFound) || moved || o.Status != orders.StatusPendingPayment {
			t.Fatalf("Cancel by another user: %s, %t, %v; want not_found and no move", o.Status, moved, err)
		}
	})
	t.Run("not before its time", func(t *testing.T) {
		o := orders.Order{Status: orders.StatusPendingPayment, ExpiresAt: now}
		if _, err := orders.Expire(now.Add(-time.Second))(&o); !errors.Is(err, orders.ErrInvalidState) {
			t.Fatalf("Expire before the deadline: %v, want invalid_state", err)
		}
	})
}

// The payment's side of the state machine: pending_payment → paying when a
// payment begins (only in time, only with something to charge), → paid
// when it is charged, back to pending_payment when it ends uncharged; and
// the fulfilment's, paid → fulfilled.
func TestChanges_Payment(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	order := func(s orders.Status) orders.Order {
		return orders.Order{UserID: "u", Status: s, TotalCents: 500, ExpiresAt: now.Add(time.Minute)}
	}
	for _, tt := range []struct {
		name string
		o    orders.Order
		want error // nil: the order moves to paying
	}{
		{"Pending", order(orders.StatusPendingPayment), nil},
		{"AlreadyPaying", order(orders.StatusPaying), orders.ErrPaymentInFlight},
		{"Paid", order(orders.StatusPaid), orders.ErrInvalidState},
		{"Cancelled", order(orders.StatusCancelled), orders.ErrInvalidState},
		{"Expired", order(orders.StatusExpired), orders.ErrInvalidState},
		{"NothingToCharge", orders.Order{UserID: "u", Status: orders.StatusPendingPayment, ExpiresAt: now.Add(time.Minute)}, orders.ErrInvalidState},
		{"PastItsTime", orders.Order{UserID: "u", Status: orders.StatusPendingPayment, TotalCents: 500, ExpiresAt: now}, orders.ErrInvalidState},
	} {
		t.Run("BeginPayment/"+tt.name, func(t *testing.T) {
			o := tt.o
			moved, err := orders.BeginPayment("u", now)(&o)
			switch {
			case tt.want == nil && (err != nil || !moved || o.Status != orders.StatusPaying):
				t.Errorf("BeginPayment: status %s, %v; want paying", o.Status, err)
			case tt.want != nil && (!errors.Is(err, tt.want) || moved || o.Status != tt.o.Status):
				t.Errorf("BeginPayment: status %s, %v; want %v and no move", o.Status, err, tt.want)
			}
		})
	}
	t.Run("BeginPayment/SomeoneElses", func(t *testing.T) {
		o := order(orders.StatusPendingPayment)
		if _, err := orders.BeginPayment("v", now)(&o); !errors.Is(err, orders.ErrNotFound) || o.Status != orders.StatusPendingPayment {
			t.Fatalf("BeginPayment by another user: %s, %v; want not_found and no move", o.Status, err)
		}
	})
	for _, from := range orders.Statuses {
		t.Run("Pay/"+string(from), func(t *testing.T) {
			o := order(from)
			moved, err := orders.Pay(now.Add(time.Hour))(&o) // late is fine: the payment began in time
			if from == orders.StatusPaying {
				if err != nil || !moved || o.Status != orders.StatusPaid {
					t.Errorf("Pay from paying: status %s, %v; want paid", o.Status, err)
				}
				return
			}
			if !errors.Is(err, orders.ErrInvalidState) || moved || o.Status != from {
				t.Errorf("Pay from %s: status %s, %v; want invalid_state and no move", from, o.Status, err)
			}
		})
		t.Run("PaymentEnded/"+string(from), func(t *testing.T) {
			o := order(from)
			moved, err := orders.PaymentEnded(now)(&o)
			want := from
			if from == orders.StatusPaying {
				want = orders.StatusPendingPayment
			}
			if err != nil || o.Status != want || moved != (from == orders.StatusPaying) {
				t.Errorf("PaymentEnded from %s: status %s, moved %v, %v; want %s", from, o.Status, moved, err, want)
			}
		})
		t.Run("Fulfil/"+string(from), func(t *testing.T) {
			o := order(from)
			moved, err := orders.Fulfil(now)(&o)
			switch from {
			case orders.StatusPaid:
				if err != nil || !moved || o.Status != orders.StatusFulfilled {
					t.Errorf("Fulfil from paid: status %s, %v; want fulfilled", o.Status, err)
				}
			case orders.StatusFulfilled:
				if err != nil || moved || o.Status != from {
					t.Errorf("Fulfil from fulfilled: status %s, moved %v, %v; want no move", o.Status, moved, err)
				}
			default:
				if !errors.Is(err, orders.ErrInvalidState) || moved || o.Status != from {
					t.Errorf("Fulfil from %s: status %s, %v; want invalid_state and no move", from, o.Status, err)
				}
			}
		})
	}
}
