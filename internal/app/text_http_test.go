package app_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/shop-example/shop/harness/apptest"
)

// controls are control characters (C0, DEL, C1) as JSON escapes; none may
// reach a stored text, whichever field carries it.
var controls = []string{`\u0000`, `\u0007`, `\n`, `\u001f`, `\u007f`, `\u0085`, `\u009f`}

// Every text field of every request body refuses control characters with
// 400 invalid_request naming the field; a product name with NUL once made
// PostgreSQL fail (500).
func TestText_ControlCharacters(t *testing.T) {
	e := apptest.New(t, 1, nil)
	r := e.R(0)
	apptest.MustCreateProduct(t, r, "TXT-1", 100, 10)
	u := apptest.MustCreateUser(t, r, "tess")
	o := apptest.MustCreateOrder(t, r, u.Token, apptest.Line{SKU: "TXT-1", Quantity: 1})

	routes := []struct {
		name, method, path, token, field string
		body                             func(c string) string
		header                           []string
	}{
		{"UserName", http.MethodPost, "/v1/users", "", "name",
			func(c string) string { return `{"name": "a` + c + `b"}` }, nil},
		{"ProductName", http.MethodPost, "/v1/products", apptest.AdminToken, "name",
			func(c string) string { return `{"sku": "TXT-2", "name": "Mug` + c + `", "price_cents": 1, "stock": 1}` }, nil},
		{"ProductSKU", http.MethodPost, "/v1/products", apptest.AdminToken, "sku",
			func(c string) string { return `{"sku": "TXT-3` + c + `", "name": "Mug", "price_cents": 1, "stock": 1}` }, nil},
		{"ProductPatchName", http.MethodPatch, "/v1/products/TXT-1", apptest.AdminToken, "name",
			func(c string) string { return `{"name": "Mug` + c + `"}` }, []string{"If-Match", `"1"`}},
		{"OrderSKU", http.MethodPost, "/v1/orders", u.Token, "items[0].sku",
			func(c string) string { return `{"items": [{"sku": "TXT-1` + c + `", "quantity": 1}]}` }, nil},
		{"PaymentMethod", http.MethodPost, payPath(o.ID), u.Token, "payment_method",
			func(c string) string { return `{"payment_method": "pm_card_ok` + c + `"}` }, nil},
	}
	for _, rt := range routes {
		t.Run(rt.name, func(t *testing.T) {
			for _, c := range controls {
				hdr := append([]string{"Idempotency-Key", apptest.NewKey()}, rt.header...)
				res := r.OffContract("control character").Do(t, rt.method, rt.path, rt.token, rt.body(c), hdr...)
				if res.Status != http.StatusBadRequest || res.Code() != "invalid_request" {
					t.Errorf("%s: got %s, want 400 invalid_request", c, res)
					continue
				}
				if d := res.Problem().Detail; !strings.HasPrefix(d, rt.field+":") {
					t.Errorf("%s: detail %q, want it to name %s", c, d, rt.field)
				}
			}
		})
	}

	if n := e.Count(t, `SELECT count(*)::int FROM users`); n != 1 {
		t.Errorf("%d users, want 1", n)
	}
	if n := e.Count(t, `SELECT count(*)::int FROM products`); n != 1 {
		t.Errorf("%d products, want 1", n)
	}
	if n := e.Count(t, `SELECT count(*)::int FROM products WHERE name = 'Product TXT-1' AND version = 1`); n != 1 {
		t.Errorf("the product's name changed")
	}
	if n := e.Count(t, `SELECT count(*)::int FROM orders`); n != 1 {
		t.Errorf("%d orders, want 1", n)
	}
	if n := e.Count(t, `SELECT count(*)::int FROM payments`); n != 0 {
		t.Errorf("%d payments, want 0", n)
	}
}

// Bytes that are not UTF-8, in any body, are 400 invalid_request: they
// were once decoded to U+FFFD and stored so (a user and an event named
// "\ufffd\ufffd" for the bytes ff fe).
func TestText_InvalidUTF8(t *testing.T) {
	e := apptest.New(t, 1, nil)
	r := e.R(0)
	for _, rt := range []struct{ name, path, token, body string }{
		{"UserName", "/v1/users", "", "{\"name\": \"\xff\xfe\"}"},
		{"EventName", "/v1/events", apptest.AdminToken, "{\"name\": \"\xff\xfe\", \"rows\": 1, \"seats_per_row\": 1}"},
	} {
		t.Run(rt.name, func(t *testing.T) {
			res := r.Do(t, http.MethodPost, rt.path, rt.token, rt.body)
			if res.Status != http.StatusBadRequest || res.Code() != "invalid_request" {
				t.Errorf("got %s, want 400 invalid_request", res)
			}
		})
	}
	if n := e.Count(t, `SELECT count(*)::int FROM users`); n != 0 {
		t.Errorf("%d users, want 0", n)
	}
	if n := e.Count(t, `SELECT count(*)::int FROM events`); n != 0 {
		t.Errorf("%d events, want 0", n)
	}
}

// A query string that cannot be parsed is 400 invalid_request on every
// route, before the route reads it: GET /v1/orders?cursor=%%% once
// answered the first page, as if no cursor had been sent.
func TestQuery_Unparsable(t *testing.T) {
	e := apptest.New(t, 1, nil)
	r := e.R(0)
	u := apptest.MustCreateUser(t, r, "quinn")
	apptest.WantStatus(t, r.Do(t, http.MethodGet, "/v1/orders?cursor=", u.Token, nil), http.StatusOK)
	for _, rt := range []struct{ name, method, path, token string }{
		{"OrdersCursor", http.MethodGet, "/v1/orders?cursor=%%%", u.Token},
		{"OrdersLimit", http.MethodGet, "/v1/orders?limit=%zz", u.Token},
		{"Semicolon", http.MethodGet, "/v1/orders?limit=5;cursor=x", u.Token},
		{"Me", http.MethodGet, "/v1/me?%", u.Token},
		{"Register", http.MethodPost, "/v1/users?x=%4", ""},
	} {
		t.Run(rt.name, func(t *testing.T) {
			var body any
			if rt.method == http.MethodPost {
				body = map[string]string{"name": "never"}
			}
			res := r.Do(t, rt.method, rt.path, rt.token, body)
			if res.Status != http.StatusBadRequest || res.Code() != "invalid_request" || !strings.Contains(res.Problem().Detail, "query") {
				t.Errorf("got %s, want 400 invalid_request naming the query", res)
			}
		})
	}
	if n := e.Count(t, `SELECT count(*)::int FROM users WHERE name = 'never'`); n != 0 {
		t.Errorf("a request with a bad query string registered a user")
	}
}
