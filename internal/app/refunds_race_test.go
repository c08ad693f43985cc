package app_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shop-example/shop/harness/ablation"
	"github.com/shop-example/shop/harness/apptest"
	"github.com/shop-example/shop/harness/books"
	"github.com/shop-example/shop/harness/gateway"
	"github.com/shop-example/shop/harness/testenv"
	"github.com/shop-example/shop/internal/app"
	"github.com/shop-example/shop/internal/orders"
	"github.com/shop-example/shop/internal/platform/layers"
	"github.com/shop-example/shop/internal/platform/outbox"
	"github.com/shop-example/shop/internal/refunds"
)

// The refund races run with the processor's own check off
// (SHOP_GATEWAY_REFUND_LIMIT=off): it refunds whatever it is asked, so
// what keeps the money within what was captured is the shop's layers
// alone.
var refundVars = map[string]string{"SHOP_GATEWAY_REFUND_LIMIT": "off"}

// refundDrops are the constraints the refund flow's layer 4 is made of,
// dropped with it.
var refundDrops = []string{orders.ConstraintRefundedWithinTotal, orders.ConstraintReturnedWithinQuantity,
	refunds.ConstraintRequestKey, refunds.ConstraintProcessorRefundID, outbox.ConstraintOnePerEvent}

// refundRace runs a race twice over: with every layer on, where what it
// finds broken must be nothing and the work it did must be all of it;
// and with off's layers taken off (their variants, the constraints
// dropped), where it must break, within ablation.Attempts runs, each on
// fresh data, and every layer off must have been taken off during the
// race. The race returns what it found broken, one line each, and how
// much of its work was done; it resets the probe as its race begins.
func refundRace(t *testing.T, off layers.Set, want int, race func(t *testing.T, e *apptest.Env, probe *layers.Probe) (broken []string, done int)) {
	t.Helper()
	if testing.Short() {
		t.Skip("races real PostgreSQL and a gateway over two replicas")
	}
	for _, tc := range []struct {
		name string
		off  layers.Set
	}{{"AllLayers", layers.Set{}}, {"Without_" + strings.ReplaceAll(strings.TrimSuffix(off.String(), " off"), ", ", "_"), off}} {
		t.Run(strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) {
			for attempt := 1; attempt <= ablation.Attempts; attempt++ {
				var probe layers.Probe
				e := apptest.NewAblationWith(t, ablation.Row{Layers: tc.off.Probed(&probe)}, refundVars, app.Deps{}, refundDrops...)
				broken, done := race(t, e, &probe)
				if left := e.Count(t, `SELECT count(*)::int FROM refunds WHERE status = 'processing'`); left > 0 && len(tc.off.Taken()) == 0 {
					t.Errorf("%d refunds left processing with every layer on", left)
				}
				if len(tc.off.Taken()) == 0 {
					if len(broken) > 0 {
						t.Errorf("with every layer on, broken: %s", strings.Join(broken, "; "))
					}
					if done < want {
						t.Errorf("%d of the work done, want %d: a race that holds must show work", done, want)
					}
					e.AssertBooks(t)
					return
				}
				for _, l := range tc.off.Taken() {
					if l != layers.Constraint && !probe.Asked(l) {
						t.Errorf("the %s layer was never taken off during the race", l)
					}
				}
				if len(broken) > 0 {
					t.Logf("with %s, run %d broke, as it must: %s", tc.off, attempt, strings.Join(broken[:min(len(broken), 6)], "; "))
					return
				}
				t.Logf("with %s, run %d found nothing broken; again", tc.off, attempt)
			}
			t.Errorf("with %s nothing broke in %d runs: the race does not show what the layers prevent", tc.off, ablation.Attempts)
		})
	}
}

// moneyBroken is what the books say is wrong of the money of the orders,
// plus, per order, a processor that gave back more than it took and a
// request key with more than one refund: the invariant of every refund
// race.
func moneyBroken(t *testing.T, e *apptest.Env) []string {
	t.Helper()
	var broken []string
	b, err := books.Gather(context.Background(), e.DB, nil, e.Cfg.GatewayURL)
	if err != nil {
		t.Fatal(err)
	}
	r := b.Audit()
	broken = append(broken, r.Problems...)
	if n := e.Count(t, `SELECT count(*)::int FROM (SELECT 1 FROM refunds GROUP BY order_id, request_key HAVING count(*) > 1) k`); n > 0 {
		broken = append(broken, fmt.Sprintf("%d request keys with more than one refund", n))
	}
	return broken
}

// made: the refund was made, answered 201; or 202, processing, when the
// processor did not answer in time (under load it may not): the race
// then settles it with the reconciler (e.SettleLeftovers) before it
// counts what the processor gave back.
func made(res apptest.Response) bool {
	return res.Status == http.StatusCreated || res.Status == http.StatusAccepted
}

// processorRefunded is what the processor gave back of order id's charges.
func processorRefunded(e *apptest.Env, id string) int64 {
	var n int64
	for _, c := range e.Gateway.Charges(id) {
		n += c.RefundedCents
	}
	return n
}

// TestRefunds_AgentsRace: ten support agents, with the admin token and a
// key each, refund 60 % of one order at once over two replicas, for four
// orders. One refund per order goes through; the other nine are told
// refund_exceeds_remaining, and the processor gave back 60 % once. With
// the lock, the version check and the constraints off, agents read the
// order before any of them commits, and each one's 60 % is refunded.
func TestRefunds_AgentsRace(t *testing.T) {
	const orders, agents, total, part = 4, 10, 10000, 6000
	refundRace(t, layers.Off(layers.Lock, layers.Version, layers.Constraint), orders, func(t *testing.T, e *apptest.Env, probe *layers.Probe) ([]string, int) {
		apptest.MustCreateProduct(t, e.R(0), "RF-AGENTS", total, orders)
		ids := make([]string, orders)
		for i := range ids {
			_, o := paidOrder(t, e, i, apptest.Line{SKU: "RF-AGENTS", Quantity: 1})
			ids[i] = o.ID
		}
		e.Warm(t, 16)
		probe.Reset()
		answers := make([]apptest.Response, orders*agents)
		testenv.Together(orders*agents, func(i int) {
			answers[i] = apptest.UntilNotBusy(t, func(attempt int) apptest.Response {
				return refundReq(t, e.R(i+attempt), apptest.AdminToken, ids[i%orders], map[string]any{"amount_cents": part, "reason": "agent"}, fmt.Sprintf("agent-%d", i))
			})
		})
		e.SettleLeftovers(t)
		var broken []string
		done := 0
		for o, id := range ids {
			created, exceeded := 0, 0
			for i := o; i < len(answers); i += orders {
				switch {
				case made(answers[i]):
					created++
				case answers[i].Code() == "refund_exceeds_remaining":
					exceeded++
				default:
					t.Errorf("agent %d: %s", i, answers[i])
				}
			}
			if created != 1 || exceeded != agents-1 {
				broken = append(broken, fmt.Sprintf("order %s: %d refunds made, %d refused", id, created, exceeded))
			}
			if got := processorRefunded(e, id); got > total || got != int64(created)*part {
				broken = append(broken, fmt.Sprintf("order %s: the processor gave back %d of %d", id, got, total))
			} else if created == 1 {
				done++
			}
		}
		return append(broken, moneyBroken(t, e)...), done
	})
}

// TestRefunds_DoubleClickAndSecondTab: the owner double-clicks a refund
// of 60 % (three copies of one request, one key) and, in a second tab,
// asks for the same 60 % with a key of its own; six orders, over two
// replicas. Each key refunds at most once, its copies get one answer,
// and one of the two requests is refused. With the key, the lock, the
// version check and the constraints off, each copy of the click refunds.
func TestRefunds_DoubleClickAndSecondTab(t *testing.T) {
	const orders, copies, total, part = 6, 3, 8000, 4800
	refundRace(t, layers.Off(layers.Idempotency, layers.Lock, layers.Version, layers.Constraint), orders, func(t *testing.T, e *apptest.Env, probe *layers.Probe) ([]string, int) {
		apptest.MustCreateProduct(t, e.R(0), "RF-CLICK", total, orders)
		users, ids, keys := make([]apptest.User, orders), make([]string, orders), make([]string, orders)
		for i := range ids {
			var o apptest.Order
			users[i], o = paidOrder(t, e, i, apptest.Line{SKU: "RF-CLICK", Quantity: 1})
			ids[i], keys[i] = o.ID, apptest.NewKey()
		}
		e.Warm(t, 16)
		probe.Reset()
		answers := make([]apptest.Response, orders*(copies+1))
		testenv.Together(orders*(copies+1), func(i int) {
			o, click := i%orders, i/orders
			key := keys[o]
			if click == copies {
				key = apptest.NewKey() // the second tab
			}
			answers[i] = apptest.UntilNotBusy(t, func(attempt int) apptest.Response {
				return refundReq(t, e.R(i+attempt), users[o].Token, ids[o], map[string]any{"amount_cents": part}, key)
			})
		})
		e.SettleLeftovers(t)
		var broken []string
		done := 0
		for o, id := range ids {
			bodies := map[string]bool{}
			created := 0
			for c := range copies + 1 {
				res := answers[c*orders+o]
				switch {
				case made(res):
					created++
					if c < copies {
						bodies[string(res.Body)] = true
					}
				case res.Code() != "refund_exceeds_remaining":
					t.Errorf("order %s, click %d: %s", id, c, res)
				}
			}
			if len(bodies) > 1 {
				broken = append(broken, fmt.Sprintf("order %s: the click's copies got %d different refunds", id, len(bodies)))
			}
			if n := e.Count(t, `SELECT count(*)::int FROM refunds WHERE order_id = $1 AND status = 'succeeded'`, id); n != 1 {
				broken = append(broken, fmt.Sprintf("order %s: %d refunds succeeded, want 1", id, n))
			} else if processorRefunded(e, id) == part {
				done++
			}
			if created == 0 {
				broken = append(broken, fmt.Sprintf("order %s: nobody was told 201 or 202", id))
			}
		}
		return append(broken, moneyBroken(t, e)...), done
	})
}

// TestRefunds_FullRacesPartial: a refund of all that is left (the owner)
// races a refund of 30 % (the admin), for six orders. Either the partial
// one goes first and the full one takes the 70 % left, and the order is
// refunded; or the full one goes first and the partial one is refused.
// Never more than the total. Without the lock, the version check and the
// constraints, both read the order untouched and 130 % is refunded.
func TestRefunds_FullRacesPartial(t *testing.T) {
	const orders, total, part = 6, 9000, 2700
	refundRace(t, layers.Off(layers.Lock, layers.Version, layers.Constraint), orders, func(t *testing.T, e *apptest.Env, probe *layers.Probe) ([]string, int) {
		apptest.MustCreateProduct(t, e.R(0), "RF-FULL", total, orders)
		users, ids := make([]apptest.User, orders), make([]string, orders)
		for i := range ids {
			var o apptest.Order
			users[i], o = paidOrder(t, e, i, apptest.Line{SKU: "RF-FULL", Quantity: 1})
			ids[i] = o.ID
		}
		e.Warm(t, 16)
		probe.Reset()
		answers := make([]apptest.Response, 2*orders)
		testenv.Together(2*orders, func(i int) {
			o := i % orders
			token, body := users[o].Token, map[string]any{}
			if i >= orders {
				token, body = apptest.AdminToken, map[string]any{"amount_cents": part}
			}
			answers[i] = apptest.UntilNotBusy(t, func(attempt int) apptest.Response {
				return refundReq(t, e.R(i+attempt), token, ids[o], body, fmt.Sprintf("k-%d", i))
			})
		})
		e.SettleLeftovers(t)
		var broken []string
		done := 0
		for o, id := range ids {
			full, partial := answers[o], answers[orders+o]
			if !made(full) {
				t.Errorf("order %s: the full refund got %s", id, full)
			}
			got := processorRefunded(e, id)
			switch {
			case got > total:
				broken = append(broken, fmt.Sprintf("order %s: the processor gave back %d of %d", id, got, total))
			case made(partial) && got == total:
				if st := refundOrder(t, e.R(o), users[o].Token, id).Status; st != "refunded" {
					broken = append(broken, fmt.Sprintf("order %s: refunded whole but %s", id, st))
				}
				done++
			case got == total && (partial.Code() == "refund_exceeds_remaining" || partial.Code() == "invalid_state"):
				done++
			default:
				broken = append(broken, fmt.Sprintf("order %s: partial %s, %d refunded", id, partial, got))
			}
		}
		return append(broken, moneyBroken(t, e)...), done
	})
}

// TestRefunds_RaceFulfilment: a paid order's refund of 40 % races its
// fulfilment, for eight orders: while each refund is at the processor
// (begun, its amount held on the order, not yet settled), two copies of
// order.paid are fulfilled at once, one by each replica's consumer. Each
// order is shipped once and ends fulfilled, with its refund held. The
// locks are not the same (the refund's advisory lock is refund:{id}, the
// fulfilment's order:{id}): the version check is what orders the two
// writes. Without it, the refund's settle writes the order as its begin
// left it, paid, over the fulfilment.
func TestRefunds_RaceFulfilment(t *testing.T) {
	const orders, total, part = 8, 5000, 2000
	refundRace(t, layers.Off(layers.Version), orders, func(t *testing.T, e *apptest.Env, probe *layers.Probe) ([]string, int) {
		apptest.MustCreateProduct(t, e.R(0), "RF-SHIP", total, orders)
		users, ids := make([]apptest.User, orders), make([]string, orders)
		orderOf := map[string]string{} // charge id → order id
		for i := range ids {
			var o apptest.Order
			users[i], o = paidOrder(t, e, i, apptest.Line{SKU: "RF-SHIP", Quantity: 1})
			ids[i] = o.ID
			for _, c := range e.Gateway.Charges(o.ID) {
				orderOf[c.ID] = o.ID
			}
		}
		// The fulfilment lands while the refund is at the processor: the
		// processor runs it before it decides the refund.
		var once sync.Map
		e.Gateway.BeforeRefund(func(chargeID string) {
			id := orderOf[chargeID]
			if _, again := once.LoadOrStore(id, true); again || id == "" {
				return
			}
			ev, err := outbox.New(outbox.OrderPaid, id, time.Now(), map[string]string{"order_id": id})
			if err != nil {
				t.Error(err)
				return
			}
			testenv.Together(2, func(r int) {
				if _, err := e.R(r).App.Orders.Fulfil(context.Background(), ev); err != nil {
					t.Errorf("fulfil order %s: %v", id, err)
				}
			})
		})
		t.Cleanup(func() { e.Gateway.BeforeRefund(nil) })
		e.Warm(t, 16)
		probe.Reset()
		testenv.Together(orders, func(o int) {
			res := apptest.UntilNotBusy(t, func(attempt int) apptest.Response {
				return refundReq(t, e.R(o+attempt), users[o].Token, ids[o], map[string]any{"amount_cents": part}, fmt.Sprintf("ship-%d", o))
			})
			if !made(res) {
				t.Errorf("refund of order %s: %s", ids[o], res)
			}
		})
		e.SettleLeftovers(t)
		var broken []string
		done := 0
		for o, id := range ids {
			got := refundOrder(t, e.R(o), users[o].Token, id)
			shipped := e.Count(t, `SELECT count(*)::int FROM fulfilments WHERE order_id = $1`, id)
			switch {
			case shipped != 1:
				broken = append(broken, fmt.Sprintf("order %s shipped %d times", id, shipped))
			case got.Status != "fulfilled":
				broken = append(broken, fmt.Sprintf("order %s was shipped and reads %s", id, got.Status))
			case got.RefundedCents != part || processorRefunded(e, id) != part:
				broken = append(broken, fmt.Sprintf("order %s holds %d, the processor gave back %d", id, got.RefundedCents, processorRefunded(e, id)))
			default:
				done++
			}
		}
		return append(broken, moneyBroken(t, e)...), done
	})
}

// TestRefunds_RacePaymentSettle: refunds of half of each of six orders
// are asked for, again and again, while the orders' payments are in
// flight (pm_card_slow, its answers held back) and as the payments
// settle. A refund of an order being paid is refused (invalid_state),
// and the first one after the payment settles goes through: no refund
// begins before the charge it gives back is recorded. Without the state
// rule a refund begins on the order being paid, writing it paid before
// its payment did.
func TestRefunds_RacePaymentSettle(t *testing.T) {
	const orders, total, part = 6, 4000, 2000
	refundRace(t, layers.Off(layers.State), orders, func(t *testing.T, e *apptest.Env, probe *layers.Probe) ([]string, int) {
		apptest.MustCreateProduct(t, e.R(0), "RF-SETTLE", total, orders)
		users, ids := make([]apptest.User, orders), make([]string, orders)
		var paying sync.WaitGroup
		for i := range ids {
			users[i] = apptest.MustCreateUser(t, e.R(i), "settling")
			ids[i] = apptest.MustCreateOrder(t, e.R(i), users[i].Token, apptest.Line{SKU: "RF-SETTLE", Quantity: 1}).ID
			paying.Go(func() {
				res := payReq(t, e.R(i), users[i].Token, ids[i], gateway.MethodSlow, apptest.NewKey())
				if res.Status != http.StatusCreated && res.Status != http.StatusAccepted {
					t.Errorf("pay order %s: %s", ids[i], res)
				}
			})
		}
		e.Warm(t, 16)
		probe.Reset()
		var refunding sync.WaitGroup
		answers := make([]apptest.Response, orders)
		for o := range orders {
			refunding.Go(func() {
				for attempt := 0; attempt < 400; attempt++ {
					// A refusal is its key's answer: the client asks
					// again with a new one.
					answers[o] = refundReq(t, e.R(o+attempt), users[o].Token, ids[o], map[string]any{"amount_cents": part}, apptest.NewKey())
					if answers[o].Code() != "invalid_state" && answers[o].Header.Get("Retry-After") == "" {
						return
					}
					time.Sleep(10 * time.Millisecond) // the client asks again, soon
				}
			})
		}
		time.Sleep(300 * time.Millisecond) // the refunds ask while the orders are paying
		e.Slow.Release()
		paying.Wait()
		refunding.Wait()
		e.SettleLeftovers(t)
		var broken []string
		done := 0
		for o, id := range ids {
			early := e.Count(t, `SELECT count(*)::int FROM refunds r WHERE r.order_id = $1 AND NOT EXISTS (
				SELECT 1 FROM payments p WHERE p.order_id = r.order_id AND p.status = 'succeeded' AND p.updated_at <= r.created_at)`, id)
			if early > 0 {
				broken = append(broken, fmt.Sprintf("order %s: %d refunds begun before its payment settled", id, early))
			}
			if made(answers[o]) && processorRefunded(e, id) == part {
				done++
			}
		}
		return append(broken, moneyBroken(t, e)...), done
	})
}

// TestRefunds_ReturnRacesCancel: a return of one unit races a cancel of
// the order, for six orders being paid (the cancel wins: the return is
// refused, and the charge in flight is refunded whole when it lands) and
// six paid ones (the return wins: a paid order is not cancelled). Each
// unit's stock comes back once: by the cancel's release or by the
// return. Without the state rule the cancel of a paid order releases its
// stock and the return gives its unit back again.
func TestRefunds_ReturnRacesCancel(t *testing.T) {
	const orders, initial = 6, 100
	refundRace(t, layers.Off(layers.State), 2*orders, func(t *testing.T, e *apptest.Env, probe *layers.Probe) ([]string, int) {
		apptest.MustCreateProduct(t, e.R(0), "RF-BACK", 1000, initial)
		users, ids := make([]apptest.User, 2*orders), make([]string, 2*orders)
		var paying sync.WaitGroup
		for i := range ids {
			if i < orders {
				var o apptest.Order
				users[i], o = paidOrder(t, e, i, apptest.Line{SKU: "RF-BACK", Quantity: 2})
				ids[i] = o.ID
				continue
			}
			users[i] = apptest.MustCreateUser(t, e.R(i), "cancelling")
			ids[i] = apptest.MustCreateOrder(t, e.R(i), users[i].Token, apptest.Line{SKU: "RF-BACK", Quantity: 2}).ID
			paying.Go(func() { payReq(t, e.R(i), users[i].Token, ids[i], gateway.MethodSlow, apptest.NewKey()) })
		}
		e.Warm(t, 16)
		payWaitFor(t, 10*time.Second, "the slow payments to begin", func() bool {
			return e.Count(t, `SELECT count(*)::int FROM orders WHERE status = 'paying'`) == orders
		})
		probe.Reset()
		testenv.Together(4*orders, func(i int) {
			o := i % (2 * orders)
			if i < 2*orders {
				apptest.UntilNotBusy(t, func(attempt int) apptest.Response {
					return refundReq(t, e.R(i+attempt), users[o].Token, ids[o], map[string]any{"items": []apptest.Line{{SKU: "RF-BACK", Quantity: 1}}}, fmt.Sprintf("back-%d", o))
				})
				return
			}
			apptest.UntilNotBusy(t, func(attempt int) apptest.Response {
				return e.R(i+attempt).Do(t, http.MethodPost, "/v1/orders/"+ids[o]+"/cancel", users[o].Token, nil)
			})
		})
		e.Slow.Release()
		paying.Wait()
		e.SettleLeftovers(t)
		var broken []string
		// Every unit is held by an order, or came back once.
		held := e.Count(t, `SELECT coalesce(sum(i.quantity - i.returned), 0)::int FROM order_items i JOIN orders o ON o.id = i.order_id
			WHERE i.sku = 'RF-BACK' AND o.status NOT IN ('cancelled', 'expired')`)
		if got := e.Stock(t, "RF-BACK"); got+held != initial {
			broken = append(broken, fmt.Sprintf("stock %d and %d units held: %d units came back more than once", got, held, got+held-initial))
		}
		done := e.Count(t, `SELECT count(*)::int FROM orders o WHERE o.id = ANY($1::uuid[]) AND (o.status = 'cancelled'
			OR EXISTS (SELECT 1 FROM refunds r WHERE r.order_id = o.id AND r.status = 'succeeded'))`, ids)
		return append(broken, moneyBroken(t, e)...), done
	})
}
