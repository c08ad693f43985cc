package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shop-example/shop/harness/apptest"
	"github.com/shop-example/shop/harness/testenv"
)

// TestOrders_FlashSale races 400 buyers, each a distinct user with a distinct
// Idempotency-Key, for 50 units of one SKU across two replicas. Nothing but
// the conditional decrement stands between them and an oversell (the lock is
// per request, not per SKU), so this proves the counter pattern: exactly 50
// orders, stock 0, sold = initial − remaining.
func TestOrders_FlashSale(t *testing.T) {
	const (
		initial = 50
		buyers  = 400
		workers = 32
		sku     = "FLASH-1"
	)
	e := apptest.New(t, 2, nil)
	apptest.MustCreateProduct(t, e.R(0), sku, 1999, initial)
	users := make([]apptest.User, buyers)
	for i := range users {
		users[i] = apptest.MustCreateUser(t, e.R(i), "buyer")
	}
	body, _ := json.Marshal(apptest.OrderBody(apptest.Line{SKU: sku, Quantity: 1}))

	var (
		mu      sync.Mutex
		created []string
		refused = map[string]int{}
	)
	apptest.InParallel(buyers, workers, func(i int) {
		res := e.R(i).Do(t, http.MethodPost, "/v1/orders", users[i].Token, body, "Idempotency-Key", apptest.NewKey())
		mu.Lock()
		defer mu.Unlock()
		switch res.Status {
		case http.StatusCreated:
			var o apptest.Order
			if err := json.Unmarshal(res.Body, &o); err != nil || o.ID == "" {
				t.Errorf("buyer %d: 201 without an order: %s", i, res.Body)
			}
			created = append(created, o.ID)
		case http.StatusConflict:
			refused[res.Code()]++
		default:
			t.Errorf("buyer %d: got %s, want 201 or 409 out_of_stock", i, res)
		}
	})

	if len(created) != initial || refused["out_of_stock"] != buyers-initial || len(refused) != 1 {
		t.Errorf("got %d created and refusals %v, want %d created and %d out_of_stock",
			len(created), refused, initial, buyers-initial)
	}
	remaining := e.Stock(t, sku)
	sold := e.Count(t, `SELECT coalesce(sum(quantity), 0)::int FROM order_items WHERE sku = $1`, sku)
	if remaining != 0 || sold != initial || initial-sold != remaining {
		t.Errorf("stock_available %d, sold %d: want 0 and %d (initial %d − sold = remaining)", remaining, sold, initial, initial)
	}
	if n := e.Count(t, `SELECT count(*)::int FROM orders`); n != initial {
		t.Errorf("count(orders) = %d, want %d", n, initial)
	}
	if n := e.Count(t, `SELECT count(DISTINCT user_id)::int FROM orders`); n != initial {
		t.Errorf("orders belong to %d users, want %d (one each)", n, initial)
	}
	var ids []string
	rows, err := e.DB.Query(context.Background(), `SELECT id::text FROM orders`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	slices.Sort(ids)
	slices.Sort(created)
	if !slices.Equal(ids, created) {
		t.Errorf("the orders in the database are not the ones answered 201")
	}
	// Layer 0 kept every answer: none left claimed, one stored per buyer.
	if n := e.Count(t, `SELECT count(*)::int FROM idempotency_keys WHERE status_code IS NULL`); n != 0 {
		t.Errorf("%d idempotency keys left claimed", n)
	}
	if n := e.Count(t, `SELECT count(*)::int FROM idempotency_keys WHERE status_code = 201`); n != initial {
		t.Errorf("%d keys store a 201, want %d", n, initial)
	}
}

// TestOrders_CreateSameKey sends one user's order twenty times at once with
// one Idempotency-Key, over two replicas. Exactly one order exists
// afterwards, its stock is taken once, and every client that got a 201 got
// the same bytes; the rest were told the request is in progress.
func TestOrders_CreateSameKey(t *testing.T) {
	const (
		n       = 20
		initial = 10
		sku     = "SAME-KEY"
	)
	e := apptest.New(t, 2, nil)
	apptest.MustCreateProduct(t, e.R(0), sku, 500, initial)
	u := apptest.MustCreateUser(t, e.R(0), "alice")
	key := apptest.NewKey()
	body, _ := json.Marshal(apptest.OrderBody(apptest.Line{SKU: sku, Quantity: 3}))

	e.Warm(t, n)
	results := make([]apptest.Response, n)
	testenv.Together(n, func(i int) {
		results[i] = e.R(i).Do(t, http.MethodPost, "/v1/orders", u.Token, body, "Idempotency-Key", key)
	})

	var first []byte
	originals, replays, inProgress := 0, 0, 0
	for i, res := range results {
		switch {
		case res.Status == http.StatusCreated:
			if first == nil {
				first = res.Body
			}
			if !bytes.Equal(res.Body, first) {
				t.Errorf("request %d: 201 body differs:\n%s\nvs\n%s", i, res.Body, first)
			}
			if res.Header.Get("Idempotent-Replayed") == "true" {
				replays++
			} else {
				originals++
			}
		case res.Status == http.StatusConflict && res.Code() == "request_in_progress":
			inProgress++ // checkProblem saw its Retry-After
		default:
			t.Errorf("request %d: got %s, want 201 or 409 request_in_progress", i, res)
		}
	}
	t.Logf("%d original, %d replayed, %d in progress", originals, replays, inProgress)
	if originals != 1 {
		t.Errorf("%d answers ran the request, want exactly 1", originals)
	}
	o := apptest.Decode[apptest.Order](t, apptest.Response{Body: first})

	if n := e.Count(t, `SELECT count(*)::int FROM orders WHERE user_id = $1 AND request_key = $2`, u.ID, key); n != 1 {
		t.Errorf("%d orders for the key, want 1", n)
	}
	if n := e.Count(t, `SELECT count(*)::int FROM orders`); n != 1 {
		t.Errorf("%d orders in all, want 1", n)
	}
	if got := e.Stock(t, sku); got != initial-3 {
		t.Errorf("stock_available %d, want %d (taken once)", got, initial-3)
	}
	var (
		status int
		stored []byte
	)
	err := e.DB.QueryRow(context.Background(), `SELECT status_code, body FROM idempotency_keys
		WHERE principal = $1 AND key = $2 AND completed_at IS NOT NULL`, u.ID, key).Scan(&status, &stored)
	if err != nil {
		t.Fatalf("completed idempotency key: %v", err)
	}
	if status != http.StatusCreated || !bytes.Equal(stored, first) {
		t.Errorf("key stores %d %s, want 201 and the body sent", status, stored)
	}

	// Once the dust settles, the key replays the same order.
	res := e.R(1).Do(t, http.MethodPost, "/v1/orders", u.Token, body, "Idempotency-Key", key)
	apptest.WantStatus(t, res, http.StatusCreated)
	if res.Header.Get("Idempotent-Replayed") != "true" || !bytes.Equal(res.Body, first) {
		t.Errorf("late retry: got %s (replayed %q), want the replay of order %s", res, res.Header.Get("Idempotent-Replayed"), o.ID)
	}
}

// TestOrders_CancelRace cancels one order twenty times at once over two
// replicas. The stock comes back exactly once and one release is recorded,
// whoever wins; every 200 shows the same cancelled order.
func TestOrders_CancelRace(t *testing.T) {
	const (
		n       = 20
		initial = 10
		sku     = "CANCEL-RACE"
	)
	e := apptest.New(t, 2, nil)
	apptest.MustCreateProduct(t, e.R(0), sku, 250, initial)
	u := apptest.MustCreateUser(t, e.R(0), "bob")
	o := apptest.MustCreateOrder(t, e.R(0), u.Token, apptest.Line{SKU: sku, Quantity: 4})
	if got := e.Stock(t, sku); got != initial-4 {
		t.Fatalf("stock after the order %d, want %d", got, initial-4)
	}

	e.Warm(t, n)
	results := make([]apptest.Response, n)
	testenv.Together(n, func(i int) {
		results[i] = e.R(i).Do(t, http.MethodPost, "/v1/orders/"+o.ID+"/cancel", u.Token, nil)
	})

	var first []byte
	ok, busy := 0, 0
	for i, res := range results {
		switch {
		case res.Status == http.StatusOK:
			ok++
			if first == nil {
				first = res.Body
			}
			got := apptest.Decode[apptest.Order](t, res)
			if got.Status != "cancelled" || got.Version != 2 || !bytes.Equal(res.Body, first) {
				t.Errorf("cancel %d: got %s, want the cancelled order at version 2, as every other 200", i, res.Body)
			}
		case res.Status == http.StatusConflict && res.Code() == "resource_busy":
			busy++ // checkProblem saw its Retry-After
		default:
			t.Errorf("cancel %d: got %s, want 200 cancelled or 409 resource_busy", i, res)
		}
	}
	t.Logf("%d cancelled, %d resource_busy", ok, busy)
	if ok == 0 {
		t.Errorf("no cancel succeeded")
	}

	if got := e.Stock(t, sku); got != initial {
		t.Errorf("stock_available %d, want %d (returned exactly once)", got, initial)
	}
	if n := e.Count(t, `SELECT count(*)::int FROM stock_releases WHERE order_id = $1 AND reason = 'cancelled'`, o.ID); n != 1 {
		t.Errorf("%d cancelled releases recorded, want 1", n)
	}
	if n := e.Count(t, `SELECT count(*)::int FROM stock_releases`); n != 1 {
		t.Errorf("%d releases recorded in all, want 1", n)
	}
	if n := e.Count(t, `SELECT count(*)::int FROM orders WHERE id = $1 AND status = 'cancelled' AND version = 2`, o.ID); n != 1 {
		t.Errorf("order is not cancelled at version 2 (one status change)")
	}
}

// TestOrders_ExpiryRace runs the expiry job of three replicas at once, past
// the orders' TTL, while their users cancel a third of the same orders over
// HTTP. Every order ends either cancelled or expired, never both; each
// release is recorded once and the stock is back to where it started.
//
// The orders fall due one second apart and the clock sweeps across their
// deadlines while the jobs run in a loop, so expiries and cancels
// interleave instead of one job taking every order in its first batch.
func TestOrders_ExpiryRace(t *testing.T) {
	const (
		orders  = 30
		initial = 200
	)
	e := apptest.New(t, 3, nil)
	skus := []string{"EXP-A", "EXP-B", "EXP-C"}
	for _, s := range skus {
		apptest.MustCreateProduct(t, e.R(0), s, 100, initial)
	}
	users := []apptest.User{apptest.MustCreateUser(t, e.R(0), "u0"), apptest.MustCreateUser(t, e.R(1), "u1"), apptest.MustCreateUser(t, e.R(2), "u2")}

	type placed struct {
		apptest.Order
		user apptest.User
	}
	all := make([]placed, orders)
	for i := range all {
		lines := []apptest.Line{{SKU: "EXP-A", Quantity: i%3 + 1}}
		if i%2 == 0 {
			lines = append(lines, apptest.Line{SKU: "EXP-B", Quantity: 2})
		}
		if i%5 == 0 {
			lines = append(lines, apptest.Line{SKU: "EXP-C", Quantity: 5})
		}
		u := users[i%len(users)]
		all[i] = placed{Order: apptest.MustCreateOrder(t, e.R(i), u.Token, lines...), user: u}
		e.Clock.Advance(time.Second)
	}
	ctx := context.Background()
	if n, err := e.Replicas[0].App.Orders.ExpireDue(ctx); err != nil || n != 0 {
		t.Fatalf("ExpireDue before the TTL: %d, %v; want 0, nil", n, err)
	}

	var cancelTargets []int
	for i := range all {
		if i%3 == 0 {
			cancelTargets = append(cancelTargets, i)
		}
	}
	jobs := len(e.Replicas)
	e.Warm(t, len(cancelTargets))
	e.Clock.Advance(apptest.OrderTTL - orders*time.Second) // the first order is due
	var (
		expired  atomic.Int64
		sweeping atomic.Bool
	)
	sweeping.Store(true)
	cancels := make([]apptest.Response, len(cancelTargets))
	testenv.Together(1+jobs+len(cancelTargets), func(i int) {
		switch {
		case i == 0: // the clock crosses one deadline per tick
			for range orders + 1 {
				time.Sleep(time.Millisecond)
				e.Clock.Advance(time.Second)
			}
			sweeping.Store(false)
		case i <= jobs: // the replicas' expiry jobs, until one run after the sweep
			for {
				last := !sweeping.Load()
				n, err := e.Replicas[i-1].App.Orders.ExpireDue(ctx)
				if err != nil {
					t.Errorf("ExpireDue on replica %d: %v", i-1, err)
					return
				}
				expired.Add(int64(n))
				if last {
					return
				}
			}
		default:
			j := i - 1 - jobs
			p := all[cancelTargets[j]]
			cancels[j] = e.R(i).Do(t, http.MethodPost, "/v1/orders/"+p.ID+"/cancel", p.user.Token, nil)
		}
	})

	status := func(id string) string {
		var s string
		if err := e.DB.QueryRow(ctx, `SELECT status FROM orders WHERE id = $1`, id).Scan(&s); err != nil {
			t.Fatalf("status of %s: %v", id, err)
		}
		return s
	}
	won := 0
	for j, res := range cancels {
		id := all[cancelTargets[j]].ID
		switch {
		case res.Status == http.StatusOK && apptest.Decode[apptest.Order](t, res).Status == "cancelled":
			won++
			if s := status(id); s != "cancelled" {
				t.Errorf("order %s: cancel answered 200 but the order is %s", id, s)
			}
		case res.Status == http.StatusConflict && res.Code() == "invalid_state":
			if s := status(id); s != "expired" {
				t.Errorf("order %s: cancel answered invalid_state but the order is %s", id, s)
			}
		default:
			t.Errorf("cancel of %s: got %s, want 200 cancelled or 409 invalid_state", id, res)
		}
	}
	t.Logf("expiry jobs expired %d, users cancelled %d of %d", expired.Load(), won, len(cancelTargets))

	if n := e.Count(t, `SELECT count(*)::int FROM orders WHERE status NOT IN ('cancelled', 'expired')`); n != 0 {
		t.Errorf("%d orders neither cancelled nor expired", n)
	}
	if n := e.Count(t, `SELECT count(*)::int FROM orders WHERE status = 'expired'`); n != int(expired.Load()) {
		t.Errorf("%d orders expired, the jobs report %d", n, expired.Load())
	}
	if n := e.Count(t, `SELECT count(*)::int FROM orders WHERE status = 'cancelled'`); n != won {
		t.Errorf("%d orders cancelled, %d cancels answered 200", n, won)
	}
	if n := e.Count(t, `SELECT count(*)::int FROM stock_releases`); n != orders {
		t.Errorf("count(stock_releases) = %d, want %d (one per order)", n, orders)
	}
	if n := e.Count(t, `SELECT count(*)::int FROM orders o JOIN stock_releases r ON r.order_id = o.id
		WHERE r.reason <> o.status OR o.version <> 2`); n != 0 {
		t.Errorf("%d orders whose release disagrees with their status, or changed status more than once", n)
	}
	for _, s := range skus {
		if got := e.Stock(t, s); got != initial {
			t.Errorf("%s: stock_available %d, want %d (all returned, once)", s, got, initial)
		}
	}
	if n, err := e.R(1).App.Orders.ExpireDue(ctx); err != nil || n != 0 {
		t.Errorf("ExpireDue afterwards: %d, %v; want 0, nil", n, err)
	}
}
