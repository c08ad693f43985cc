package app_test

import (
	"net/http"
	"testing"

	"github.com/shop-example/shop/harness/apptest"
)

// Every 201 names what it created in Location (the harness checks each
// one); these are the routes and the paths they name. A replay carries the
// same Location.
func TestHeaders_Location(t *testing.T) {
	e := apptest.New(t, 1, nil)
	r := e.R(0)

	res := r.Do(t, http.MethodPost, "/v1/users", "", `{"name": "lou"}`)
	apptest.WantStatus(t, res, http.StatusCreated)
	u := apptest.Decode[apptest.User](t, res)
	if loc := res.Header.Get("Location"); loc != "/v1/me" {
		t.Errorf("user: Location %q, want /v1/me (the user, read with its token)", loc)
	}
	if me := r.Do(t, http.MethodGet, res.Header.Get("Location"), u.Token, nil); me.Status != http.StatusOK {
		t.Errorf("GET the user's Location: %s, want 200", me)
	}

	res = r.Do(t, http.MethodPost, "/v1/products", apptest.AdminToken,
		`{"sku": "LOC-1", "name": "Mug", "price_cents": 100, "stock": 5}`)
	apptest.WantStatus(t, res, http.StatusCreated)
	if loc := res.Header.Get("Location"); loc != "/v1/products/LOC-1" {
		t.Errorf("product: Location %q, want /v1/products/LOC-1", loc)
	}

	key := apptest.NewKey()
	first := r.Do(t, http.MethodPost, "/v1/orders", u.Token, apptest.OrderBody(apptest.Line{SKU: "LOC-1", Quantity: 1}), "Idempotency-Key", key)
	apptest.WantStatus(t, first, http.StatusCreated)
	o := apptest.Decode[apptest.Order](t, first)
	replay := r.Do(t, http.MethodPost, "/v1/orders", u.Token, apptest.OrderBody(apptest.Line{SKU: "LOC-1", Quantity: 1}), "Idempotency-Key", key)
	apptest.WantStatus(t, replay, http.StatusCreated)
	for _, res := range []apptest.Response{first, replay} {
		if loc := res.Header.Get("Location"); loc != "/v1/orders/"+o.ID {
			t.Errorf("order (replayed %q): Location %q, want /v1/orders/%s", res.Header.Get("Idempotent-Replayed"), loc, o.ID)
		}
	}

	payKey := apptest.NewKey()
	pay := payReq(t, r, u.Token, o.ID, "pm_card_ok", payKey)
	apptest.WantStatus(t, pay, http.StatusCreated)
	again := payReq(t, r, u.Token, o.ID, "pm_card_ok", payKey)
	apptest.WantStatus(t, again, http.StatusCreated)
	for _, res := range []apptest.Response{pay, again} {
		if loc := res.Header.Get("Location"); loc != payPath(o.ID) {
			t.Errorf("payment (replayed %q): Location %q, want %s", res.Header.Get("Idempotent-Replayed"), loc, payPath(o.ID))
		}
	}
}

// Every answer, error or not, carries nosniff and no-store (the harness
// checks each one); these are answers made outside the handlers.
func TestHeaders_EveryAnswer(t *testing.T) {
	e := apptest.New(t, 1, nil)
	r := e.R(0)
	for _, tc := range []struct {
		name, method, path string
		body               any
		status             int
		offContract        string
	}{
		{"Health", http.MethodGet, "/healthz", nil, http.StatusOK, ""},
		{"UnknownRoute", http.MethodGet, "/v1/nothing-here", nil, http.StatusNotFound, "no such route"},
		{"WrongMethod", http.MethodDelete, "/v1/products", nil, http.StatusMethodNotAllowed, "no such method"},
		{"Unauthenticated", http.MethodGet, "/v1/me", nil, http.StatusUnauthorized, ""},
		{"Malformed", http.MethodPost, "/v1/users", `{"name"`, http.StatusBadRequest, "malformed JSON"},
		{"TooLarge", http.MethodPost, "/v1/users", make([]byte, 65<<10), http.StatusRequestEntityTooLarge, "body over 64 KiB"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			apptest.WantStatus(t, r.OffContract(tc.offContract).Do(t, tc.method, tc.path, "", tc.body), tc.status)
		})
	}
}

// A 401 says how to authenticate (RFC 9110 §11.6.1): a bearer token, and
// with RFC 6750's error="invalid_token" when the one sent is not valid.
func TestHeaders_WWWAuthenticate(t *testing.T) {
	e := apptest.New(t, 1, nil)
	r := e.R(0)
	u := apptest.MustCreateUser(t, r, "walt")
	for _, tc := range []struct {
		name, method, path, authorization, want string
	}{
		{"NoToken", http.MethodGet, "/v1/me", "", `Bearer realm="shop"`},
		{"OtherScheme", http.MethodGet, "/v1/me", "Basic d2FsdDp4", `Bearer realm="shop"`},
		{"UnknownToken", http.MethodGet, "/v1/me", "Bearer shop_nobody", `Bearer realm="shop", error="invalid_token"`},
		{"AdminNoToken", http.MethodGet, "/v1/likes/reconciliation", "", `Bearer realm="shop"`},
		{"AdminUnknownToken", http.MethodGet, "/v1/likes/reconciliation", "Bearer shop_nobody", `Bearer realm="shop", error="invalid_token"`},
		{"OrdersNoToken", http.MethodGet, "/v1/orders", "", `Bearer realm="shop"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var hdr []string
			if tc.authorization != "" {
				hdr = []string{"Authorization", tc.authorization}
			}
			res := r.Do(t, tc.method, tc.path, "", nil, hdr...)
			apptest.WantProblem(t, res, http.StatusUnauthorized, "unauthenticated")
			if got := res.Header.Get("WWW-Authenticate"); got != tc.want {
				t.Errorf("WWW-Authenticate %q, want %q", got, tc.want)
			}
		})
	}
	t.Run("NotOn403", func(t *testing.T) {
		res := r.Do(t, http.MethodGet, "/v1/likes/reconciliation", u.Token, nil)
		apptest.WantProblem(t, res, http.StatusForbidden, "forbidden")
		if got := res.Header.Get("WWW-Authenticate"); got != "" {
			t.Errorf("WWW-Authenticate %q on a 403, want none", got)
		}
	})
}

// GET of a product with If-None-Match answers 304 and no body when the
// client already holds the current version: the weak comparison of RFC 9110
// §13.1.2, so W/"1" matches "1"; * matches any product that exists; a list
// matches if one of its tags does.
func TestProducts_IfNoneMatch(t *testing.T) {
	e := apptest.New(t, 1, nil)
	r := e.R(0)
	apptest.MustCreateProduct(t, r, "INM-1", 100, 3)
	get := func(t *testing.T, sku, ifNoneMatch string) apptest.Response {
		t.Helper()
		return r.Do(t, http.MethodGet, "/v1/products/"+sku, "", nil, "If-None-Match", ifNoneMatch)
	}
	for _, tc := range []struct {
		name, header string
		status       int
	}{
		{"Same", `"1"`, http.StatusNotModified},
		{"Weak", `W/"1"`, http.StatusNotModified},
		{"Star", `*`, http.StatusNotModified},
		{"List", `"7", "1"`, http.StatusNotModified},
		{"ListNoSpaces", `"7",W/"1"`, http.StatusNotModified},
		{"ListWithComma", `"a,b", "1"`, http.StatusNotModified},
		{"Other", `"2"`, http.StatusOK},
		{"OtherList", `"7", W/"8"`, http.StatusOK},
		{"Unquoted", `1`, http.StatusOK},
		{"Unterminated", `"1`, http.StatusOK},
		{"Garbage", `"1" x`, http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := get(t, "INM-1", tc.header)
			apptest.WantStatus(t, res, tc.status)
			if etag := res.Header.Get("ETag"); etag != `"1"` {
				t.Errorf(`ETag %q, want "1"`, etag)
			}
			if tc.status == http.StatusNotModified && len(res.Body) != 0 {
				t.Errorf("304 with a body: %q", res.Body)
			}
			if tc.status == http.StatusOK && apptest.Decode[apptest.Product](t, res).SKU != "INM-1" {
				t.Errorf("200 without the product: %s", res.Body)
			}
		})
	}
	t.Run("AfterAnEdit", func(t *testing.T) {
		apptest.WantStatus(t, r.Do(t, http.MethodPatch, "/v1/products/INM-1", apptest.AdminToken, `{"price_cents": 5}`, "If-Match", `"1"`), http.StatusOK)
		res := get(t, "INM-1", `"1"`)
		apptest.WantStatus(t, res, http.StatusOK)
		if got := apptest.Decode[apptest.Product](t, res); got.PriceCents != 5 || res.Header.Get("ETag") != `"2"` {
			t.Errorf("got %s with ETag %q, want the edited product at \"2\"", res.Body, res.Header.Get("ETag"))
		}
		apptest.WantStatus(t, get(t, "INM-1", `"2"`), http.StatusNotModified)
	})
	t.Run("StarOnMissing", func(t *testing.T) {
		apptest.WantProblem(t, get(t, "NOPE", `*`), http.StatusNotFound, "not_found")
	})
}
