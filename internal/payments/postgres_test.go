package payments_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shop-example/shop/harness/testenv"
	"github.com/shop-example/shop/internal/orders"
	"github.com/shop-example/shop/internal/payments"
)

// TestStore_SettleOnce is layer 3 with layer 2 behind it: settlers that read the same
// processing payment (the request, a reconciler on another replica, one
// whose lock expired) all try to record the outcome and move the order.
// The version check lets exactly one of them write; the others change
// nothing, and the order moves once.
func TestStore_SettleOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("needs PostgreSQL")
	}
	f := newFixture(t)
	store := payments.NewStore(f.pool)
	_, ids := f.mustCreateOrders(t, 1)
	now := f.clock.Now().Truncate(time.Microsecond)
	p, begun := begin(t, f.pool, ids[0], now)

	const settlers = 10
	var won, lost atomic.Int64
	testenv.Together(settlers, func(i int) {
		paid := p
		if err := paid.Succeed(fmt.Sprintf("ch_settler_%d", i), now); err != nil {
			t.Errorf("Succeed: %v", err)
			return
		}
		err := settle(context.Background(), f.pool, store, paid, p.Version, begun, orders.Pay(now))
		switch {
		case err == nil:
			won.Add(1)
		case errors.Is(err, payments.ErrVersionConflict):
			// The payment's own row refuses the losers, before any of
			// them asks the order (which would tell them it is paid).
			lost.Add(1)
		default:
			t.Errorf("settler %d: %v", i, err)
		}
	})
	if won.Load() != 1 || lost.Load() != settlers-1 {
		t.Errorf("%d settlers wrote, %d were refused; want 1 and %d", won.Load(), lost.Load(), settlers-1)
	}
	if n := f.mustInt(t, `SELECT version FROM payments WHERE id = $1`, p.ID); n != 2 {
		t.Errorf("payment version %d, want 2: settled once", n)
	}
	if n := f.mustInt(t, `SELECT version FROM orders WHERE id = $1`, ids[0]); n != 3 {
		t.Errorf("order version %d, want 3: moved to paying by the payment's begin, to paid once", n)
	}
	if n := f.mustInt(t, `SELECT count(*) FROM payments WHERE id = $1 AND status = 'succeeded' AND charge_id LIKE 'ch_settler_%'`, p.ID); n != 1 {
		t.Errorf("%d succeeded payments, want 1", n)
	}
}

// TestStore_ChargeSettlesOnePayment is layer 4 behind the settlement: one
// gateway charge can settle one payment, never two. A second settlement
// that names the same charge fails with ErrChargeSettled, and takes its
// order move down with it: the other order stays paying, its payment
// processing. Without payments_charge_id_key both settle.
func TestStore_ChargeSettlesOnePayment(t *testing.T) {
	if testing.Short() {
		t.Skip("needs PostgreSQL")
	}
	for _, tc := range []struct {
		name       string
		drop       bool
		wantBroken bool
	}{
		{name: "Constraint"},
		{name: "WithoutConstraint", drop: true, wantBroken: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			if tc.drop {
				f.mustDrop(t, payments.ConstraintChargeID)
			}
			store := payments.NewStore(f.pool)
			_, ids := f.mustCreateOrders(t, 2)
			now := f.clock.Now().Truncate(time.Microsecond)
			first, firstOrder := begin(t, f.pool, ids[0], now)
			second, secondOrder := begin(t, f.pool, ids[1], now)
			known := map[string]orders.Order{first.ID: firstOrder, second.ID: secondOrder}
			pay := func(p payments.Payment) error {
				if err := p.Succeed("ch_shared", now); err != nil {
					return err
				}
				return payments.SettleError(settle(context.Background(), f.pool, store, p, p.Version, known[p.ID], orders.Pay(now)))
			}
			if err := pay(first); err != nil {
				t.Fatalf("first settlement: %v", err)
			}
			err := pay(second)
			carrying := f.mustInt(t, `SELECT count(*) FROM payments WHERE charge_id = 'ch_shared'`)
			if tc.wantBroken {
				if err != nil || carrying != 2 {
					t.Fatalf("without the constraint: second settlement %v, %d payments carry the charge; want both settled", err, carrying)
				}
				t.Log("without payments_charge_id_key one charge settled two payments and paid two orders")
				return
			}
			if !errors.Is(err, payments.ErrChargeSettled) {
				t.Fatalf("second settlement = %v, want ErrChargeSettled", err)
			}
			if carrying != 1 {
				t.Errorf("%d payments carry the charge, want 1", carrying)
			}
			if n := f.mustInt(t, `SELECT count(*) FROM orders WHERE id = $1 AND status = 'paying'`, ids[1]); n != 1 {
				t.Error("the second order moved although its settlement failed")
			}
			if n := f.mustInt(t, `SELECT count(*) FROM payments WHERE id = $1 AND status = 'processing'`, second.ID); n != 1 {
				t.Error("the second payment left processing although its settlement failed")
			}
		})
	}
}
