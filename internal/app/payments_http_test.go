package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shop-example/shop/harness/apptest"
	"github.com/shop-example/shop/harness/gateway"
)

// The payment JSON (paymentJSON) is declared in payments_race_test.go.

// payPath is the payments route of an order.
func payPath(orderID string) string { return "/v1/orders/" + orderID + "/payments" }

// payReq sends POST /v1/orders/{id}/payments with method under key.
func payReq(t testing.TB, r *apptest.Replica, token, orderID, method, key string) apptest.Response {
	t.Helper()
	return r.Do(t, http.MethodPost, payPath(orderID), token, map[string]string{"payment_method": method}, "Idempotency-Key", key)
}

// payList returns GET /v1/orders/{id}/payments.
func payList(t testing.TB, r *apptest.Replica, token, orderID string) []paymentJSON {
	t.Helper()
	res := r.Do(t, http.MethodGet, payPath(orderID), token, nil)
	apptest.WantStatus(t, res, http.StatusOK)
	return apptest.Decode[apptest.Page[paymentJSON]](t, res).Items
}

// payOrderStatus returns the order's status as GET /v1/orders/{id} shows it.
func payOrderStatus(t testing.TB, r *apptest.Replica, token, orderID string) string {
	t.Helper()
	res := r.Do(t, http.MethodGet, "/v1/orders/"+orderID, token, nil)
	apptest.WantStatus(t, res, http.StatusOK)
	return apptest.Decode[apptest.Order](t, res).Status
}

// payWantCharges fails unless the gateway's audit holds n charges for the
// order, and returns them.
func payWantCharges(t testing.TB, e *apptest.Env, orderID string, n int) []gateway.Charge {
	t.Helper()
	charges := e.Gateway.Charges(orderID)
	if len(charges) != n {
		t.Fatalf("order %s: %d charges in the gateway's audit, want %d: %+v", orderID, len(charges), n, charges)
	}
	return charges
}

// payWaitFor polls cond every 10ms until it holds or timeout passes.
func payWaitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %s: still waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestPayments_Pay(t *testing.T) {
	e := apptest.New(t, 2, nil)
	apptest.MustCreateProduct(t, e.R(0), "PAY-OK", 1250, 10)
	u := apptest.MustCreateUser(t, e.R(0), "paula")
	o := apptest.MustCreateOrder(t, e.R(0), u.Token, apptest.Line{SKU: "PAY-OK", Quantity: 3})
	if o.TotalCents != 3*1250 {
		t.Fatalf("order total %d, want %d", o.TotalCents, 3*1250)
	}
	key := apptest.NewKey()

	first := payReq(t, e.R(0), u.Token, o.ID, gateway.MethodOK, key)
	apptest.WantStatus(t, first, http.StatusCreated)
	p := apptest.Decode[paymentJSON](t, first)
	charges := payWantCharges(t, e, o.ID, 1)

	t.Run("Created", func(t *testing.T) {
		if !uuidPattern.MatchString(p.ID) || p.OrderID != o.ID || p.Status != "succeeded" || p.AmountCents != o.TotalCents {
			t.Errorf("got %s, want a succeeded payment of order %s for %d cents", first.Body, o.ID, o.TotalCents)
		}
		if p.ChargeID == nil || *p.ChargeID != charges[0].ID {
			t.Errorf("charge_id %v, want the gateway's charge %s", p.ChargeID, charges[0].ID)
		}
		if at, err := time.Parse(time.RFC3339, p.CreatedAt); err != nil || !strings.HasSuffix(p.CreatedAt, "Z") || at.IsZero() {
			t.Errorf("created_at %q, want an RFC 3339 UTC time", p.CreatedAt)
		}
		if loc := first.Header.Get("Location"); loc != payPath(o.ID) {
			t.Errorf("Location %q, want %s", loc, payPath(o.ID))
		}
		if ct := first.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
			t.Errorf("Content-Type %q, want application/json", ct)
		}
	})
	t.Run("OrderPaid", func(t *testing.T) {
		if got := payOrderStatus(t, e.R(1), u.Token, o.ID); got != "paid" {
			t.Errorf("order is %s, want paid", got)
		}
		if got := e.Stock(t, "PAY-OK"); got != 7 {
			t.Errorf("stock %d, want 7 (a paid order keeps its stock)", got)
		}
	})
	t.Run("Charge", func(t *testing.T) {
		ch := charges[0]
		if ch.Status != gateway.StatusSucceeded || ch.AmountCents != o.TotalCents || ch.PaymentMethod != gateway.MethodOK {
			t.Errorf("charge %+v, want succeeded, %d cents by %s", ch, o.TotalCents, gateway.MethodOK)
		}
	})
	t.Run("List", func(t *testing.T) {
		items := payList(t, e.R(1), u.Token, o.ID)
		if len(items) != 1 || items[0].ID != p.ID || items[0].Status != "succeeded" ||
			items[0].ChargeID == nil || *items[0].ChargeID != *p.ChargeID || items[0].AmountCents != p.AmountCents ||
			items[0].CreatedAt != p.CreatedAt || items[0].OrderID != o.ID {
			t.Errorf("list %+v, want just the payment %s", items, first.Body)
		}
	})
	t.Run("Replay", func(t *testing.T) {
		for i := range 2 { // the other replica, then the one that charged
			res := payReq(t, e.R(i+1), u.Token, o.ID, gateway.MethodOK, key)
			apptest.WantStatus(t, res, http.StatusCreated)
			if !bytes.Equal(res.Body, first.Body) {
				t.Errorf("replay on replica %d:\n%s\nfirst answer:\n%s", (i+1)%2, res.Body, first.Body)
			}
			if res.Header.Get("Idempotent-Replayed") != "true" {
				t.Errorf("replay on replica %d lacks Idempotent-Replayed: true", (i+1)%2)
			}
		}
		payWantCharges(t, e, o.ID, 1)
	})
	t.Run("AgainWithNewKey", func(t *testing.T) {
		res := payReq(t, e.R(1), u.Token, o.ID, gateway.MethodOK, apptest.NewKey())
		apptest.WantProblem(t, res, http.StatusConflict, "invalid_state")
		if d := res.Problem().Detail; !strings.Contains(d, "paid") {
			t.Errorf("detail %q does not say the order is paid", d)
		}
		payWantCharges(t, e, o.ID, 1)
	})
	t.Run("Metrics", func(t *testing.T) {
		// One payment began, on replica 0; the replays began none.
		apptest.WantMetric(t, e.R(0), `shop_payment_attempts_total 1`)
		apptest.WantMetric(t, e.R(0), `shop_payment_outcomes_total{outcome="succeeded"} 1`)
		apptest.WantMetric(t, e.R(1), `shop_payment_attempts_total 0`)
	})

	if n := e.Count(t, `SELECT count(*) FROM payments WHERE order_id = $1`, o.ID); n != 1 {
		t.Errorf("%d payment rows, want 1", n)
	}
	if n := e.Count(t, `SELECT count(*) FROM payments WHERE order_id = $1 AND status = 'succeeded' AND charge_id = $2`, o.ID, charges[0].ID); n != 1 {
		t.Errorf("%d succeeded payments recording charge %s, want 1", n, charges[0].ID)
	}
	e.AssertBooks(t)
}

func TestPayments_Declined(t *testing.T) {
	e := apptest.New(t, 1, nil)
	r := e.R(0)
	apptest.MustCreateProduct(t, r, "PAY-DECL", 500, 10)
	u := apptest.MustCreateUser(t, r, "dora")
	o := apptest.MustCreateOrder(t, r, u.Token, apptest.Line{SKU: "PAY-DECL", Quantity: 2})
	key := apptest.NewKey()

	declined := payReq(t, r, u.Token, o.ID, gateway.MethodDeclined, key)
	apptest.WantProblem(t, declined, http.StatusPaymentRequired, "payment_declined")
	if d := declined.Problem().Detail; !strings.Contains(d, "declined") {
		t.Errorf("detail %q does not give the gateway's reason", d)
	}
	t.Run("PaymentFailed", func(t *testing.T) {
		items := payList(t, r, u.Token, o.ID)
		if len(items) != 1 || items[0].Status != "failed" || items[0].ChargeID != nil || items[0].AmountCents != o.TotalCents {
			t.Errorf("payments %+v, want one failed payment without a charge", items)
		}
		if got := payOrderStatus(t, r, u.Token, o.ID); got != "pending_payment" {
			t.Errorf("order is %s, want pending_payment", got)
		}
		payWantCharges(t, e, o.ID, 0)
	})
	t.Run("Replay", func(t *testing.T) {
		res := payReq(t, r, u.Token, o.ID, gateway.MethodDeclined, key)
		apptest.WantProblem(t, res, http.StatusPaymentRequired, "payment_declined")
		if !bytes.Equal(res.Body, declined.Body) || res.Header.Get("Idempotent-Replayed") != "true" {
			t.Errorf("replay %s (replayed %q), want the first answer %s replayed", res, res.Header.Get("Idempotent-Replayed"), declined.Body)
		}
		if n := e.Count(t, `SELECT count(*) FROM payments WHERE order_id = $1`, o.ID); n != 1 {
			t.Errorf("%d payment rows after the replay, want 1", n)
		}
	})
	t.Run("PaidWithNewKey", func(t *testing.T) {
		res := payReq(t, r, u.Token, o.ID, gateway.MethodOK, apptest.NewKey())
		apptest.WantStatus(t, res, http.StatusCreated)
		p := apptest.Decode[paymentJSON](t, res)
		charges := payWantCharges(t, e, o.ID, 1)
		if p.Status != "succeeded" || p.ChargeID == nil || *p.ChargeID != charges[0].ID {
			t.Errorf("got %s, want succeeded with charge %s", res.Body, charges[0].ID)
		}
		items := payList(t, r, u.Token, o.ID)
		if len(items) != 2 || items[0].Status != "failed" || items[1].ID != p.ID || items[1].Status != "succeeded" {
			t.Errorf("payments %+v, want the failed one, then the succeeded one", items)
		}
		if got := payOrderStatus(t, r, u.Token, o.ID); got != "paid" {
			t.Errorf("order is %s, want paid", got)
		}
		apptest.WantMetric(t, r, `shop_payment_outcomes_total{outcome="failed"} 1`)
	})

	if n := e.Count(t, `SELECT count(*) FROM payments WHERE order_id = $1 AND status = 'succeeded'`, o.ID); n != 1 {
		t.Errorf("%d succeeded payments, want 1", n)
	}
	if n := e.Count(t, `SELECT count(*) FROM payments WHERE order_id = $1 AND status = 'failed' AND charge_id IS NULL`, o.ID); n != 1 {
		t.Errorf("%d failed payments without a charge, want 1", n)
	}
	e.AssertBooks(t)
}

// TestPayments_Flaky: the gateway fails the first attempt of a key and
// charges nothing; the client tries again with the same key, which is the
// only way the charge can succeed (a new key would fail first again).
func TestPayments_Flaky(t *testing.T) {
	e := apptest.New(t, 1, nil)
	r := e.R(0)
	apptest.MustCreateProduct(t, r, "PAY-FLAKY", 700, 10)
	u := apptest.MustCreateUser(t, r, "fritz")
	o := apptest.MustCreateOrder(t, r, u.Token, apptest.Line{SKU: "PAY-FLAKY", Quantity: 1})

	res := payReq(t, r, u.Token, o.ID, gateway.MethodFlaky, apptest.NewKey())
	apptest.WantStatus(t, res, http.StatusCreated)
	p := apptest.Decode[paymentJSON](t, res)
	charges := payWantCharges(t, e, o.ID, 1)
	if p.Status != "succeeded" || p.ChargeID == nil || *p.ChargeID != charges[0].ID {
		t.Errorf("got %s, want succeeded with charge %s", res.Body, charges[0].ID)
	}
	if got := payOrderStatus(t, r, u.Token, o.ID); got != "paid" {
		t.Errorf("order is %s, want paid", got)
	}
	if n := e.Count(t, `SELECT count(*) FROM payments WHERE order_id = $1`, o.ID); n != 1 {
		t.Errorf("%d payment rows, want 1 (the retry is the same payment)", n)
	}
	e.AssertBooks(t)
}

// TestPayments_OutcomeUnknown: the gateway charges but answers after the
// client's timeout. The request answers 202 with the payment processing;
// the order waits for it, even past its expiry time, and the reconciler
// settles it with the same key, without a second charge.
func TestPayments_OutcomeUnknown(t *testing.T) {
	e := apptest.New(t, 1, map[string]string{
		"SHOP_GATEWAY_TIMEOUT":    "200ms",
		"SHOP_GATEWAY_SLOW_DELAY": "1m", // answered once the test releases it
	})
	r := e.R(0)
	ctx := context.Background()
	apptest.MustCreateProduct(t, r, "PAY-SLOW", 900, 10)
	u := apptest.MustCreateUser(t, r, "sly")
	o := apptest.MustCreateOrder(t, r, u.Token, apptest.Line{SKU: "PAY-SLOW", Quantity: 2})

	res := payReq(t, r, u.Token, o.ID, gateway.MethodSlow, apptest.NewKey())
	apptest.WantStatus(t, res, http.StatusAccepted)
	p := apptest.Decode[paymentJSON](t, res)
	if p.Status != "processing" || p.ChargeID != nil || p.OrderID != o.ID || p.AmountCents != o.TotalCents {
		t.Fatalf("got %s, want a processing payment of order %s without a charge", res.Body, o.ID)
	}
	if loc := res.Header.Get("Location"); loc != payPath(o.ID) {
		t.Errorf("Location %q, want %s to poll", loc, payPath(o.ID))
	}
	charge := payWantCharges(t, e, o.ID, 1)[0] // made, only its answer was late

	t.Run("Processing", func(t *testing.T) {
		items := payList(t, r, u.Token, o.ID)
		if len(items) != 1 || items[0].ID != p.ID || items[0].Status != "processing" || items[0].ChargeID != nil {
			t.Errorf("payments %+v, want the one processing payment", items)
		}
		if got := payOrderStatus(t, r, u.Token, o.ID); got != "paying" {
			t.Errorf("order is %s, want paying", got)
		}
		apptest.WantMetric(t, r, `shop_payment_outcomes_total{outcome="unknown"} 1`)
	})
	t.Run("NewKeyWhileInFlight", func(t *testing.T) {
		res := payReq(t, r, u.Token, o.ID, gateway.MethodOK, apptest.NewKey())
		apptest.WantProblem(t, res, http.StatusConflict, "resource_busy")
		// Come back when the payment in flight has settled: within its
		// request's budget, not a second later.
		wait, err := strconv.Atoi(res.Header.Get("Retry-After"))
		if budget := int(e.Cfg.PaymentBudget.Seconds()); err != nil || wait < budget-1 || wait > budget {
			t.Errorf("Retry-After %q, want about the payment budget (%ds)", res.Header.Get("Retry-After"), budget)
		}
		var doc struct {
			PaymentsURL string `json:"payments_url"`
		}
		if err := json.Unmarshal(res.Body, &doc); err != nil || doc.PaymentsURL != payPath(o.ID) {
			t.Errorf("payments_url %q, want %s to look at", doc.PaymentsURL, payPath(o.ID))
		}
		payWantCharges(t, e, o.ID, 1)
		if n := e.Count(t, `SELECT count(*) FROM payments WHERE order_id = $1`, o.ID); n != 1 {
			t.Errorf("%d payment rows, want 1", n)
		}
	})
	t.Run("NotDueYet", func(t *testing.T) {
		if n, err := r.App.Payments.Reconcile(ctx); err != nil || n != 0 {
			t.Errorf("Reconcile before the reconcile delay = %d, %v; want 0, nil", n, err)
		}
		// Not only settled none: looked at none, so it did not ask the
		// gateway about a payment whose request may still be running.
		if m := apptest.Scrape(t, r); strings.Contains(m, "shop_payment_reconciliations_total{") {
			t.Errorf("the reconciler looked at a payment before its delay:\n%s", apptest.GrepLines(m, "shop_payment_reconciliations_total"))
		}
	})
	t.Run("ExpiryWaits", func(t *testing.T) {
		// Past the order's expiry time and the reconcile delay at once.
		e.Clock.Advance(max(apptest.OrderTTL, e.Cfg.ReconcileAfter) + time.Second)
		if n, err := r.App.Orders.ExpireDue(ctx); err != nil || n != 0 {
			t.Errorf("ExpireDue = %d, %v; want 0: the order's payment is processing", n, err)
		}
		if got := payOrderStatus(t, r, u.Token, o.ID); got != "paying" {
			t.Errorf("order is %s, want paying while its payment is processing", got)
		}
		if got := e.Stock(t, "PAY-SLOW"); got != 8 {
			t.Errorf("stock %d, want 8 (still reserved)", got)
		}
	})
	t.Run("Reconciled", func(t *testing.T) {
		// The gateway answers this charge's key once its hold-back is over.
		e.Slow.Release()
		if n, err := r.App.Payments.Reconcile(ctx); err != nil || n != 1 {
			t.Fatalf("Reconcile = %d, %v; want 1, nil", n, err)
		}
		apptest.WantMetric(t, r, `shop_payment_reconciliations_total{outcome="succeeded"} 1`)
		items := payList(t, r, u.Token, o.ID)
		if len(items) != 1 || items[0].ID != p.ID || items[0].Status != "succeeded" ||
			items[0].ChargeID == nil || *items[0].ChargeID != charge.ID {
			t.Errorf("payments %+v, want payment %s succeeded with charge %s", items, p.ID, charge.ID)
		}
		if got := payOrderStatus(t, r, u.Token, o.ID); got != "paid" {
			t.Errorf("order is %s, want paid", got)
		}
		payWantCharges(t, e, o.ID, 1)
		if n, err := r.App.Payments.Reconcile(ctx); err != nil || n != 0 {
			t.Errorf("Reconcile again = %d, %v; want 0, nil", n, err)
		}
		if n, err := r.App.Orders.ExpireDue(ctx); err != nil || n != 0 {
			t.Errorf("ExpireDue after payment = %d, %v; want 0", n, err)
		}
		if got := e.Stock(t, "PAY-SLOW"); got != 8 {
			t.Errorf("stock %d, want 8 (a paid order keeps its stock)", got)
		}
	})

	if n := e.Count(t, `SELECT count(*) FROM payments WHERE order_id = $1 AND status = 'succeeded'`, o.ID); n != 1 {
		t.Errorf("%d succeeded payments, want 1", n)
	}
	if n := e.Count(t, `SELECT count(*) FROM stock_releases WHERE order_id = $1`, o.ID); n != 0 {
		t.Errorf("%d stock releases of a paid order, want 0", n)
	}
	e.AssertBooks(t)
}

// TestPayments_CopiesWhileCharging: copies of one payment request (one
// Idempotency-Key) sent while the first holds its order's lock across its
// charge are told 409 request_in_progress, as on every keyed route, not
// the lock's resource_busy; another click of the order, with a key of its
// own, is told resource_busy. Once the charge is answered the key
// replays the payment, and the order has one charge.
func TestPayments_CopiesWhileCharging(t *testing.T) {
	e := apptest.New(t, 2, map[string]string{
		"SHOP_GATEWAY_TIMEOUT":    "6s",
		"SHOP_GATEWAY_SLOW_DELAY": "1m", // answered once the test releases it
	})
	apptest.MustCreateProduct(t, e.R(0), "PAY-COPY", 700, 5)
	u := apptest.MustCreateUser(t, e.R(0), "copy")
	o := apptest.MustCreateOrder(t, e.R(0), u.Token, apptest.Line{SKU: "PAY-COPY", Quantity: 1})
	key := apptest.NewKey()

	first := make(chan apptest.Response, 1)
	go func() { first <- payReq(t, e.R(0), u.Token, o.ID, gateway.MethodSlow, key) }()
	select {
	case <-e.Slow.Asked(): // the charge is at the gateway, the lock held
	case <-time.After(10 * time.Second):
		t.Fatal("the first request's charge never reached the gateway")
	}
	for i := range 2 {
		res := payReq(t, e.R(i), u.Token, o.ID, gateway.MethodSlow, key)
		apptest.WantProblem(t, res, http.StatusConflict, "request_in_progress")
	}
	other := payReq(t, e.R(1), u.Token, o.ID, gateway.MethodOK, apptest.NewKey())
	apptest.WantProblem(t, other, http.StatusConflict, "resource_busy")

	e.Slow.Release()
	won := <-first
	apptest.WantStatus(t, won, http.StatusCreated)
	again := payReq(t, e.R(1), u.Token, o.ID, gateway.MethodSlow, key)
	apptest.WantStatus(t, again, http.StatusCreated)
	if again.Header.Get("Idempotent-Replayed") != "true" || string(again.Body) != string(won.Body) {
		t.Errorf("the key after its payment: %s, want the first answer replayed", again)
	}
	payWantCharges(t, e, o.ID, 1)
	e.AssertBooks(t)
}

// TestPayments_InvalidState: only a pending order within its time can be
// paid; anything else is refused before the gateway is asked.
func TestPayments_InvalidState(t *testing.T) {
	e := apptest.New(t, 1, nil)
	r := e.R(0)
	ctx := context.Background()
	apptest.MustCreateProduct(t, r, "PAY-STATE", 300, 20)
	u := apptest.MustCreateUser(t, r, "stan")
	paid := apptest.MustCreateOrder(t, r, u.Token, apptest.Line{SKU: "PAY-STATE", Quantity: 1})
	cancelled := apptest.MustCreateOrder(t, r, u.Token, apptest.Line{SKU: "PAY-STATE", Quantity: 1})
	expired := apptest.MustCreateOrder(t, r, u.Token, apptest.Line{SKU: "PAY-STATE", Quantity: 1})
	overdue := apptest.MustCreateOrder(t, r, u.Token, apptest.Line{SKU: "PAY-STATE", Quantity: 1})

	wantRefused := func(t *testing.T, orderID, state string) {
		t.Helper()
		res := payReq(t, r, u.Token, orderID, gateway.MethodOK, apptest.NewKey())
		apptest.WantProblem(t, res, http.StatusConflict, "invalid_state")
		if d := res.Problem().Detail; !strings.Contains(d, state) {
			t.Errorf("detail %q does not give the state %q", d, state)
		}
	}

	apptest.WantStatus(t, payReq(t, r, u.Token, paid.ID, gateway.MethodOK, apptest.NewKey()), http.StatusCreated)
	t.Run("Paid/Cancel", func(t *testing.T) {
		res := r.Do(t, http.MethodPost, "/v1/orders/"+paid.ID+"/cancel", u.Token, nil)
		apptest.WantProblem(t, res, http.StatusConflict, "invalid_state")
		if got := payOrderStatus(t, r, u.Token, paid.ID); got != "paid" {
			t.Errorf("order is %s, want paid", got)
		}
	})
	t.Run("Paid/PayAgain", func(t *testing.T) {
		wantRefused(t, paid.ID, "paid")
		payWantCharges(t, e, paid.ID, 1)
	})
	t.Run("NothingToCharge", func(t *testing.T) {
		apptest.MustCreateProduct(t, r, "PAY-FREE", 0, 5)
		free := apptest.MustCreateOrder(t, r, u.Token, apptest.Line{SKU: "PAY-FREE", Quantity: 1})
		wantRefused(t, free.ID, "nothing to charge")
		payWantCharges(t, e, free.ID, 0)
		if n := e.Count(t, `SELECT count(*) FROM payments WHERE order_id = $1`, free.ID); n != 0 {
			t.Errorf("%d payment rows for an order with nothing to charge", n)
		}
		apptest.WantStatus(t, r.Do(t, http.MethodPost, "/v1/orders/"+free.ID+"/cancel", u.Token, nil), http.StatusOK)
	})
	t.Run("Cancelled", func(t *testing.T) {
		apptest.WantStatus(t, r.Do(t, http.MethodPost, "/v1/orders/"+cancelled.ID+"/cancel", u.Token, nil), http.StatusOK)
		wantRefused(t, cancelled.ID, "cancelled")
		payWantCharges(t, e, cancelled.ID, 0)
	})

	e.Clock.Advance(apptest.OrderTTL + time.Second)
	t.Run("PastExpiryNotYetExpired", func(t *testing.T) {
		wantRefused(t, overdue.ID, "expired")
		if got := payOrderStatus(t, r, u.Token, overdue.ID); got != "pending_payment" {
			t.Errorf("order is %s, want pending_payment (the job has not run)", got)
		}
		payWantCharges(t, e, overdue.ID, 0)
	})
	t.Run("Expired", func(t *testing.T) {
		if n, err := r.App.Orders.ExpireDue(ctx); err != nil || n != 2 {
			t.Fatalf("ExpireDue = %d, %v; want 2 (the expired and the overdue order)", n, err)
		}
		wantRefused(t, expired.ID, "expired")
		payWantCharges(t, e, expired.ID, 0)
	})

	for _, id := range []string{cancelled.ID, expired.ID, overdue.ID} {
		if n := e.Count(t, `SELECT count(*) FROM payments WHERE order_id = $1`, id); n != 0 {
			t.Errorf("order %s: %d payment rows written for an order that cannot be paid", id, n)
		}
	}
	if n := e.Count(t, `SELECT count(*) FROM payments WHERE order_id = $1 AND status = 'succeeded'`, paid.ID); n != 1 {
		t.Errorf("%d succeeded payments of the paid order, want 1", n)
	}
	if got := e.Stock(t, "PAY-STATE"); got != 19 {
		t.Errorf("stock %d, want 19 (only the paid order keeps its unit)", got)
	}
	e.AssertBooks(t)
}

// TestPayments_CancelInFlight cancels an order while its charge is held at
// the gateway. The charge goes through, finds the order cancelled, and is
// refunded: the customer is never charged for an order that is not paid.
func TestPayments_CancelInFlight(t *testing.T) {
	// The gateway holds the charge's answer until the cancel is made; the
	// client waits for it (up to its timeout), so the pay request sees the
	// charge through.
	e := apptest.New(t, 2, map[string]string{
		"SHOP_GATEWAY_TIMEOUT":    "3s",
		"SHOP_GATEWAY_SLOW_DELAY": "1m",
	})
	apptest.MustCreateProduct(t, e.R(0), "PAY-RACE", 400, 10)
	u := apptest.MustCreateUser(t, e.R(0), "rita")
	o := apptest.MustCreateOrder(t, e.R(0), u.Token, apptest.Line{SKU: "PAY-RACE", Quantity: 3})
	key := apptest.NewKey()

	answered := make(chan apptest.Response, 1)
	go func() { answered <- payReq(t, e.R(0), u.Token, o.ID, gateway.MethodSlow, key) }()
	payWaitFor(t, 5*time.Second, "the charge to reach the gateway", func() bool { return len(e.Gateway.Charges(o.ID)) == 1 })

	cancel := e.R(1).Do(t, http.MethodPost, "/v1/orders/"+o.ID+"/cancel", u.Token, nil)
	select {
	case res := <-answered:
		t.Fatalf("the pay request answered %s before the cancel was made; the race was not staged", res)
	default:
	}
	apptest.WantStatus(t, cancel, http.StatusOK)
	if got := apptest.Decode[apptest.Order](t, cancel).Status; got != "cancelled" {
		t.Fatalf("cancel answered an order %s, want cancelled", got)
	}
	e.Slow.Release()

	var res apptest.Response
	select {
	case res = <-answered:
	case <-time.After(15 * time.Second):
		t.Fatal("the pay request did not answer")
	}
	apptest.WantProblem(t, res, http.StatusConflict, "invalid_state")
	if d := res.Problem().Detail; !strings.Contains(d, "refunded") {
		t.Errorf("detail %q does not say the charge was refunded", d)
	}

	charges := payWantCharges(t, e, o.ID, 1)
	if charges[0].Status != gateway.StatusRefunded {
		t.Errorf("the gateway's charge is %s, want refunded", charges[0].Status)
	}
	items := payList(t, e.R(1), u.Token, o.ID)
	if len(items) != 1 || items[0].Status != "refunded" || items[0].ChargeID == nil || *items[0].ChargeID != charges[0].ID {
		t.Errorf("payments %+v, want one refunded payment of charge %s", items, charges[0].ID)
	}
	if got := payOrderStatus(t, e.R(0), u.Token, o.ID); got != "cancelled" {
		t.Errorf("order is %s, want cancelled", got)
	}
	if got := e.Stock(t, "PAY-RACE"); got != 10 {
		t.Errorf("stock %d, want 10 (returned by the cancel)", got)
	}
	if n := e.Count(t, `SELECT count(*) FROM stock_releases WHERE order_id = $1`, o.ID); n != 1 {
		t.Errorf("%d stock releases, want 1", n)
	}
	apptest.WantMetric(t, e.R(0), `shop_payment_outcomes_total{outcome="refunded"} 1`)
	apptest.WantMetric(t, e.R(0), `shop_payment_refunds_total 1`)

	t.Run("Replay", func(t *testing.T) {
		again := payReq(t, e.R(1), u.Token, o.ID, gateway.MethodSlow, key)
		if !bytes.Equal(again.Body, res.Body) || again.Status != res.Status || again.Header.Get("Idempotent-Replayed") != "true" {
			t.Errorf("replay %s, want the first answer %s replayed", again, res)
		}
	})
	t.Run("PayAgain", func(t *testing.T) {
		apptest.WantProblem(t, payReq(t, e.R(1), u.Token, o.ID, gateway.MethodOK, apptest.NewKey()), http.StatusConflict, "invalid_state")
		payWantCharges(t, e, o.ID, 1)
	})

	if n := e.Count(t, `SELECT count(*) FROM payments WHERE order_id = $1 AND status IN ('processing', 'succeeded')`, o.ID); n != 0 {
		t.Errorf("%d payments processing or succeeded for a cancelled order, want 0", n)
	}
	e.AssertBooks(t)
}

func TestPayments_Validation(t *testing.T) {
	e := apptest.New(t, 1, nil)
	r := e.R(0)
	apptest.MustCreateProduct(t, r, "PAY-VAL", 100, 10)
	owner, other := apptest.MustCreateUser(t, r, "vera"), apptest.MustCreateUser(t, r, "otis")
	o := apptest.MustCreateOrder(t, r, owner.Token, apptest.Line{SKU: "PAY-VAL", Quantity: 1})
	valid := `{"payment_method": "pm_card_ok"}`

	t.Run("NoIdempotencyKey", func(t *testing.T) {
		res := r.OffContract("no Idempotency-Key").Do(t, http.MethodPost, payPath(o.ID), owner.Token, valid)
		apptest.WantProblem(t, res, http.StatusBadRequest, "idempotency_key_required")
	})
	for _, tc := range []badRequest{
		{"MalformedJSON", `{"payment_method": `, "body breaks the schema"},
		{"UnknownField", `{"payment_method": "pm_card_ok", "amount_cents": 1}`, "body breaks the schema"},
		{"FieldCase", `{"Payment_Method": "pm_card_ok"}`, "body breaks the schema"},
		{"EmptyObject", `{}`, "body breaks the schema"},
		{"EmptyBody", ``, "body breaks the schema"},
		{"Null", `null`, "body breaks the schema"},
		{"NotAnObject", `["pm_card_ok"]`, "body breaks the schema"},
		{"TrailingData", valid + ` {}`, ""},
		{"MethodNotAString", `{"payment_method": 5}`, "body breaks the schema"},
		{"EmptyMethod", `{"payment_method": ""}`, ""},
		{"MethodWithSpace", `{"payment_method": "pm card ok"}`, ""},
		{"MethodTooLong", `{"payment_method": "` + strings.Repeat("m", 65) + `"}`, ""},
		// Well formed, but no such method: the gateway refuses it, nothing
		// is charged, and the payment begun for it is not kept.
		{"UnknownMethod", `{"payment_method": "pm_card_gold"}`, ""},
	} {
		t.Run("Invalid/"+tc.name, func(t *testing.T) {
			res := r.OffContract(tc.breach).Do(t, http.MethodPost, payPath(o.ID), owner.Token, tc.body, "Idempotency-Key", apptest.NewKey())
			apptest.WantProblem(t, res, http.StatusBadRequest, "invalid_request")
		})
	}
	t.Run("OtherUsersOrder", func(t *testing.T) {
		apptest.WantProblem(t, payReq(t, r, other.Token, o.ID, gateway.MethodOK, apptest.NewKey()), http.StatusNotFound, "not_found")
		apptest.WantProblem(t, r.Do(t, http.MethodGet, payPath(o.ID), other.Token, nil), http.StatusNotFound, "not_found")
	})
	for _, tc := range []struct{ name, id string }{
		{"NotAUUID", "xyz"},
		{"Unknown", "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"},
	} {
		t.Run("NotFound/"+tc.name, func(t *testing.T) {
			apptest.WantProblem(t, payReq(t, r, owner.Token, tc.id, gateway.MethodOK, apptest.NewKey()), http.StatusNotFound, "not_found")
			apptest.WantProblem(t, r.Do(t, http.MethodGet, payPath(tc.id), owner.Token, nil), http.StatusNotFound, "not_found")
		})
	}
	t.Run("NoToken", func(t *testing.T) {
		apptest.WantProblem(t, payReq(t, r, "", o.ID, gateway.MethodOK, apptest.NewKey()), http.StatusUnauthorized, "unauthenticated")
		apptest.WantProblem(t, r.Do(t, http.MethodGet, payPath(o.ID), "", nil), http.StatusUnauthorized, "unauthenticated")
	})

	if n := e.Count(t, `SELECT count(*) FROM payments`); n != 0 {
		t.Errorf("%d payment rows written by refused requests, want 0", n)
	}
	apptest.WantMetric(t, r, `shop_payment_outcomes_total{outcome="rejected"} 1`)
	if charges := e.Gateway.Charges(""); len(charges) != 0 {
		t.Errorf("refused requests reached the gateway: %+v", charges)
	}
	if got := payOrderStatus(t, r, owner.Token, o.ID); got != "pending_payment" {
		t.Errorf("order is %s, want pending_payment", got)
	}
	// The order is still payable by its owner.
	apptest.WantStatus(t, payReq(t, r, owner.Token, o.ID, gateway.MethodOK, apptest.NewKey()), http.StatusCreated)
	if items := payList(t, r, owner.Token, o.ID); len(items) != 1 {
		t.Errorf("%d payments listed, want 1", len(items))
	}
	if items := payList(t, r, owner.Token, apptest.MustCreateOrder(t, r, owner.Token, apptest.Line{SKU: "PAY-VAL", Quantity: 1}).ID); items == nil || len(items) != 0 {
		t.Errorf("an unpaid order lists %v, want an empty list", items)
	}
}

// TestPayments_StallAfterCharge: the gateway has charged, and the database
// stalls before the outcome is recorded (another transaction holds the
// order's row). A charge that may have been made is never answered with a
// failure: the request runs out of its payment budget, answers 202 with
// the processing payment well inside its request timeout, and the
// reconciler records the charge once the database moves again.
func TestPayments_StallAfterCharge(t *testing.T) {
	e := apptest.New(t, 1, map[string]string{
		"SHOP_REQUEST_TIMEOUT":    "5s",
		"SHOP_PAYMENT_BUDGET":     "2s",
		"SHOP_GATEWAY_TIMEOUT":    "1500ms",
		"SHOP_GATEWAY_SLOW_DELAY": "1m", // answered once the test releases it
	})
	r := e.R(0)
	ctx := context.Background()
	apptest.MustCreateProduct(t, r, "PAY-STALL", 700, 5)
	u := apptest.MustCreateUser(t, r, "stella")
	o := apptest.MustCreateOrder(t, r, u.Token, apptest.Line{SKU: "PAY-STALL", Quantity: 1})

	answered := make(chan apptest.Response, 1)
	go func() { answered <- payReq(t, r, u.Token, o.ID, gateway.MethodSlow, apptest.NewKey()) }()
	// The charge is made and its answer held back until the order's row
	// is taken, so the request cannot record anything.
	payWaitFor(t, 5*time.Second, "the charge to reach the gateway", func() bool { return len(e.Gateway.Charges(o.ID)) == 1 })
	stall, err := e.DB.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = stall.Rollback(ctx) }()
	// This transaction sits idle on purpose for as long as the test needs:
	// the server must not end it after postgres.IdleInTxTimeout.
	if _, err := stall.Exec(ctx, `SET LOCAL idle_in_transaction_session_timeout = 0`); err != nil {
		t.Fatal(err)
	}
	if _, err := stall.Exec(ctx, `SELECT 1 FROM orders WHERE id = $1 FOR UPDATE`, o.ID); err != nil {
		t.Fatal(err)
	}
	e.Slow.Release()

	var res apptest.Response
	select {
	case res = <-answered:
	case <-time.After(15 * time.Second):
		t.Fatal("the pay request did not answer")
	}
	apptest.WantStatus(t, res, http.StatusAccepted)
	p := apptest.Decode[paymentJSON](t, res)
	if p.Status != "processing" || p.OrderID != o.ID {
		t.Fatalf("got %s, want the processing payment of order %s", res.Body, o.ID)
	}
	apptest.WantMetric(t, r, `shop_payment_outcomes_total{outcome="unknown"} 1`)

	// The database moves again; the reconciler records the one charge.
	if err := stall.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	e.Clock.Advance(e.Cfg.ReconcileAfter + time.Second)
	if n, err := r.App.Payments.Reconcile(ctx); err != nil || n != 1 {
		t.Fatalf("Reconcile = %d, %v; want 1, nil", n, err)
	}
	if got := payOrderStatus(t, r, u.Token, o.ID); got != "paid" {
		t.Errorf("order is %s, want paid", got)
	}
	payWantCharges(t, e, o.ID, 1)
	e.AssertBooks(t)
}
