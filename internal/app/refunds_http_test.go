package app_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shop-example/shop/harness/apptest"
	"github.com/shop-example/shop/harness/gateway"
)

// refundJSON is a refund as API.md shows it.
type refundJSON struct {
	ID          string         `json:"id"`
	OrderID     string         `json:"order_id"`
	AmountCents int64          `json:"amount_cents"`
	Status      string         `json:"status"`
	Reason      *string        `json:"reason"`
	Items       []apptest.Line `json:"items"`
	CreatedAt   string         `json:"created_at"`
}

// refundOrderJSON is an order with what its refunds hold.
type refundOrderJSON struct {
	ID            string `json:"id"`
	Status        string `json:"status"`
	TotalCents    int64  `json:"total_cents"`
	RefundedCents int64  `json:"refunded_cents"`
	Items         []struct {
		SKU      string `json:"sku"`
		Returned int    `json:"returned"`
	} `json:"items"`
}

// refundPath is the refunds route of an order.
func refundPath(orderID string) string { return "/v1/orders/" + orderID + "/refunds" }

// refundReq sends POST /v1/orders/{id}/refunds with body under key.
func refundReq(t testing.TB, r *apptest.Replica, token, orderID string, body any, key string) apptest.Response {
	t.Helper()
	return r.Do(t, http.MethodPost, refundPath(orderID), token, body, "Idempotency-Key", key)
}

// refundOrder reads an order as GET /v1/orders/{id} shows it.
func refundOrder(t testing.TB, r *apptest.Replica, token, orderID string) refundOrderJSON {
	t.Helper()
	res := r.Do(t, http.MethodGet, "/v1/orders/"+orderID, token, nil)
	apptest.WantStatus(t, res, http.StatusOK)
	return apptest.Decode[refundOrderJSON](t, res)
}

// remaining is the remaining_cents of a refund_exceeds_remaining answer.
func remaining(t testing.TB, res apptest.Response) int64 {
	t.Helper()
	var p struct {
		Remaining *int64 `json:"remaining_cents"`
	}
	if err := json.Unmarshal(res.Body, &p); err != nil || p.Remaining == nil {
		t.Fatalf("%s: no remaining_cents", res)
	}
	return *p.Remaining
}

// paidOrder places and pays, over HTTP, an order of lines for a new user
// and returns the user and the order.
func paidOrder(t testing.TB, e *apptest.Env, i int, lines ...apptest.Line) (apptest.User, apptest.Order) {
	t.Helper()
	u := apptest.MustCreateUser(t, e.R(i), "refunder")
	o := apptest.MustCreateOrder(t, e.R(i), u.Token, lines...)
	apptest.WantStatus(t, payReq(t, e.R(i+1), u.Token, o.ID, gateway.MethodOK, apptest.NewKey()), http.StatusCreated)
	return u, o
}

func TestRefunds_Refund(t *testing.T) {
	e := apptest.New(t, 2, nil)
	apptest.MustCreateProduct(t, e.R(0), "RF-A", 1500, 10)
	apptest.MustCreateProduct(t, e.R(0), "RF-B", 2000, 10)
	u, o := paidOrder(t, e, 0, apptest.Line{SKU: "RF-A", Quantity: 2}, apptest.Line{SKU: "RF-B", Quantity: 1})
	if o.TotalCents != 5000 {
		t.Fatalf("total %d, want 5000", o.TotalCents)
	}
	key := apptest.NewKey()
	body := map[string]any{"amount_cents": 1200, "reason": "arrived late"}
	first := refundReq(t, e.R(0), u.Token, o.ID, body, key)
	apptest.WantStatus(t, first, http.StatusCreated)
	r := apptest.Decode[refundJSON](t, first)

	t.Run("Created", func(t *testing.T) {
		if !uuidPattern.MatchString(r.ID) || r.OrderID != o.ID || r.Status != "succeeded" || r.AmountCents != 1200 ||
			r.Reason == nil || *r.Reason != "arrived late" || len(r.Items) != 0 || !strings.HasSuffix(r.CreatedAt, "Z") {
			t.Errorf("got %s, want a succeeded refund of 1200 cents of %s", first.Body, o.ID)
		}
		if loc := first.Header.Get("Location"); loc != refundPath(o.ID) {
			t.Errorf("Location %q, want %s", loc, refundPath(o.ID))
		}
		if got := refundOrder(t, e.R(1), u.Token, o.ID); got.Status != "paid" || got.RefundedCents != 1200 {
			t.Errorf("order %+v, want paid with 1200 refunded", got)
		}
	})
	t.Run("Replayed", func(t *testing.T) {
		again := refundReq(t, e.R(1), u.Token, o.ID, body, key)
		if again.Status != http.StatusCreated || again.Header.Get("Idempotent-Replayed") != "true" || string(again.Body) != string(first.Body) {
			t.Errorf("the request again: %s, want the first answer replayed", again)
		}
		apptest.WantProblem(t, refundReq(t, e.R(0), u.Token, o.ID, map[string]any{"amount_cents": 1300}, key),
			http.StatusUnprocessableEntity, "idempotency_key_reused")
	})
	t.Run("Refusals", func(t *testing.T) {
		other := apptest.MustCreateUser(t, e.R(0), "stranger")
		for _, tc := range []struct {
			name, token, breach string
			body                any
			status              int
			code                string
		}{
			{"AnotherUsersOrder", other.Token, "", map[string]any{"amount_cents": 1}, 404, "not_found"},
			{"ZeroCents", u.Token, "amount_cents below its minimum", map[string]any{"amount_cents": 0}, 400, "invalid_request"},
			{"NegativeCents", u.Token, "amount_cents below its minimum", map[string]any{"amount_cents": -5}, 400, "invalid_request"},
			{"NotAnInteger", u.Token, "amount_cents is no integer", `{"amount_cents": 12.5}`, 400, "invalid_request"},
			{"NotANumber", u.Token, "amount_cents is no integer", `{"amount_cents": "12"}`, 400, "invalid_request"},
			{"NotInTheOrder", u.Token, "", map[string]any{"items": []apptest.Line{{SKU: "RF-C", Quantity: 1}}}, 400, "invalid_request"},
			{"MoreThanBought", u.Token, "", map[string]any{"items": []apptest.Line{{SKU: "RF-B", Quantity: 2}}}, 400, "invalid_request"},
			{"RepeatedSKU", u.Token, "", map[string]any{"items": []apptest.Line{{SKU: "RF-A", Quantity: 1}, {SKU: "RF-A", Quantity: 1}}}, 400, "invalid_request"},
			{"ALongReason", u.Token, "reason longer than 200", map[string]any{"reason": strings.Repeat("x", 201)}, 400, "invalid_request"},
			{"BeyondTheRemainder", u.Token, "", map[string]any{"amount_cents": 3801}, 422, "refund_exceeds_remaining"},
			{"NoToken", "", "", map[string]any{}, 401, "unauthenticated"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				res := refundReq(t, e.R(0).OffContract(tc.breach), tc.token, o.ID, tc.body, apptest.NewKey())
				apptest.WantProblem(t, res, tc.status, tc.code)
				if tc.code == "refund_exceeds_remaining" && remaining(t, res) != 3800 {
					t.Errorf("remaining_cents %d, want 3800", remaining(t, res))
				}
			})
		}
		res := e.R(0).OffContract("no Idempotency-Key").Do(t, http.MethodPost, refundPath(o.ID), u.Token, map[string]any{})
		apptest.WantProblem(t, res, http.StatusBadRequest, "idempotency_key_required")
		if got := refundOrder(t, e.R(1), u.Token, o.ID); got.RefundedCents != 1200 {
			t.Errorf("after the refusals the order holds %d, want 1200: a refusal changes nothing", got.RefundedCents)
		}
	})
	t.Run("AReturn", func(t *testing.T) {
		before := e.Stock(t, "RF-A")
		res := refundReq(t, e.R(1), u.Token, o.ID, map[string]any{"items": []apptest.Line{{SKU: "RF-A", Quantity: 1}}}, apptest.NewKey())
		apptest.WantStatus(t, res, http.StatusCreated)
		if got := apptest.Decode[refundJSON](t, res); got.AmountCents != 1500 || len(got.Items) != 1 || got.Items[0] != (apptest.Line{SKU: "RF-A", Quantity: 1}) {
			t.Errorf("return: %s, want 1500 cents for one RF-A", res.Body)
		}
		if got := e.Stock(t, "RF-A"); got != before+1 {
			t.Errorf("stock of RF-A %d, want %d", got, before+1)
		}
		if got := refundOrder(t, e.R(0), u.Token, o.ID); got.Items[0].Returned != 1 {
			t.Errorf("order %+v, want one RF-A returned", got)
		}
	})
	t.Run("TheAdminRefundsTheRest", func(t *testing.T) {
		res := refundReq(t, e.R(0), apptest.AdminToken, o.ID, map[string]any{}, apptest.NewKey())
		apptest.WantStatus(t, res, http.StatusCreated)
		if got := apptest.Decode[refundJSON](t, res); got.AmountCents != 5000-1200-1500 {
			t.Errorf("the rest: %s, want %d cents", res.Body, 5000-1200-1500)
		}
		if got := refundOrder(t, e.R(1), u.Token, o.ID); got.Status != "refunded" || got.RefundedCents != 5000 {
			t.Errorf("order %+v, want refunded", got)
		}
		apptest.WantProblem(t, refundReq(t, e.R(0), u.Token, o.ID, map[string]any{}, apptest.NewKey()), http.StatusConflict, "invalid_state")
	})
	t.Run("List", func(t *testing.T) {
		for _, token := range []string{u.Token, apptest.AdminToken} {
			res := e.R(1).Do(t, http.MethodGet, refundPath(o.ID), token, nil)
			apptest.WantStatus(t, res, http.StatusOK)
			items := apptest.Decode[apptest.Page[refundJSON]](t, res).Items
			if len(items) != 3 || items[0].ID != r.ID || items[0].AmountCents != 1200 || items[1].AmountCents != 1500 || items[2].Reason != nil {
				t.Errorf("list: %s, want the three refunds oldest first", res.Body)
			}
		}
		other := apptest.MustCreateUser(t, e.R(0), "nosy")
		apptest.WantProblem(t, e.R(0).Do(t, http.MethodGet, refundPath(o.ID), other.Token, nil), http.StatusNotFound, "not_found")
	})
	t.Run("NotPaid", func(t *testing.T) {
		pending := apptest.MustCreateOrder(t, e.R(0), u.Token, apptest.Line{SKU: "RF-B", Quantity: 1})
		apptest.WantProblem(t, refundReq(t, e.R(1), u.Token, pending.ID, map[string]any{}, apptest.NewKey()), http.StatusConflict, "invalid_state")
	})
	e.AssertBooks(t)
}

// A refund whose processor does not answer is 202 processing, its amount
// held; the reconciler settles it with the same key, and the client's
// poll of the refunds finds it succeeded, refunded once.
func TestRefunds_Accepted(t *testing.T) {
	var down atomic.Bool
	var gw *gateway.Server
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if down.Load() && req.URL.Path == "/v1/refunds" {
			http.Error(w, "gateway down", http.StatusBadGateway)
			return
		}
		gw.Handler().ServeHTTP(w, req)
	}))
	t.Cleanup(proxy.Close)
	e := apptest.New(t, 2, map[string]string{"SHOP_GATEWAY_URL": proxy.URL, "SHOP_GATEWAY_TIMEOUT": "500ms"})
	gw = e.Gateway
	apptest.MustCreateProduct(t, e.R(0), "RF-SLOW", 1000, 10)
	u, o := paidOrder(t, e, 0, apptest.Line{SKU: "RF-SLOW", Quantity: 3})

	down.Store(true)
	res := refundReq(t, e.R(0), u.Token, o.ID, map[string]any{"amount_cents": 2500}, apptest.NewKey())
	apptest.WantStatus(t, res, http.StatusAccepted)
	r := apptest.Decode[refundJSON](t, res)
	if r.Status != "processing" || res.Header.Get("Location") != refundPath(o.ID) {
		t.Fatalf("202: %s with Location %q, want the processing refund and its list to poll", res.Body, res.Header.Get("Location"))
	}
	apptest.WantProblem(t, refundReq(t, e.R(1), u.Token, o.ID, map[string]any{"amount_cents": 501}, apptest.NewKey()),
		http.StatusUnprocessableEntity, "refund_exceeds_remaining")

	down.Store(false)
	e.Clock.Advance(e.Cfg.ReconcileAfter + time.Second)
	if n, err := e.R(1).App.Refunds.Reconcile(context.Background()); err != nil || n != 1 {
		t.Fatalf("reconcile: %d, %v; want 1 settled", n, err)
	}
	list := apptest.Decode[apptest.Page[refundJSON]](t, e.R(0).Do(t, http.MethodGet, refundPath(o.ID), u.Token, nil)).Items
	if len(list) != 1 || list[0].ID != r.ID || list[0].Status != "succeeded" {
		t.Fatalf("refunds after the reconciler: %+v, want %s succeeded", list, r.ID)
	}
	if refunds := e.Gateway.Refunds(e.Gateway.Charges(o.ID)[0].ID); len(refunds) != 1 || refunds[0].AmountCents != 2500 {
		t.Fatalf("the processor's refunds %+v, want one of 2500", refunds)
	}
	e.AssertBooks(t)
}
