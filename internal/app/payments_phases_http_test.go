package app_test

import (
	"bytes"
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/shop-example/shop/harness/apptest"
	"github.com/shop-example/shop/harness/gateway"
)

// TestPayments_AtomicPhases: a payment's Idempotency-Key is written by
// the payment's own two transactions and by nothing apart from them.
// While the charge is held at the gateway, the key is claimed, with no
// answer yet, by the transaction that opened the processing payment and
// moved the order to paying: the three rows carry that one transaction's
// id (xmin). Once the payment has succeeded, the key holds the answer the
// client got, byte for byte, written by the transaction that settled the
// payment and paid the order; the same request sent again replays it.
func TestPayments_AtomicPhases(t *testing.T) {
	e := apptest.New(t, 1, map[string]string{
		"SHOP_GATEWAY_TIMEOUT":    "3s",
		"SHOP_GATEWAY_SLOW_DELAY": "1m", // answered once the test releases it
	})
	r := e.R(0)
	apptest.MustCreateProduct(t, r, "PAY-PHASES", 1200, 1)
	u := apptest.MustCreateUser(t, r, "phoebe")
	o := apptest.MustCreateOrder(t, r, u.Token, apptest.Line{SKU: "PAY-PHASES", Quantity: 1})
	key := apptest.NewKey()

	// One transaction wrote the key, the payment and the order as they
	// stand: their rows' xmin is the same.
	const writtenTogether = `SELECT count(*) FROM idempotency_keys k, payments p, orders o
		WHERE k.key = $1 AND p.order_id = $2 AND o.id = $2 AND k.xmin = p.xmin AND p.xmin = o.xmin`

	answered := make(chan apptest.Response, 1)
	go func() { answered <- payReq(t, r, u.Token, o.ID, gateway.MethodSlow, key) }()
	payWaitFor(t, 5*time.Second, "the charge to reach the gateway", func() bool { return len(e.Gateway.Charges(o.ID)) == 1 })

	t.Run("Begun", func(t *testing.T) {
		if n := e.Count(t, `SELECT count(*) FROM idempotency_keys WHERE key = $1 AND status_code IS NULL`, key); n != 1 {
			t.Errorf("%d claimed keys while the charge is in flight, want the request's, claimed", n)
		}
		if n := e.Count(t, `SELECT count(*) FROM payments p JOIN orders o ON o.id = p.order_id
			WHERE p.order_id = $1 AND p.status = 'processing' AND o.status = 'paying'`, o.ID); n != 1 {
			t.Fatalf("no processing payment of a paying order while the charge is in flight")
		}
		if n := e.Count(t, writtenTogether, key, o.ID); n != 1 {
			t.Error("the claim, the processing payment and the order's move to paying were not written by one transaction")
		}
	})

	e.Slow.Release()
	var res apptest.Response
	select {
	case res = <-answered:
	case <-time.After(15 * time.Second):
		t.Fatal("the pay request did not answer")
	}
	apptest.WantStatus(t, res, http.StatusCreated)

	t.Run("Settled", func(t *testing.T) {
		var status int
		var body []byte
		if err := e.DB.QueryRow(context.Background(), `SELECT status_code, body FROM idempotency_keys WHERE key = $1`, key).
			Scan(&status, &body); err != nil {
			t.Fatalf("read the key: %v", err)
		}
		if status != http.StatusCreated || !bytes.Equal(body, res.Body) {
			t.Errorf("the key stores %d %s, want the answer sent, %d %s", status, body, res.Status, res.Body)
		}
		if n := e.Count(t, writtenTogether, key, o.ID); n != 1 {
			t.Error("the answer, the succeeded payment and the paid order were not written by one transaction")
		}
		if n := e.Count(t, `SELECT count(*) FROM payments p JOIN orders o ON o.id = p.order_id
			WHERE p.order_id = $1 AND p.status = 'succeeded' AND o.status = 'paid'`, o.ID); n != 1 {
			t.Error("the payment did not succeed with its order paid")
		}
	})

	t.Run("Replayed", func(t *testing.T) {
		again := payReq(t, r, u.Token, o.ID, gateway.MethodSlow, key)
		if again.Status != res.Status || !bytes.Equal(again.Body, res.Body) || again.Header.Get("Idempotent-Replayed") != "true" {
			t.Errorf("the same request again answered %s, want the first answer %s replayed", again, res)
		}
		payWantCharges(t, e, o.ID, 1)
	})
	e.AssertBooks(t)
}
