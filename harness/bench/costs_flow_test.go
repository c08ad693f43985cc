package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/shop-example/shop/harness/gateway"
	"github.com/shop-example/shop/harness/gateway/gatewaytest"
	"github.com/shop-example/shop/harness/testenv"
	"github.com/shop-example/shop/internal/inventory"
	"github.com/shop-example/shop/internal/platform/auth"
	"github.com/shop-example/shop/internal/platform/postgres"
)

// opCost is what one operation of a flow costs, counted as the bench's
// costs columns count it (costMeter): PostgreSQL round trips (BEGIN and
// COMMIT among them, a batch as one), transactions committed (a statement
// outside a transaction, read-only or not, as one), and Redis commands.
type opCost struct{ trips, commits, redis int64 }

func (c opCost) String() string {
	return fmt.Sprintf("%d round trips, %d commits, %d Redis commands", c.trips, c.commits, c.redis)
}

// TestCosts_PerOperation pins what each flow costs per operation through
// HTTP, as the bench's costs columns count it, uncontended and on warm
// connections: the round trips, the commits and the Redis commands. A
// change that adds a round trip, a commit or a lock's command to a hot
// path fails here, whatever the machine's speed: the figure it would
// cost is not a time, so this needs none. The service runs on the default
// settings: a bearer token already seen is answered from the auth cache,
// with no round trip; while SHOP_KEY_TRANSITION is on (the default) a
// Redis lock has two names (package keyscheme), each a SET NX and a
// release on each of the three nodes: twelve commands a lock.
//
// When a change means to cost more, or less, the figure here changes in
// the same commit, and `shop bench strategies` says what it cost in time.
func TestCosts_PerOperation(t *testing.T) {
	if testing.Short() {
		t.Skip("needs PostgreSQL and Redis")
	}
	ctx := context.Background()
	dbURL := testenv.DatabaseURL(t)
	var meter costMeter
	_, gwURL := gatewaytest.Start(t, gateway.Options{})
	pool, err := postgres.Open(ctx, dbURL, 4)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	admin := newAdminToken(t)
	t.Setenv("SHOP_ADMIN_TOKEN", admin)
	users := auth.NewStore(pool)
	_, token, err := users.CreateUser(ctx, "costs")
	if err != nil {
		t.Fatal(err)
	}
	o := benchOptions{clients: 1, redisAddrs: testenv.RedisAddrs(t), meter: &meter}
	svc, err := startService(ctx, o, dbURL, gwURL, []string{token})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.stop)
	for _, sku := range []string{"COST-A", "COST-B"} {
		if _, err := inventory.NewStore(pool, nil).Create(ctx, inventory.Product{SKU: sku, Name: sku, PriceCents: 1000, StockAvailable: 1000}); err != nil {
			t.Fatal(err)
		}
	}
	event := decodeID(t, svc.post(ctx, admin, "/v1/events", `{"name":"costs","rows":4,"seats_per_row":10}`, ""))

	// Each operation once to warm its statements and connections, then
	// once counted. What an operation needs before it (an order to pay, a
	// post to like) is made before the meter is reset.
	newOrder := func(i int, what string) string {
		return decodeID(t, svc.post(ctx, token, "/v1/orders", `{"items":[{"sku":"COST-B","quantity":1}]}`, key(what, i)))
	}
	ops := []struct {
		name string
		want opCost
		run  func(i int) (answer, error)
	}{
		// BEGIN with the key's claim; the stock's conditional decrement;
		// the order and the key's answer with COMMIT.
		{"create order", opCost{trips: 3, commits: 1}, func(i int) (answer, error) {
			meter.reset()
			return svc.post(ctx, token, "/v1/orders", `{"items":[{"sku":"COST-A","quantity":1}]}`, key("order", i)), nil
		}},
		// The order's look (a read, committed on its own); the lock; the
		// begin's two (BEGIN, claim and the order's write; the payment and
		// COMMIT); the settle's two (BEGIN, claim, the payment's and the
		// order's writes; the answer and COMMIT).
		{"pay order", opCost{trips: 5, commits: 3, redis: 12}, func(i int) (answer, error) {
			o := newOrder(i, "payorder")
			meter.reset()
			return svc.post(ctx, token, "/v1/orders/"+o+"/payments", `{"payment_method":"`+gateway.MethodOK+`"}`, key("pay", i)), nil
		}},
		// The lock; BEGIN; the order's read; its write with its release,
		// its stock and its event; COMMIT.
		{"cancel order", opCost{trips: 4, commits: 1, redis: 12}, func(i int) (answer, error) {
			o := newOrder(i, "cancelorder")
			meter.reset()
			return svc.post(ctx, token, "/v1/orders/"+o+"/cancel", ``, ""), nil
		}},
		// The glance (a read, committed on its own); BEGIN with the claim;
		// the locks and the reads; the writes, the key's answer and COMMIT.
		{"hold seats", opCost{trips: 4, commits: 2}, func(i int) (answer, error) {
			meter.reset()
			return svc.post(ctx, token, "/v1/events/"+event+"/holds", fmt.Sprintf(`{"seats":["A%d"]}`, i+1), key("hold", i)), nil
		}},
		// BEGIN with the order's advisory lock, the claim and the reads; the
		// order's write; the refund's row and COMMIT; then the settle's
		// two (BEGIN, claim, the refund's and the order's writes; the
		// answer and COMMIT). No Redis.
		{"refund", opCost{trips: 5, commits: 2}, func(i int) (answer, error) {
			o := newOrder(i, "refundorder")
			if a := svc.post(ctx, token, "/v1/orders/"+o+"/payments", `{"payment_method":"`+gateway.MethodOK+`"}`, key("refundpay", i)); a.status != http.StatusCreated {
				return a, fmt.Errorf("pay the order to refund: %d", a.status)
			}
			meter.reset()
			return svc.post(ctx, admin, "/v1/orders/"+o+"/refunds", `{"amount_cents":300}`, key("refund", i)), nil
		}},
		// The look (a read, committed on its own); BEGIN with the lock and
		// the read; the write with its counter row and COMMIT.
		{"like", opCost{trips: 3, commits: 2}, func(i int) (answer, error) {
			p := decodeID(t, svc.post(ctx, token, "/v1/posts", fmt.Sprintf(`{"title":"costs %d"}`, i), ""))
			meter.reset()
			return svc.send(ctx, http.MethodPut, token, "/v1/posts/"+p+"/like"), nil
		}},
	}
	for _, op := range ops {
		t.Run(strings.ReplaceAll(op.name, " ", "_"), func(t *testing.T) {
			var got opCost
			for i := range 2 {
				a, err := op.run(i)
				if err != nil || a.status/100 != 2 || a.transport != "" {
					t.Fatalf("%s: %v %d %s", op.name, err, a.status, a.body)
				}
				got = opCost{trips: meter.trips.Load(), commits: meter.commits.Load(), redis: meter.cmds.Load()}
			}
			if got != op.want {
				t.Errorf("%s costs %s; want %s", op.name, got, op.want)
			}
		})
	}
}

// reset starts the meter's counts again from zero.
func (m *costMeter) reset() {
	m.trips.Store(0)
	m.commits.Store(0)
	m.cmds.Store(0)
}

// decodeID is the id of what a 201 made.
func decodeID(t *testing.T, a answer) string {
	t.Helper()
	var v struct {
		ID string `json:"id"`
	}
	if a.status != http.StatusCreated || json.Unmarshal(a.body, &v) != nil || v.ID == "" {
		t.Fatalf("got %d %s, want 201 with an id", a.status, a.body)
	}
	return v.ID
}

// key is a fresh Idempotency-Key of op's i-th request.
func key(op string, i int) string { return fmt.Sprintf("costs-%s-%d", op, i) }

// newAdminToken is an admin token for the service the test starts.
func newAdminToken(t *testing.T) string {
	t.Helper()
	return "costs-admin-" + strings.Repeat("x", 24)
}
