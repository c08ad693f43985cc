package app_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shop-example/shop/harness/apptest"
	"github.com/shop-example/shop/harness/gateway"
	"github.com/shop-example/shop/harness/gateway/gatewaytest"
	"github.com/shop-example/shop/harness/testenv"
)

// paymentJSON is a payment as API.md shows it.
type paymentJSON struct {
	ID          string  `json:"id"`
	OrderID     string  `json:"order_id"`
	Status      string  `json:"status"`
	AmountCents int64   `json:"amount_cents"`
	ChargeID    *string `json:"charge_id"`
	CreatedAt   string  `json:"created_at"`
}

// TestPayments_Storm is the double-click storm across replicas: for each
// of 20 orders, 15 pay requests at once over two servers, ten of them a
// client retrying with one Idempotency-Key and five fresh clicks with keys
// of their own. Every order must end paid, with exactly one succeeded
// payment in the database and exactly one charge in the gateway's audit.
// Clicks told to retry later come back with the same key.
//
// A click may be answered 202: its charge was sent and its outcome is not
// known within the payment budget (API.md, "Payments"). Every fourth order
// is paid with pm_card_slow, whose answer the gateway holds back past the
// budget, so that answer is given in every run; on a loaded machine a
// payment of the others may get it too, when the database or the lock
// quorum does not answer in time. A client told 202 does what API.md
// says: it polls GET /v1/orders/{id}/payments until the payment has
// settled, which here is once the reconciler has run; the payment the 202
// named must then have succeeded with the order's one charge.
func TestPayments_Storm(t *testing.T) {
	if testing.Short() {
		t.Skip("races real PostgreSQL, Redis and a gateway")
	}
	const (
		orders     = 20
		sameKey    = 10
		ownKeys    = 5
		perOrder   = sameKey + ownKeys
		slowEvery  = 4
		unitPrice  = 1999
		orderStock = orders
	)
	e := apptest.New(t, 2, nil)
	apptest.MustCreateProduct(t, e.R(0), "SKU-STORM", unitPrice, orderStock)
	type target struct {
		user   apptest.User
		order  apptest.Order
		key    string
		method string
	}
	targets := make([]target, orders)
	for i := range targets {
		u := apptest.MustCreateUser(t, e.R(i), "storm-buyer")
		method := gateway.MethodOK
		if i%slowEvery == 0 {
			method = gateway.MethodSlow
		}
		targets[i] = target{user: u, order: apptest.MustCreateOrder(t, e.R(i), u.Token, apptest.Line{SKU: "SKU-STORM", Quantity: 1}),
			key: apptest.NewKey(), method: method}
	}
	e.Warm(t, 32)

	var mu sync.Mutex
	answers := map[string]int{}
	replays := map[string]map[string]bool{}     // order → distinct 201 bodies under the shared key
	keyPayments := map[string]map[string]bool{} // order → payments the shared key's 201s and 202s name
	accepted := map[string]map[string]bool{}    // order → payments answered 202, to follow up
	testenv.Together(orders*perOrder, func(i int) {
		tg := targets[i%orders]
		click := i / orders
		key := tg.key
		if click >= sameKey {
			key = apptest.NewKey()
		}
		// A click told to come back (409 with Retry-After) does, a few
		// times at most, with the same key, as a well-behaved client.
		var res apptest.Response
		for attempt := 1; ; attempt++ {
			res = e.R(i+attempt).Do(t, http.MethodPost, payPath(tg.order.ID), tg.user.Token,
				map[string]string{"payment_method": tg.method}, "Idempotency-Key", key)
			if res.Header.Get("Retry-After") == "" || attempt == 5 {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		label := http.StatusText(res.Status)
		if res.Status >= 400 {
			label = res.Code()
		}
		var p paymentJSON
		if res.Status == http.StatusCreated || res.Status == http.StatusAccepted {
			if err := json.Unmarshal(res.Body, &p); err != nil || p.OrderID != tg.order.ID {
				t.Errorf("order %s: %s, want a payment of the order", tg.order.ID, res)
			}
		}
		if res.Status == http.StatusAccepted {
			if p.Status != "processing" || res.Header.Get("Location") != payPath(tg.order.ID) {
				t.Errorf("order %s: 202 with %s and Location %q, want the processing payment and %s to poll",
					tg.order.ID, res.Body, res.Header.Get("Location"), payPath(tg.order.ID))
			}
		}
		mu.Lock()
		defer mu.Unlock()
		answers[label]++
		add := func(m map[string]map[string]bool, v string) {
			if m[tg.order.ID] == nil {
				m[tg.order.ID] = map[string]bool{}
			}
			m[tg.order.ID][v] = true
		}
		if res.Status == http.StatusAccepted {
			add(accepted, p.ID)
		}
		if key != tg.key {
			return
		}
		if res.Status == http.StatusCreated {
			add(replays, string(res.Body))
		}
		if res.Status == http.StatusCreated || res.Status == http.StatusAccepted {
			add(keyPayments, p.ID)
		}
	})
	t.Logf("answers: %v", answers)
	// The slow charges' answers go out, and the reconciler settles what
	// the storm left processing.
	e.Slow.Release()
	e.SettleLeftovers(t)

	for code := range answers {
		switch code {
		case "Created", "Accepted", "request_in_progress", "resource_busy", "invalid_state":
		default:
			t.Errorf("unexpected answer %q (%d times)", code, answers[code])
		}
	}
	followed := 0
	for _, tg := range targets {
		id := tg.order.ID
		if n := len(e.Gateway.Charges(id)); n != 1 {
			t.Errorf("order %s: %d charges in the gateway's audit, want 1", id, n)
		}
		if n := e.Count(t, `SELECT count(*) FROM payments WHERE order_id = $1 AND status = 'succeeded'`, id); n != 1 {
			t.Errorf("order %s: %d succeeded payments, want 1", id, n)
		}
		if n := e.Count(t, `SELECT count(*) FROM payments WHERE order_id = $1 AND status = 'processing'`, id); n != 0 {
			t.Errorf("order %s: %d payments left processing", id, n)
		}
		res := e.R(0).Do(t, http.MethodGet, "/v1/orders/"+id, tg.user.Token, nil)
		if got := apptest.Decode[apptest.Order](t, res); got.Status != "paid" {
			t.Errorf("order %s is %s, want paid", id, got.Status)
		}
		if n := len(replays[id]); n > 1 {
			t.Errorf("order %s: the shared key got %d different 201 bodies, want one replayed byte for byte", id, n)
		}
		if n := len(keyPayments[id]); n > 1 {
			t.Errorf("order %s: the shared key's answers name %d payments, want one", id, n)
		}
		// The audit agrees with the database: the charge is the one the
		// succeeded payment recorded.
		charges := e.Gateway.Charges(id)
		if len(charges) == 1 {
			if n := e.Count(t, `SELECT count(*) FROM payments WHERE order_id = $1 AND status = 'succeeded' AND charge_id = $2`,
				id, charges[0].ID); n != 1 {
				t.Errorf("order %s: the gateway's charge %s is not the one recorded", id, charges[0].ID)
			}
		}
		// The clients told 202 poll the order's payments: each finds its
		// payment settled, succeeded with the order's one charge. A slow
		// order's payment is always among them, so this part always runs.
		if len(accepted[id]) == 0 {
			if tg.method == gateway.MethodSlow {
				t.Errorf("order %s, paid with %s: no click was answered 202", id, tg.method)
			}
			continue
		}
		items := payList(t, e.R(0), tg.user.Token, id)
		for pid := range accepted[id] {
			followed++
			i := slices.IndexFunc(items, func(p paymentJSON) bool { return p.ID == pid })
			switch {
			case i < 0:
				t.Errorf("order %s: payment %s, answered 202, is not among its payments %+v", id, pid, items)
			case items[i].Status != "succeeded" || items[i].ChargeID == nil:
				t.Errorf("order %s: payment %s, answered 202, is %s after the reconciler, want succeeded", id, pid, items[i].Status)
			case len(charges) == 1 && *items[i].ChargeID != charges[0].ID:
				t.Errorf("order %s: payment %s, answered 202, has charge %s, want the gateway's %s", id, pid, *items[i].ChargeID, charges[0].ID)
			}
		}
	}
	t.Logf("%d payments answered 202 were followed up", followed)
	if n := e.Count(t, `SELECT count(*) FROM orders WHERE status = 'paid'`); n != orders {
		t.Errorf("%d orders paid, want %d", n, orders)
	}
	e.AssertBooks(t)
}

// TestPayments_ReconcilersWithoutLock is the outage that once cost paid
// orders their money: no Redis node reachable (the lock degrades and every
// replica proceeds unlocked) and the gateway down while payments are made,
// so every payment is left processing; then the gateway comes back and the
// reconcilers of both replicas settle the same payments at once, several
// passes each. Every order ends paid with its one charge, and not one
// charge is refunded.
func TestPayments_ReconcilersWithoutLock(t *testing.T) {
	if testing.Short() {
		t.Skip("races real PostgreSQL and a gateway")
	}
	const orders = 40
	gw, _ := gatewaytest.Start(t, gateway.Options{SlowDelay: time.Second})
	var down atomic.Bool
	down.Store(true)
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if down.Load() && req.Method == http.MethodPost {
			http.Error(w, "gateway down", http.StatusBadGateway)
			return
		}
		gw.Handler().ServeHTTP(w, req)
	}))
	t.Cleanup(proxy.Close)
	e := apptest.New(t, 2, map[string]string{
		"SHOP_REDIS_ADDRS":     "127.0.0.1:1,127.0.0.1:2,127.0.0.1:3", // nothing listens: no quorum
		"SHOP_GATEWAY_URL":     proxy.URL,
		"SHOP_GATEWAY_TIMEOUT": "500ms",
	})
	apptest.MustCreateProduct(t, e.R(0), "SKU-OUTAGE", 1500, orders)
	users := make([]apptest.User, orders)
	ids := make([]string, orders)
	for i := range ids {
		users[i] = apptest.MustCreateUser(t, e.R(i), "outage")
		ids[i] = apptest.MustCreateOrder(t, e.R(i), users[i].Token, apptest.Line{SKU: "SKU-OUTAGE", Quantity: 1}).ID
	}
	testenv.Together(orders, func(i int) {
		res := e.R(i).Do(t, http.MethodPost, "/v1/orders/"+ids[i]+"/payments", users[i].Token,
			map[string]string{"payment_method": "pm_card_ok"}, "Idempotency-Key", apptest.NewKey())
		if res.Status != http.StatusAccepted {
			t.Errorf("pay with the gateway down: %s, want 202 processing", res)
		}
	})
	if n := e.Count(t, `SELECT count(*) FROM payments WHERE status = 'processing'`); n != orders {
		t.Fatalf("%d payments processing, want %d", n, orders)
	}

	down.Store(false)
	e.Clock.Advance(e.Cfg.ReconcileAfter + time.Second)
	testenv.Together(2*3, func(i int) {
		for range 3 {
			if _, err := e.R(i).App.Payments.Reconcile(context.Background()); err != nil {
				t.Errorf("reconcile on replica %d: %v", i%2, err)
			}
		}
	})
	if n := e.Count(t, `SELECT count(*) FROM orders WHERE status = 'paid'`); n != orders {
		t.Errorf("%d orders paid, want %d", n, orders)
	}
	if charges := gw.Charges(""); len(charges) != orders {
		t.Errorf("%d charges, want %d", len(charges), orders)
	}
	e.AssertBooks(t)
}
