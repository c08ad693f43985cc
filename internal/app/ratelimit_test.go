package app_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shop-example/shop/harness/apptest"
	"github.com/shop-example/shop/harness/testenv"
	"github.com/shop-example/shop/internal/platform/config"
	"github.com/shop-example/shop/internal/seats"
)

// TestRateLimit_Register: registration is limited per client address. The
// fourth registration from one address within the hour is refused before
// anything is written, with the headers API.md promises; another address
// is not affected. With the limits off, the same address registers as
// often as it likes (the flood of issue 8: 2,000 in 8 s).
func TestRateLimit_Register(t *testing.T) {
	const limit = 3
	vars := map[string]string{"SHOP_RATE_LIMIT_REGISTER": strconv.Itoa(limit) + "/h"}

	t.Run("LimitsOff", func(t *testing.T) {
		off := maps.Clone(vars)
		off["SHOP_RATE_LIMIT"] = "off"
		e := apptest.NewLimited(t, 1, off)
		addr := testenv.ClientAddr()
		for range 3 * limit {
			res := apptest.RegisterFrom(t, e.R(0), "flood", addr)
			apptest.WantStatus(t, res, http.StatusCreated)
			if h := res.Header.Get("RateLimit-Policy"); h != "" {
				t.Fatalf("RateLimit-Policy %q with the limits off", h)
			}
		}
		if n := e.Count(t, `SELECT count(*)::int FROM users WHERE name = 'flood'`); n != 3*limit {
			t.Errorf("%d users registered, want all %d", n, 3*limit)
		}
	})

	t.Run("On", func(t *testing.T) {
		e := apptest.NewLimited(t, 1, vars)
		addr, other := testenv.ClientAddr(), testenv.ClientAddr()
		for i := range limit {
			res := apptest.RegisterFrom(t, e.R(0), fmt.Sprintf("user-%d", i), addr)
			apptest.WantStatus(t, res, http.StatusCreated)
			if got, want := res.Header.Get("RateLimit-Policy"), `"register";q=3;w=3600`; got != want {
				t.Errorf("registration %d: RateLimit-Policy %q, want %q", i+1, got, want)
			}
			if policy, left, ok := apptest.RateLimitOf(res); !ok || policy != "register" || left != limit-1-i {
				t.Errorf("registration %d: RateLimit %q, want \"register\";r=%d;t=…", i+1, res.Header.Get("RateLimit"), limit-1-i)
			}
		}

		res := apptest.RegisterFrom(t, e.R(0), "one-too-many", addr)
		apptest.WantProblem(t, res, http.StatusTooManyRequests, "rate_limited") // do checks problem+json and Retry-After
		if retry, _ := strconv.Atoi(res.Header.Get("Retry-After")); retry < 60 {
			t.Errorf("Retry-After %d s, want the time until one more is allowed: about 20 minutes", retry)
		}
		if policy, left, ok := apptest.RateLimitOf(res); !ok || policy != "register" || left != 0 {
			t.Errorf("refusal: RateLimit %q, want \"register\";r=0;t=…", res.Header.Get("RateLimit"))
		}
		if res.Header.Get("RateLimit-Policy") == "" {
			t.Error("refusal has no RateLimit-Policy")
		}
		if n := e.Count(t, `SELECT count(*)::int FROM users WHERE name = 'one-too-many'`); n != 0 {
			t.Errorf("the refused registration wrote %d user rows, want none", n)
		}
		if n := e.Count(t, `SELECT count(*)::int FROM users`); n != limit {
			t.Errorf("%d users, want %d", n, limit)
		}

		// Another client is counted on its own.
		apptest.WantStatus(t, apptest.RegisterFrom(t, e.R(0), "neighbour", other), http.StatusCreated)

		apptest.WantMetric(t, e.R(0), `shop_rate_limit_requests_total{decision="allowed",limit="register"} 4`)
		apptest.WantMetric(t, e.R(0), `shop_rate_limit_requests_total{decision="denied",limit="register"} 1`)
		apptest.WantMetric(t, e.R(0), `shop_rate_limit_fail_open_total{limit="register"} 0`)
	})

}

// TestRateLimit_Hoarding is the abuse of issue 8: one user sends order
// after order for one unit of a product until its whole stock is reserved
// for the order TTL. Without limits the user takes 500 of 500 in seconds;
// with the default per-user order limit (SHOP_RATE_LIMIT_ORDERS, 30/h) the
// user gets the burst and then one order per interval, and the stock stays
// for everyone else.
func TestRateLimit_Hoarding(t *testing.T) {
	const (
		stock    = 500
		attempts = 500
		workers  = 16
		sku      = "HOARD-1"
	)
	type outcome struct {
		created int
		refused map[string]int
		elapsed time.Duration
		cfg     config.RateLimits
	}
	hoard := func(t *testing.T, vars map[string]string) outcome {
		e := apptest.NewLimited(t, 1, vars)
		r := e.R(0)
		apptest.MustCreateProduct(t, r, sku, 500, stock)
		u := apptest.Decode[apptest.User](t, apptest.RegisterFrom(t, r, "hoarder", testenv.ClientAddr()))
		body, _ := json.Marshal(apptest.OrderBody(apptest.Line{SKU: sku, Quantity: 1}))
		out := outcome{refused: map[string]int{}, cfg: e.Cfg.RateLimit}
		var mu sync.Mutex
		start := time.Now()
		apptest.InParallel(attempts, workers, func(int) {
			res := r.Do(t, http.MethodPost, "/v1/orders", u.Token, body, "Idempotency-Key", apptest.NewKey())
			mu.Lock()
			defer mu.Unlock()
			if res.Status == http.StatusCreated {
				out.created++
				return
			}
			out.refused[res.Code()]++
		})
		out.elapsed = time.Since(start)
		// The database agrees with the answers: every order is the
		// hoarder's, and the stock is down by exactly what they were told.
		if n := e.Count(t, `SELECT count(*)::int FROM orders WHERE user_id = $1`, u.ID); n != out.created {
			t.Errorf("%d orders in the database, %d answered 201", n, out.created)
		}
		if left := e.Stock(t, sku); left != stock-out.created {
			t.Errorf("stock_available %d, want %d − %d", left, stock, out.created)
		}
		return out
	}

	t.Run("LimitsOff", func(t *testing.T) {
		got := hoard(t, map[string]string{"SHOP_RATE_LIMIT": "off"})
		t.Logf("without limits: %d of %d reserved by one user in %v, refusals %v", got.created, stock, got.elapsed.Round(time.Millisecond), got.refused)
		if got.created != stock {
			t.Errorf("one user reserved %d of %d without limits, want all: the abuse this test guards against did not happen, so the next case shows nothing", got.created, stock)
		}
	})
	t.Run("Defaults", func(t *testing.T) {
		got := hoard(t, nil)
		t.Logf("with the default limits: %d of %d reserved in %v, refusals %v", got.created, stock, got.elapsed.Round(time.Millisecond), got.refused)
		// The burst, plus one for each interval the attempts took.
		rate := got.cfg.Orders
		most := rate.Count + int(got.elapsed/(rate.Per/time.Duration(rate.Count))) + 1
		if got.created < rate.Count || got.created > most {
			t.Errorf("one user reserved %d of %d in %v; want the burst of %s and at most %d", got.created, stock, got.elapsed, rate, most)
		}
		if got.refused["rate_limited"] != attempts-got.created || len(got.refused) != 1 {
			t.Errorf("refusals %v, want every attempt past the limit refused with rate_limited", got.refused)
		}
	})
}

// TestRateLimit_SharedByReplicas: the per-user order limit is counted in
// Redis, so two replicas share it: a user who spreads orders over both
// gets the limit once, not once per replica. A refused order never
// reaches the idempotency layer: its key is neither claimed nor stored.
func TestRateLimit_SharedByReplicas(t *testing.T) {
	const limit = 4
	e := apptest.NewLimited(t, 2, map[string]string{"SHOP_RATE_LIMIT_ORDERS": strconv.Itoa(limit) + "/h"})
	apptest.MustCreateProduct(t, e.R(0), "SHARED-1", 100, 100)
	u := apptest.Decode[apptest.User](t, apptest.RegisterFrom(t, e.R(0), "spreader", testenv.ClientAddr()))

	var created, refusedKeys []string
	for i := range 10 {
		key := apptest.NewKey()
		res := e.R(i).Do(t, http.MethodPost, "/v1/orders", u.Token, apptest.OrderBody(apptest.Line{SKU: "SHARED-1", Quantity: 1}), "Idempotency-Key", key)
		switch {
		case res.Status == http.StatusCreated:
			created = append(created, key)
		case res.Status == http.StatusTooManyRequests && res.Code() == "rate_limited":
			refusedKeys = append(refusedKeys, key)
		default:
			t.Fatalf("order %d on replica %d: got %s, want 201 or 429", i+1, i%2, res)
		}
	}
	if len(created) != limit {
		t.Errorf("%d orders created over two replicas, want %d: the replicas do not share the count", len(created), limit)
	}
	if n := e.Count(t, `SELECT count(*)::int FROM orders WHERE user_id = $1`, u.ID); n != len(created) {
		t.Errorf("%d orders in the database, %d answered 201", n, len(created))
	}
	if got := e.Stock(t, "SHARED-1"); got != 100-len(created) {
		t.Errorf("stock %d, want %d", got, 100-len(created))
	}
	if n := e.Count(t, `SELECT count(*)::int FROM idempotency_keys WHERE key = ANY($1)`, refusedKeys); n != 0 {
		t.Errorf("%d idempotency keys of refused orders in the table, want none: the limit runs before the key is claimed", n)
	}
	if n := e.Count(t, `SELECT count(*)::int FROM idempotency_keys WHERE key = ANY($1) AND status_code = 201`, created); n != len(created) {
		t.Errorf("%d created orders' keys store their 201, want %d", n, len(created))
	}
	// Each replica counts what it decided; together, every attempt.
	allowed := 0
	for i := range 2 {
		m := regexp.MustCompile(`(?m)^shop_rate_limit_requests_total\{decision="allowed",limit="orders"\} (\d+)$`).FindSubmatch([]byte(apptest.Scrape(t, e.R(i))))
		if m == nil {
			t.Fatalf("replica %d: no allowed count for orders", i)
		}
		n, _ := strconv.Atoi(string(m[1]))
		allowed += n
	}
	if allowed != limit {
		t.Errorf("the replicas counted %d allowed orders together, want %d", allowed, limit)
	}
}

// TestRateLimit_Shopper: the defaults leave a normal shopper alone: a few
// orders, each sent twice with its Idempotency-Key (a retry after a lost
// answer), a look at each, paying them and cancelling one.
func TestRateLimit_Shopper(t *testing.T) {
	e := apptest.NewLimited(t, 2, nil)
	apptest.MustCreateProduct(t, e.R(0), "SHOP-1", 500, 20)
	addr := testenv.ClientAddr()
	u := apptest.Decode[apptest.User](t, apptest.RegisterFrom(t, e.R(0), "shopper", addr))
	var orders []apptest.Order
	for i := range 4 {
		key := apptest.NewKey()
		var first apptest.Response
		for try := range 2 {
			res := e.R(i+try).Do(t, http.MethodPost, "/v1/orders", u.Token, apptest.OrderBody(apptest.Line{SKU: "SHOP-1", Quantity: 1}), "Idempotency-Key", key)
			apptest.WantStatus(t, res, http.StatusCreated)
			if try == 0 {
				first = res
			} else if res.Header.Get("Idempotent-Replayed") != "true" {
				t.Errorf("order %d: the retry was not a replay", i+1)
			}
		}
		orders = append(orders, apptest.Decode[apptest.Order](t, first))
	}
	for i, o := range orders {
		apptest.WantStatus(t, e.R(i).Do(t, http.MethodGet, "/v1/orders/"+o.ID, u.Token, nil), http.StatusOK)
		if i == len(orders)-1 {
			apptest.WantStatus(t, e.R(i).Do(t, http.MethodPost, "/v1/orders/"+o.ID+"/cancel", u.Token, nil), http.StatusOK)
			continue
		}
		apptest.WantStatus(t, payReq(t, e.R(i), u.Token, o.ID, "pm_card_ok", apptest.NewKey()), http.StatusCreated)
	}
	for i := range 10 { // a page of products, from the shopper's address
		apptest.WantStatus(t, e.R(i).Do(t, http.MethodGet, "/v1/products/SHOP-1", "", nil, apptest.From(addr)...), http.StatusOK)
	}
}

// TestRateLimit_Routes: which limit each route carries. Registration and
// the public reads count per client address, a user's writes per user,
// order creation under its own limit; a user's reads, the admin's routes
// and the operations endpoints carry none.
func TestRateLimit_Routes(t *testing.T) {
	e := apptest.NewLimited(t, 1, nil)
	r := e.R(0)
	addr := testenv.ClientAddr()
	apptest.MustCreateProduct(t, r, "ROUTE-1", 100, 10)
	res := apptest.RegisterFrom(t, r, "router", addr)
	apptest.WantStatus(t, res, http.StatusCreated)
	u := apptest.Decode[apptest.User](t, res)
	o := apptest.MustCreateOrder(t, r, u.Token, apptest.Line{SKU: "ROUTE-1", Quantity: 1})
	paid := apptest.MustCreateOrder(t, r, u.Token, apptest.Line{SKU: "ROUTE-1", Quantity: 1})
	apptest.WantStatus(t, payReq(t, r, u.Token, paid.ID, "pm_card_ok", apptest.NewKey()), http.StatusCreated)
	ev := apptest.MustCreateEvent(t, r, "routes", 1, 10)
	held := make([]apptest.SeatHold, 3)
	for i := range held {
		res := apptest.HoldSeats(t, r, u.Token, ev.ID, apptest.NewKey(), seats.Label(0, i+1))
		apptest.WantStatus(t, res, http.StatusCreated)
		held[i] = apptest.Decode[apptest.SeatHold](t, res)
	}
	bookedRes := apptest.ConfirmHold(t, r, u.Token, held[2].ID, apptest.NewKey())
	apptest.WantStatus(t, bookedRes, http.StatusCreated)
	booked := apptest.Decode[apptest.Booking](t, bookedRes)

	key := "Idempotency-Key"
	tests := []struct {
		name, method, path, token string
		body                      any
		header                    []string
		want                      string // the policy, "" for none
	}{
		{"Register", http.MethodPost, "/v1/users", "", map[string]string{"name": "x"}, nil, "register"},
		{"ListProducts", http.MethodGet, "/v1/products", "", nil, nil, "public"},
		{"GetProduct", http.MethodGet, "/v1/products/ROUTE-1", "", nil, nil, "public"},
		{"Me", http.MethodGet, "/v1/me", u.Token, nil, nil, ""},
		{"CreateOrder", http.MethodPost, "/v1/orders", u.Token, apptest.OrderBody(apptest.Line{SKU: "ROUTE-1", Quantity: 1}), []string{key, apptest.NewKey()}, "orders"},
		{"ListOrders", http.MethodGet, "/v1/orders", u.Token, nil, nil, ""},
		{"GetOrder", http.MethodGet, "/v1/orders/" + o.ID, u.Token, nil, nil, ""},
		{"Pay", http.MethodPost, payPath(o.ID), u.Token, map[string]string{"payment_method": "pm_card_ok"}, []string{key, apptest.NewKey()}, "writes"},
		{"ListPayments", http.MethodGet, payPath(o.ID), u.Token, nil, nil, ""},
		{"Cancel", http.MethodPost, "/v1/orders/" + paid.ID + "/cancel", u.Token, nil, nil, "writes"},
		{"AdminCreateProduct", http.MethodPost, "/v1/products", apptest.AdminToken, map[string]any{"sku": "ROUTE-2", "name": "x", "price_cents": 1, "stock": 1}, nil, ""},
		{"AdminUpdateProduct", http.MethodPatch, "/v1/products/ROUTE-1", apptest.AdminToken, map[string]any{"name": "y"}, []string{"If-Match", `"1"`}, ""},
		{"AdminRestock", http.MethodPost, "/v1/products/ROUTE-1/restock", apptest.AdminToken, map[string]int{"quantity": 1}, []string{key, apptest.NewKey()}, ""},
		{"GetEvent", http.MethodGet, "/v1/events/" + ev.ID, "", nil, nil, "public"},
		{"SeatMap", http.MethodGet, "/v1/events/" + ev.ID + "/seats", "", nil, nil, "public"},
		{"HoldSeats", http.MethodPost, "/v1/events/" + ev.ID + "/holds", u.Token, map[string]any{"seats": []string{"A9"}}, []string{key, apptest.NewKey()}, "writes"},
		{"GetHold", http.MethodGet, "/v1/holds/" + held[0].ID, u.Token, nil, nil, ""},
		{"ConfirmHold", http.MethodPost, "/v1/holds/" + held[0].ID + "/confirm", u.Token, nil, []string{key, apptest.NewKey()}, "writes"},
		{"ReleaseHold", http.MethodDelete, "/v1/holds/" + held[1].ID, u.Token, nil, nil, "writes"},
		{"GetBooking", http.MethodGet, "/v1/bookings/" + booked.ID, u.Token, nil, nil, ""},
		{"AdminCreateEvent", http.MethodPost, "/v1/events", apptest.AdminToken, map[string]any{"name": "x", "rows": 1, "seats_per_row": 1}, nil, ""},
		{"Healthz", http.MethodGet, "/healthz", "", nil, nil, ""},
		{"Readyz", http.MethodGet, "/readyz", "", nil, nil, ""},
		{"Metrics", http.MethodGet, "/metrics", "", nil, nil, ""},
		// The user limits run after auth: no user, no count, no header.
		{"CreateOrderNoToken", http.MethodPost, "/v1/orders", "", apptest.OrderBody(apptest.Line{SKU: "ROUTE-1", Quantity: 1}), []string{key, apptest.NewKey()}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rr := r
			if tt.path == "/metrics" {
				rr = r.OffContract("no /metrics on the API's port")
			}
			res := rr.Do(t, tt.method, tt.path, tt.token, tt.body, append(apptest.From(addr), tt.header...)...)
			if res.Status >= 500 || res.Status == http.StatusTooManyRequests {
				t.Fatalf("got %s", res)
			}
			policy, _, _ := apptest.RateLimitOf(res)
			if policy != tt.want {
				t.Errorf("RateLimit policy %q (status %d), want %q", policy, res.Status, tt.want)
			}
			if p := res.Header.Get("RateLimit-Policy"); (p == "") != (tt.want == "") || !strings.HasPrefix(p, `"`+tt.want+`";`) && tt.want != "" {
				t.Errorf("RateLimit-Policy %q, want policy %q", p, tt.want)
			}
		})
	}
}

// TestRateLimit_RedisUnreachable: when the limiter's Redis hangs, the
// service fails open: requests are served, unlimited, each counted as
// fail-open, and none waits long for the limiter.
func TestRateLimit_RedisUnreachable(t *testing.T) {
	e := apptest.NewLimited(t, 1, map[string]string{
		"SHOP_RATE_LIMIT_REDIS":    testenv.Blackhole(t),
		"SHOP_RATE_LIMIT_REGISTER": "1/h",
		"SHOP_RATE_LIMIT_TIMEOUT":  "", // the default bound, as in production
	})
	addr := testenv.ClientAddr()
	for i := range 3 {
		start := time.Now()
		res := apptest.RegisterFrom(t, e.R(0), "open", addr)
		apptest.WantStatus(t, res, http.StatusCreated)
		// Generous: the limiter's bound is 100 ms; go-redis's default read
		// timeout, what the bound prevents, is 5 s.
		if elapsed := time.Since(start); elapsed > 2*time.Second {
			t.Errorf("registration %d took %v with the limiter's Redis hanging", i+1, elapsed)
		}
		if h := res.Header.Get("RateLimit"); h != "" {
			t.Errorf("registration %d: RateLimit %q, want none: nothing was counted", i+1, h)
		}
	}
	if n := e.Count(t, `SELECT count(*)::int FROM users WHERE name = 'open'`); n != 3 {
		t.Errorf("%d users registered, want 3", n)
	}
	apptest.WantMetric(t, e.R(0), `shop_rate_limit_fail_open_total{limit="register"} 3`)
	apptest.WantMetric(t, e.R(0), `shop_rate_limit_requests_total{decision="allowed",limit="register"} 0`)
	// The locks do not use that node: orders still take theirs.
	apptest.MustCreateProduct(t, e.R(0), "OPEN-1", 100, 1)
	u := apptest.Decode[apptest.User](t, apptest.RegisterFrom(t, e.R(0), "buyer", testenv.ClientAddr()))
	apptest.MustCreateOrder(t, e.R(0), u.Token, apptest.Line{SKU: "OPEN-1", Quantity: 1})
}
