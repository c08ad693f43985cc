package app_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/shop-example/shop/internal/app"
	"github.com/shop-example/shop/internal/books"
	"github.com/shop-example/shop/internal/inventory"
	"github.com/shop-example/shop/internal/platform/layers"
	"github.com/shop-example/shop/internal/platform/testenv"
)

// The ablation matrices: each flow's race scenario, over two replicas and
// through HTTP, with each single layer taken off, with the database layers
// off, and with everything on. Each row asserts what it must show; a row
// that must break fails if the scenario found nothing, so the matrix can
// never pass for a scenario that stopped racing. The same run checks
// docs/ABLATION.md (make ablation rewrites it).

// off is shorthand for layers.Off.
var off = layers.Off

const (
	idem, lck, state, version, constraint = layers.Idempotency, layers.Lock, layers.State, layers.Version, layers.Constraint
)

// ablationEnv is two replicas with row's layers, and the row's
// constraints dropped from the test's database. The lock runs in strict
// mode: a row with the lock on measures the lock, not its absence when a
// loaded machine's Redis answers late and degrade mode runs the work
// unlocked (a refusal is retried by the clients).
func ablationEnv(t *testing.T, row testenv.Row, naive inventory.Take, dropped ...string) *env {
	t.Helper()
	e := newEnvWith(t, 2, map[string]string{"SHOP_LOCK_MODE": "strict"}, app.Deps{Layers: row.Layers, NaiveStock: naive})
	if !row.Layers.On(constraint) {
		for _, sql := range dropped {
			if _, err := e.db.Exec(context.Background(), sql); err != nil {
				t.Fatalf("%s: %v", sql, err)
			}
		}
	}
	return e
}

func TestAblation_CreateOrder(t *testing.T) {
	const buyers, stock, copies = 120, 40, 2
	rows := []testenv.Row{
		{Why: "every layer"},
		{Layers: off(idem), Why: "the lock on order:{user}:{key} serialises a request's copies; the unique constraint returns the first order"},
		{Layers: off(lck), Why: "the idempotency claim on (user, key) serialises a request's copies"},
		{Layers: off(state), Why: "creating an order has no state rule to take off"},
		{Layers: off(version), Why: "the decrement without its condition: products_stock_nonnegative refuses the oversell"},
		{Layers: off(constraint), Why: "the conditional decrement; the claim stops a request's copies"},
		{Layers: off(layers.Database...), Breaks: true,
			Why: "a decrement with no condition and no CHECK sells stock it does not have"},
		{Layers: off(version), Variant: "read-check-write", Breaks: true,
			Why: "buyers read the same stock and each writes its own difference back: lost updates, which the CHECK cannot see (it refuses only a count below zero). Stock is a counter: its conditional decrement is its one guard against a lost update"},
		{Layers: off(idem, lck, constraint), Breaks: true,
			Why: "nothing serialises a request's copies and nothing refuses the second order: each copy creates one"},
	}
	testenv.Matrix(t, "create_order",
		fmt.Sprintf("%d buyers race over two replicas for %d units, each sending its order %d times at once with one Idempotency-Key. Invariant: units sold = units taken from stock ≤ the stock, and one order per request.", buyers, stock, copies),
		rows, func(t *testing.T, row testenv.Row) testenv.Outcome {
			naive := inventory.TakeUnconditional
			if row.Variant == "read-check-write" {
				naive = inventory.TakeReadCheckWrite
			}
			e := ablationEnv(t, row, naive,
				`ALTER TABLE products DROP CONSTRAINT products_stock_nonnegative`,
				`ALTER TABLE orders DROP CONSTRAINT orders_user_request_key`)
			mustCreateProduct(t, e.r(0), "ABL-HOT", 1000, stock)
			users := testenv.Users(t, e.db, buyers)
			e.warm(t, 32)
			testenv.Together(buyers*copies, func(i int) {
				u := users[i/copies]
				res := retried(func(attempt int) response {
					return e.r(i+attempt).do(t, http.MethodPost, "/v1/orders", u.Token, orderBody(line{"ABL-HOT", 1}), "Idempotency-Key", "buy-"+u.ID)
				})
				switch {
				case res.Status == http.StatusCreated, res.Status == http.StatusConflict, res.code() == "unavailable":
				default:
					t.Errorf("buy: %s", res)
				}
			})
			sold := e.count(t, `SELECT coalesce(sum(quantity), 0)::int FROM order_items WHERE sku = 'ABL-HOT'`)
			taken := stock - e.stock(t, "ABL-HOT")
			dupes := e.count(t, `SELECT (count(*) - count(DISTINCT (user_id, request_key)))::int FROM orders`)
			return testenv.Outcome{Violations: abs(sold-taken) + max(sold-stock, 0) + dupes,
				Unit: "oversold units or duplicate orders", Of: buyers, OfUnit: "buyers"}
		})
}

func TestAblation_CancelOrder(t *testing.T) {
	const orders, cancels = 20, 8
	rows := []testenv.Row{
		{Why: "every layer"},
		{Layers: off(idem), Why: "cancel takes no Idempotency-Key: it is idempotent by meaning"},
		{Layers: off(lck), Why: "the state rule on the row read, written at its version: one cancel wins, the others re-read a cancelled order"},
		{Layers: off(state), Why: "the version check and the lock: a second cancel that read the order before the first is refused, and stock_releases_pkey refuses a second release"},
		{Layers: off(version), Why: "the lock serialises the cancels, and each reads the one before's result"},
		{Layers: off(constraint), Why: "the state rule and the version check"},
		{Layers: off(layers.Database...), Breaks: true,
			Why: "with no state rule every cancel cancels again and returns the stock: the lock serialises them, but has no rule to apply"},
		{Layers: off(version, constraint), Why: "the lock alone: the state rule is asked of a row no other cancel is writing"},
		{Layers: off(lck, version, constraint), Breaks: true,
			Why: "the race the version check exists for: cancels read the order before any of them commits, all see it pending, all return the stock"},
	}
	testenv.Matrix(t, "cancel_order",
		fmt.Sprintf("%d orders of 1 unit, each cancelled %d times at once over two replicas. Invariant: each order's stock comes back exactly once.", orders, cancels),
		rows, func(t *testing.T, row testenv.Row) testenv.Outcome {
			e := ablationEnv(t, row, 0, `ALTER TABLE stock_releases DROP CONSTRAINT stock_releases_pkey`)
			const initial = 100
			mustCreateProduct(t, e.r(0), "ABL-CANCEL", 1000, initial)
			users := testenv.Users(t, e.db, orders)
			ids := make([]string, orders)
			for i, u := range users {
				ids[i] = mustCreateOrder(t, e.r(i), u.Token, line{"ABL-CANCEL", 1}).ID
			}
			e.warm(t, 32)
			testenv.Together(orders*cancels, func(i int) {
				o := i % orders
				res := retried(func(attempt int) response {
					return e.r(i+attempt).do(t, http.MethodPost, "/v1/orders/"+ids[o]+"/cancel", users[o].Token, nil)
				})
				if res.Status != http.StatusOK && res.code() != "resource_busy" && res.code() != "unavailable" {
					t.Errorf("cancel: %s", res)
				}
			})
			// The race is over; each order is cancelled once more, so an
			// order whose every cancel was refused is cancelled too. A
			// second cancel of a cancelled order returns nothing.
			for o := range ids {
				res := retried(func(attempt int) response {
					return e.r(attempt).do(t, http.MethodPost, "/v1/orders/"+ids[o]+"/cancel", users[o].Token, nil)
				})
				if res.Status != http.StatusOK {
					t.Errorf("cancel after the race: %s", res)
				}
			}
			returned := e.stock(t, "ABL-CANCEL") - (initial - orders)
			return testenv.Outcome{Violations: abs(returned - orders), Unit: "units returned more (or less) than once",
				Of: orders, OfUnit: "orders"}
		})
}

func TestAblation_PayOrder(t *testing.T) {
	const orders, sameKey, ownKeys = 20, 6, 2
	rows := []testenv.Row{
		{Why: "every layer"},
		{Layers: off(idem), Why: "the lock on payment:{order}, the order's paying state and the partial unique index"},
		{Layers: off(lck), Why: "the order's state: the first payment moves it to paying, and the others find it so"},
		{Layers: off(state), Why: "the lock serialises the clicks; payments_one_active_per_order refuses a second payment beside a processing or succeeded one"},
		{Layers: off(version), Why: "the lock and the order's state"},
		{Layers: off(constraint), Why: "the lock and the order's state"},
		{Layers: off(layers.Database...), Breaks: true,
			Why: "with no state rule a click after the first payment settled begins another, and no index refuses it: a second charge"},
		{Layers: off(version, constraint), Why: "the lock alone: the state rule is asked of an order no other payment is writing"},
		{Layers: off(lck, version, constraint), Breaks: true,
			Why: "the race the version check exists for: clicks read the order before any of them commits, all see it pending, each begins a payment and charges it"},
	}
	testenv.Matrix(t, "pay_order",
		fmt.Sprintf("%d orders over two replicas, each paid %d times at once: %d clicks share one Idempotency-Key, %d have their own. Invariant (the books audit): each order paid with exactly one charge, no charge on an unpaid order.", orders, sameKey+ownKeys, sameKey, ownKeys),
		rows, func(t *testing.T, row testenv.Row) testenv.Outcome {
			e := ablationEnv(t, row, 0, `DROP INDEX payments_one_active_per_order`)
			mustCreateProduct(t, e.r(0), "ABL-PAY", 1500, orders)
			users := testenv.Users(t, e.db, orders)
			ids, keys := make([]string, orders), make([]string, orders)
			for i, u := range users {
				ids[i], keys[i] = mustCreateOrder(t, e.r(i), u.Token, line{"ABL-PAY", 1}).ID, newKey()
			}
			e.warm(t, 32)
			clicks := sameKey + ownKeys
			testenv.Together(orders*clicks, func(i int) {
				o, click := i%orders, i/orders
				key := keys[o]
				if click >= sameKey {
					key = newKey()
				}
				res := retried(func(attempt int) response {
					return e.r(i+attempt).do(t, http.MethodPost, payPath(ids[o]), users[o].Token,
						map[string]string{"payment_method": "pm_card_ok"}, "Idempotency-Key", key)
				})
				if res.Status >= 500 && res.code() != "unavailable" {
					t.Errorf("pay: %s", res)
				}
			})
			// The race is over; each order is paid once more with its
			// shared key, so an order whose every click was refused is
			// paid too. A pay of a paid order changes nothing.
			for o := range ids {
				retried(func(attempt int) response {
					return e.r(attempt).do(t, http.MethodPost, payPath(ids[o]), users[o].Token,
						map[string]string{"payment_method": "pm_card_ok"}, "Idempotency-Key", keys[o])
				})
			}
			e.settleLeftovers(t)
			r, err := books.Check(context.Background(), e.db, nil, e.cfg.GatewayURL)
			if err != nil {
				t.Fatal(err)
			}
			charged := e.count(t, `SELECT count(*)::int FROM orders WHERE status <> 'paid'`)
			for _, id := range ids {
				if n := len(e.gateway.Charges(id)); n != 1 {
					charged++
				}
			}
			if !row.Breaks && !r.OK() {
				t.Error(r)
			}
			return testenv.Outcome{Violations: charged, Unit: "orders not paid with exactly one charge", Of: orders, OfUnit: "orders"}
		})
}

// retried sends a request as a well-behaved client does: again, with the
// same key, when the answer says when to come back (Retry-After: a busy
// resource, a request in progress, a lock quorum a loaded machine's Redis
// did not answer in time), within a bound. It returns the last answer.
func retried(send func(attempt int) response) response {
	for attempt := 1; ; attempt++ {
		res := send(attempt)
		if res.Header.Get("Retry-After") == "" || attempt == 20 {
			return res
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}
