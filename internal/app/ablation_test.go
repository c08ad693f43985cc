package app_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"

	"github.com/shop-example/shop/harness/ablation"
	"github.com/shop-example/shop/harness/apptest"
	"github.com/shop-example/shop/harness/books"
	"github.com/shop-example/shop/harness/testenv"
	"github.com/shop-example/shop/internal/app"
	"github.com/shop-example/shop/internal/inventory"
	"github.com/shop-example/shop/internal/orders"
	"github.com/shop-example/shop/internal/payments"
	"github.com/shop-example/shop/internal/platform/layers"
	"github.com/shop-example/shop/internal/platform/outbox"
)

// The ablation matrices (package ablation has their rows): each flow's
// race scenario, over two replicas and through HTTP, with each of its
// layers taken off, with its database layers off, and with everything on.
// Each row asserts what it must show: a row that must break fails if the
// scenario found nothing, a row that holds fails if no work was done, and
// any row fails if a layer it takes off was never asked for. The same run
// checks docs/ABLATION.md (make ablation rewrites it).

// The constraints each order flow's matrix drops with layer 4 off, by
// their names in the flows' catalogues.
var (
	createDrops = []string{inventory.ConstraintStockNonNegative, orders.ConstraintUserRequestKey}
	// outbox_one_per_event too: a second move of an order would announce
	// itself a second time, and that index refuses it.
	cancelDrops = []string{orders.ConstraintReleasedOnce, outbox.ConstraintOnePerEvent}
	payDrops    = []string{payments.ConstraintOneActive, outbox.ConstraintOnePerEvent}
)

func TestAblation_CreateOrder(t *testing.T) {
	const buyers, stock, copies = 120, 40, 2
	testenv.Matrix(t, ablation.CreateOrder(), ablation.Scenario{
		Text:         fmt.Sprintf("%d buyers race over two replicas for %d units, each sending its order %d times at once with one Idempotency-Key. Invariant: units sold = units taken from stock ≤ the stock, and one order per request.", buyers, stock, copies),
		Counted:      fmt.Sprintf("units sold beyond the stock or beyond what left it, plus second orders for one key, of %d buyers", buyers),
		Progress:     fmt.Sprintf("units sold, of %d in stock", stock),
		ProgressWant: stock,
	}, func(t *testing.T, row ablation.Row, probe *layers.Probe) testenv.Outcome {
		e := apptest.NewAblation(t, row, app.Deps{}, createDrops...)
		apptest.MustCreateProduct(t, e.R(0), "ABL-HOT", 1000, stock)
		users := testenv.Users(t, e.DB, buyers)
		e.Warm(t, 32)
		probe.Reset()
		testenv.Together(buyers*copies, func(i int) {
			u := users[i/copies]
			res := apptest.Retried(func(attempt int) apptest.Response {
				return e.R(i+attempt).Do(t, http.MethodPost, "/v1/orders", u.Token, apptest.OrderBody(apptest.Line{SKU: "ABL-HOT", Quantity: 1}), "Idempotency-Key", "buy-"+u.ID)
			})
			// Every buyer is answered: an order, or no stock left. A
			// refusal of any other kind is a run that did not race.
			if res.Status != http.StatusCreated && res.Code() != "out_of_stock" {
				t.Errorf("buy: %s", res)
			}
		})
		sold := e.Count(t, `SELECT coalesce(sum(quantity), 0)::int FROM order_items WHERE sku = 'ABL-HOT'`)
		taken := stock - e.Stock(t, "ABL-HOT")
		dupes := e.Count(t, `SELECT (count(*) - count(DISTINCT (user_id, request_key)))::int FROM orders`)
		t.Logf("sold %d, taken from stock %d, second orders %d", sold, taken, dupes)
		return testenv.Outcome{Violations: abs(sold-taken) + max(sold-stock, 0) + dupes, Progress: min(sold, stock)}
	})
}

func TestAblation_CancelOrder(t *testing.T) {
	const orders, cancels = 20, 8
	testenv.Matrix(t, ablation.CancelOrder(), ablation.Scenario{
		Text:         fmt.Sprintf("%d orders of 1 unit, each cancelled %d times at once over two replicas. Invariant: each order's stock comes back exactly once.", orders, cancels),
		Counted:      fmt.Sprintf("units returned more (or less) than once, of %d orders", orders),
		Progress:     fmt.Sprintf("orders the race cancelled, of %d", orders),
		ProgressWant: orders,
	}, func(t *testing.T, row ablation.Row, probe *layers.Probe) testenv.Outcome {
		e := apptest.NewAblation(t, row, app.Deps{}, cancelDrops...)
		const initial = 100
		apptest.MustCreateProduct(t, e.R(0), "ABL-CANCEL", 1000, initial)
		users := testenv.Users(t, e.DB, orders)
		ids := make([]string, orders)
		for i, u := range users {
			ids[i] = apptest.MustCreateOrder(t, e.R(i), u.Token, apptest.Line{SKU: "ABL-CANCEL", Quantity: 1}).ID
		}
		e.Warm(t, 32)
		probe.Reset()
		testenv.Together(orders*cancels, func(i int) {
			o := i % orders
			res := apptest.Retried(func(attempt int) apptest.Response {
				return e.R(i+attempt).Do(t, http.MethodPost, "/v1/orders/"+ids[o]+"/cancel", users[o].Token, nil)
			})
			if res.Status != http.StatusOK && res.Code() != "resource_busy" && res.Code() != "unavailable" {
				t.Errorf("cancel: %s", res)
			}
		})
		cancelled := e.Count(t, `SELECT count(*)::int FROM orders WHERE status = 'cancelled'`)
		returned := e.Stock(t, "ABL-CANCEL") - (initial - orders)
		return testenv.Outcome{Violations: abs(returned - cancelled), Progress: cancelled}
	})
}

func TestAblation_PayOrder(t *testing.T) {
	const orders, sameKey, ownKeys = 20, 6, 2
	testenv.Matrix(t, ablation.PayOrder(), ablation.Scenario{
		Text:         fmt.Sprintf("%d orders over two replicas, each paid %d times at once: %d clicks share one Idempotency-Key, %d have their own. Invariant (the books audit): each order paid with exactly one charge, no charge on an unpaid order.", orders, sameKey+ownKeys, sameKey, ownKeys),
		Counted:      fmt.Sprintf("orders not paid with exactly one charge, of %d orders", orders),
		Progress:     fmt.Sprintf("orders paid, of %d", orders),
		ProgressWant: orders,
	}, func(t *testing.T, row ablation.Row, probe *layers.Probe) testenv.Outcome {
		e := apptest.NewAblation(t, row, app.Deps{}, payDrops...)
		apptest.MustCreateProduct(t, e.R(0), "ABL-PAY", 1500, orders)
		users := testenv.Users(t, e.DB, orders)
		ids, keys := make([]string, orders), make([]string, orders)
		for i, u := range users {
			ids[i], keys[i] = apptest.MustCreateOrder(t, e.R(i), u.Token, apptest.Line{SKU: "ABL-PAY", Quantity: 1}).ID, apptest.NewKey()
		}
		e.Warm(t, 32)
		probe.Reset()
		clicks := sameKey + ownKeys
		testenv.Together(orders*clicks, func(i int) {
			o, click := i%orders, i/orders
			key := keys[o]
			if click >= sameKey {
				key = apptest.NewKey()
			}
			res := apptest.Retried(func(attempt int) apptest.Response {
				return e.R(i+attempt).Do(t, http.MethodPost, payPath(ids[o]), users[o].Token,
					map[string]string{"payment_method": "pm_card_ok"}, "Idempotency-Key", key)
			})
			if res.Status >= 500 && res.Code() != "unavailable" {
				t.Errorf("pay: %s", res)
			}
		})
		e.SettleLeftovers(t)
		r, err := books.Check(context.Background(), e.DB, nil, e.Cfg.GatewayURL)
		if err != nil {
			t.Fatal(err)
		}
		paid := e.Count(t, `SELECT count(*)::int FROM orders WHERE status = 'paid'`)
		wrong := orders - paid
		for _, id := range ids {
			if n := len(e.Gateway.Charges(id)); n != 1 {
				wrong++
			}
		}
		if !row.Breaks && !r.OK() {
			t.Error(r)
		}
		return testenv.Outcome{Violations: wrong, Progress: paid}
	})
}

func TestAblation_RefundOrder(t *testing.T) {
	const orders, agents, copies, total, part = 10, 4, 2, 10000, 6000
	testenv.Matrix(t, ablation.RefundOrder(), ablation.Scenario{
		Text: fmt.Sprintf("%d paid orders of %d cents over two replicas, the processor's own check off. For each, %d support agents (the admin token, a key each) refund %d cents at once, each sending its request %d times at once with its key. Invariant (the books audit): the processor gives back at most what it took, once per refund the shop recorded, and each order holds what its refunds took.",
			orders, total, agents, part, copies),
		Counted:      fmt.Sprintf("orders given back more than was captured, or whose refunds at the processor, recorded by the shop and held by the order disagree, of %d orders", orders),
		Progress:     fmt.Sprintf("orders refunded %d cents once, of %d", part, orders),
		ProgressWant: orders,
	}, func(t *testing.T, row ablation.Row, probe *layers.Probe) testenv.Outcome {
		e := apptest.NewAblationWith(t, row, refundVars, app.Deps{}, refundDrops...)
		apptest.MustCreateProduct(t, e.R(0), "ABL-REFUND", total, orders)
		ids := make([]string, orders)
		for i := range ids {
			_, o := paidOrder(t, e, i, apptest.Line{SKU: "ABL-REFUND", Quantity: 1})
			ids[i] = o.ID
		}
		e.Warm(t, 32)
		probe.Reset()
		testenv.Together(orders*agents*copies, func(i int) {
			o, agent := i%orders, (i/orders)%agents
			res := apptest.Retried(func(attempt int) apptest.Response {
				return refundReq(t, e.R(i+attempt), apptest.AdminToken, ids[o], map[string]any{"amount_cents": part},
					fmt.Sprintf("agent-%d-%d", o, agent))
			})
			if res.Status >= 500 && res.Code() != "unavailable" {
				t.Errorf("refund: %s", res)
			}
		})
		e.SettleLeftovers(t)
		r, err := books.Check(context.Background(), e.DB, nil, e.Cfg.GatewayURL)
		if err != nil {
			t.Fatal(err)
		}
		wrong, done := 0, 0
		for _, id := range ids {
			given := processorRefunded(e, id)
			recorded := e.Count(t, `SELECT coalesce(sum(amount_cents), 0)::int FROM refunds WHERE order_id = $1 AND status = 'succeeded'`, id)
			held := e.Count(t, `SELECT (o.refunded_cents - coalesce((SELECT sum(amount_cents) FROM refunds r
				WHERE r.order_id = o.id AND r.status <> 'failed'), 0))::int FROM orders o WHERE o.id = $1`, id)
			switch {
			case given > total || int64(recorded) != given || held != 0:
				wrong++
			case given == part && recorded == part:
				done++
			}
		}
		t.Logf("%s", r)
		if !row.Breaks && !r.OK() {
			t.Error(r)
		}
		return testenv.Outcome{Violations: wrong, Progress: done}
	})
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}
