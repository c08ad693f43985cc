package app_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shop-example/shop/harness/apptest"
	"github.com/shop-example/shop/harness/testenv"
	"github.com/shop-example/shop/internal/platform/lock"
	"github.com/shop-example/shop/internal/platform/redisx"
)

var uuidPattern = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// badRequest is one request body the route must refuse with 400, and
// breach, why the body breaks docs/openapi.yaml (Replica.OffContract). A body the
// document admits, refused on a rule no schema states (a blank name,
// duplicate SKUs, trailing data), has none.
type badRequest struct {
	name   string
	body   string
	breach string
}

func TestUsers_Create(t *testing.T) {
	e := apptest.New(t, 1, nil)
	r := e.R(0)

	t.Run("Created", func(t *testing.T) {
		res := r.Do(t, http.MethodPost, "/v1/users", "", `{"name": "alice"}`)
		apptest.WantStatus(t, res, http.StatusCreated)
		u := apptest.Decode[apptest.User](t, res)
		if !uuidPattern.MatchString(u.ID) || u.Name != "alice" || u.Token == "" {
			t.Fatalf("want id, name alice and a token, got %s", res.Body)
		}
		if got := res.Header.Get("Content-Type"); !strings.HasPrefix(got, "application/json") {
			t.Errorf("Content-Type %q, want application/json", got)
		}
	})
	t.Run("LongestName", func(t *testing.T) {
		apptest.MustCreateUser(t, r, strings.Repeat("é", 100))
	})
	for _, tc := range []badRequest{
		{"NoName", `{}`, "body breaks the schema"},
		{"EmptyName", `{"name": ""}`, "body breaks the schema"},
		{"BlankName", `{"name": "   "}`, ""},
		{"NameTooLong", `{"name": "` + strings.Repeat("a", 101) + `"}`, "body breaks the schema"},
		{"ControlCharacter", `{"name": "a\u0007b"}`, "body breaks the schema"},
		{"NameNotAString", `{"name": 5}`, "body breaks the schema"},
		{"UnknownField", `{"name": "bob", "admin": true}`, "body breaks the schema"},
		{"FieldCase", `{"Name": "bob"}`, "body breaks the schema"},
		{"DuplicateField", `{"name": "bob", "name": "eve"}`, ""},
		{"MalformedJSON", `{"name": `, "body breaks the schema"},
		{"NotAnObject", `["bob"]`, "body breaks the schema"},
		{"TrailingData", `{"name": "bob"} {}`, ""},
		{"DeepNesting", strings.Repeat("[", 60_000), "body breaks the schema"},
		{"DeepNestingInField", `{"name": "bob", "x": ` + strings.Repeat("[", 60_000), "body breaks the schema"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := r.OffContract(tc.breach).Do(t, http.MethodPost, "/v1/users", "", tc.body)
			apptest.WantProblem(t, res, http.StatusBadRequest, "invalid_request")
		})
	}
	if n := e.Count(t, `SELECT count(*)::int FROM users`); n != 2 {
		t.Errorf("%d users stored, want the 2 created", n)
	}
}

func TestUsers_Me(t *testing.T) {
	e := apptest.New(t, 1, nil)
	r := e.R(0)
	u := apptest.MustCreateUser(t, r, "carol")

	t.Run("OK", func(t *testing.T) {
		res := r.Do(t, http.MethodGet, "/v1/me", u.Token, nil)
		apptest.WantStatus(t, res, http.StatusOK)
		var got map[string]any
		if err := json.Unmarshal(res.Body, &got); err != nil {
			t.Fatal(err)
		}
		if got["id"] != u.ID || got["name"] != "carol" {
			t.Errorf("got %s, want id %s and name carol", res.Body, u.ID)
		}
		if _, shown := got["token"]; shown {
			t.Errorf("the token is shown again: %s", res.Body)
		}
	})
	for _, tc := range []struct{ name, authorization string }{
		{"NoToken", ""},
		{"UnknownToken", "Bearer shop_not-a-token"},
		{"AdminToken", "Bearer " + apptest.AdminToken},
		{"EmptyBearer", "Bearer "},
		{"OtherScheme", "Basic " + base64.StdEncoding.EncodeToString([]byte("carol:x"))},
		{"NoScheme", u.Token},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var hdr []string
			if tc.authorization != "" {
				hdr = []string{"Authorization", tc.authorization}
			}
			res := r.Do(t, http.MethodGet, "/v1/me", "", nil, hdr...)
			apptest.WantProblem(t, res, http.StatusUnauthorized, "unauthenticated")
		})
	}
}

func TestProducts_Create(t *testing.T) {
	e := apptest.New(t, 1, nil)
	r := e.R(0)
	u := apptest.MustCreateUser(t, r, "dave")
	valid := `{"sku": "SKU-1", "name": "Mug", "price_cents": 1250, "stock": 7}`

	t.Run("Created", func(t *testing.T) {
		res := r.Do(t, http.MethodPost, "/v1/products", apptest.AdminToken, valid)
		apptest.WantStatus(t, res, http.StatusCreated)
		got := apptest.Decode[apptest.Product](t, res)
		want := apptest.Product{SKU: "SKU-1", Name: "Mug", PriceCents: 1250, StockAvailable: 7, Version: 1}
		if got != want {
			t.Errorf("got %+v, want %+v", got, want)
		}
		if etag := res.Header.Get("ETag"); etag != `"1"` {
			t.Errorf(`ETag %q, want "1"`, etag)
		}
	})
	t.Run("DuplicateSKU", func(t *testing.T) {
		res := r.Do(t, http.MethodPost, "/v1/products", apptest.AdminToken, valid)
		apptest.WantProblem(t, res, http.StatusConflict, "already_exists")
		if got := e.Stock(t, "SKU-1"); got != 7 {
			t.Errorf("stock %d after the duplicate, want 7", got)
		}
	})
	t.Run("AsUser", func(t *testing.T) {
		res := r.Do(t, http.MethodPost, "/v1/products", u.Token, strings.Replace(valid, "SKU-1", "SKU-U", 1))
		apptest.WantProblem(t, res, http.StatusForbidden, "forbidden")
	})
	t.Run("NoToken", func(t *testing.T) {
		res := r.Do(t, http.MethodPost, "/v1/products", "", strings.Replace(valid, "SKU-1", "SKU-N", 1))
		apptest.WantProblem(t, res, http.StatusUnauthorized, "unauthenticated")
	})
	t.Run("UnknownToken", func(t *testing.T) {
		res := r.Do(t, http.MethodPost, "/v1/products", "shop_nobody", strings.Replace(valid, "SKU-1", "SKU-N", 1))
		apptest.WantProblem(t, res, http.StatusUnauthorized, "unauthenticated")
	})
	for _, tc := range []badRequest{
		{"EmptySKU", `{"sku": "", "name": "x", "price_cents": 1, "stock": 1}`, "body breaks the schema"},
		{"SKUWithSpace", `{"sku": "A B", "name": "x", "price_cents": 1, "stock": 1}`, "body breaks the schema"},
		{"SKUTooLong", `{"sku": "` + strings.Repeat("A", 65) + `", "name": "x", "price_cents": 1, "stock": 1}`, "body breaks the schema"},
		{"NegativePrice", `{"sku": "NEG-P", "name": "x", "price_cents": -1, "stock": 1}`, "body breaks the schema"},
		{"NegativeStock", `{"sku": "NEG-S", "name": "x", "price_cents": 1, "stock": -1}`, "body breaks the schema"},
		{"NoPrice", `{"sku": "NO-P", "name": "x", "stock": 1}`, "body breaks the schema"},
		{"NoStock", `{"sku": "NO-S", "name": "x", "price_cents": 1}`, "body breaks the schema"},
		{"NoName", `{"sku": "NO-N", "price_cents": 1, "stock": 1}`, "body breaks the schema"},
		{"PriceNotInteger", `{"sku": "PF", "name": "x", "price_cents": 1.5, "stock": 1}`, "body breaks the schema"},
		{"UnknownField", `{"sku": "UF", "name": "x", "price_cents": 1, "stock": 1, "color": "red"}`, "body breaks the schema"},
		{"MalformedJSON", `{"sku": "MJ"`, "body breaks the schema"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := r.OffContract(tc.breach).Do(t, http.MethodPost, "/v1/products", apptest.AdminToken, tc.body)
			apptest.WantProblem(t, res, http.StatusBadRequest, "invalid_request")
		})
	}
	if n := e.Count(t, `SELECT count(*)::int FROM products`); n != 1 {
		t.Errorf("%d products stored, want 1", n)
	}

	// Without SHOP_ADMIN_TOKEN the admin routes are closed (DESIGN.md §5).
	t.Run("NoAdminTokenConfigured", func(t *testing.T) {
		closed := apptest.New(t, 1, map[string]string{"SHOP_ADMIN_TOKEN": ""})
		u := apptest.MustCreateUser(t, closed.R(0), "erin")
		res := closed.R(0).Do(t, http.MethodPost, "/v1/products", u.Token, valid)
		apptest.WantProblem(t, res, http.StatusForbidden, "forbidden")
		res = closed.R(0).Do(t, http.MethodPost, "/v1/products", "", valid)
		apptest.WantProblem(t, res, http.StatusForbidden, "forbidden")
		res = closed.R(0).Do(t, http.MethodPost, "/v1/products", "not-a-token", valid)
		apptest.WantProblem(t, res, http.StatusForbidden, "forbidden")
		if n := closed.Count(t, `SELECT count(*)::int FROM products`); n != 0 {
			t.Errorf("%d products created with the admin routes closed", n)
		}
	})
}

func TestProducts_List(t *testing.T) {
	e := apptest.New(t, 1, nil)
	r := e.R(0)
	var want []string
	for i := 22; i >= 1; i-- { // created out of order: the list sorts by SKU
		sku := fmt.Sprintf("LIST-%02d", i)
		apptest.MustCreateProduct(t, r, sku, int64(i), i)
		want = append(want, sku)
	}
	slices.Sort(want)

	t.Run("PagesThroughAll", func(t *testing.T) {
		var got []string
		var sizes []int
		cursor := ""
		for range 10 {
			res := r.Do(t, http.MethodGet, "/v1/products?limit=5&cursor="+url.QueryEscape(cursor), "", nil)
			apptest.WantStatus(t, res, http.StatusOK)
			p := apptest.Decode[apptest.Page[apptest.Product]](t, res)
			sizes = append(sizes, len(p.Items))
			for _, it := range p.Items {
				got = append(got, it.SKU)
			}
			if p.NextCursor == nil {
				break
			}
			cursor = *p.NextCursor
		}
		if !slices.Equal(got, want) || !slices.Equal(sizes, []int{5, 5, 5, 5, 2}) {
			t.Errorf("paged %v in pages of %v, want %v in pages of 5,5,5,5,2", got, sizes, want)
		}
	})
	t.Run("DefaultLimit", func(t *testing.T) {
		res := r.Do(t, http.MethodGet, "/v1/products", "", nil)
		apptest.WantStatus(t, res, http.StatusOK)
		p := apptest.Decode[apptest.Page[apptest.Product]](t, res)
		if len(p.Items) != 20 || p.NextCursor == nil {
			t.Errorf("got %d items, next_cursor %v; want 20 and a cursor", len(p.Items), p.NextCursor)
		}
	})
	t.Run("MaxLimit", func(t *testing.T) {
		res := r.Do(t, http.MethodGet, "/v1/products?limit=100", "", nil)
		apptest.WantStatus(t, res, http.StatusOK)
		p := apptest.Decode[apptest.Page[apptest.Product]](t, res)
		if len(p.Items) != 22 || p.NextCursor != nil || !bytes.Contains(res.Body, []byte(`"next_cursor":null`)) {
			t.Errorf("got %d items and next_cursor %v, want 22 and null", len(p.Items), p.NextCursor)
		}
	})
	for _, q := range []string{
		"limit=0", "limit=101", "limit=abc", "limit=-1", "limit=1.5",
		"cursor=" + url.QueryEscape("!!!"),
		"cursor=" + base64.RawURLEncoding.EncodeToString([]byte("not a sku")),
	} {
		t.Run("Bad/"+q, func(t *testing.T) {
			res := r.OffContract(apptest.LimitBreach(q)).Do(t, http.MethodGet, "/v1/products?"+q, "", nil)
			apptest.WantProblem(t, res, http.StatusBadRequest, "invalid_request")
		})
	}
}

func TestProducts_Get(t *testing.T) {
	e := apptest.New(t, 1, nil)
	r := e.R(0)
	apptest.MustCreateProduct(t, r, "GET-1", 300, 4)

	t.Run("OK", func(t *testing.T) {
		res := r.Do(t, http.MethodGet, "/v1/products/GET-1", "", nil)
		apptest.WantStatus(t, res, http.StatusOK)
		got := apptest.Decode[apptest.Product](t, res)
		if got != (apptest.Product{SKU: "GET-1", Name: "Product GET-1", PriceCents: 300, StockAvailable: 4, Version: 1}) {
			t.Errorf("got %+v", got)
		}
		if etag := res.Header.Get("ETag"); etag != `"1"` {
			t.Errorf(`ETag %q, want "1"`, etag)
		}
	})
	for _, sku := range []string{"NOPE", "bad.sku", strings.Repeat("A", 65)} {
		t.Run("NotFound/"+sku[:min(len(sku), 8)], func(t *testing.T) {
			res := r.Do(t, http.MethodGet, "/v1/products/"+sku, "", nil)
			apptest.WantProblem(t, res, http.StatusNotFound, "not_found")
		})
	}
}

func TestProducts_Update(t *testing.T) {
	e := apptest.New(t, 1, nil)
	r := e.R(0)
	apptest.MustCreateProduct(t, r, "PATCH-1", 100, 3)
	u := apptest.MustCreateUser(t, r, "frank")
	patch := func(t *testing.T, token, ifMatch, body string) apptest.Response {
		t.Helper()
		var hdr []string
		if ifMatch != "" {
			hdr = []string{"If-Match", ifMatch}
		}
		return r.Do(t, http.MethodPatch, "/v1/products/PATCH-1", token, body, hdr...)
	}

	t.Run("OK", func(t *testing.T) {
		res := patch(t, apptest.AdminToken, `"1"`, `{"price_cents": 250}`)
		apptest.WantStatus(t, res, http.StatusOK)
		got := apptest.Decode[apptest.Product](t, res)
		if got != (apptest.Product{SKU: "PATCH-1", Name: "Product PATCH-1", PriceCents: 250, StockAvailable: 3, Version: 2}) {
			t.Errorf("got %+v, want price 250 at version 2", got)
		}
		if etag := res.Header.Get("ETag"); etag != `"2"` {
			t.Errorf(`ETag %q, want "2"`, etag)
		}
		res = patch(t, apptest.AdminToken, `"2"`, `{"name": "Big mug"}`)
		apptest.WantStatus(t, res, http.StatusOK)
		if got := apptest.Decode[apptest.Product](t, res); got.Name != "Big mug" || got.PriceCents != 250 || got.Version != 3 {
			t.Errorf("got %+v, want the name changed, the price kept, version 3", got)
		}
	})
	t.Run("StaleVersion", func(t *testing.T) {
		res := patch(t, apptest.AdminToken, `"1"`, `{"price_cents": 1}`)
		apptest.WantProblem(t, res, http.StatusPreconditionFailed, "version_mismatch")
		if n := e.Count(t, `SELECT price_cents::int FROM products WHERE sku = 'PATCH-1'`); n != 250 {
			t.Errorf("stale edit changed the price to %d", n)
		}
	})
	for _, ifMatch := range []string{`"abc"`, `W/"3"`, `*`, `3`} {
		t.Run("IfMatch/"+ifMatch, func(t *testing.T) {
			res := patch(t, apptest.AdminToken, ifMatch, `{"price_cents": 1}`)
			apptest.WantProblem(t, res, http.StatusPreconditionFailed, "version_mismatch")
		})
	}
	t.Run("NoIfMatch", func(t *testing.T) {
		res := r.OffContract("no If-Match").Do(t, http.MethodPatch, "/v1/products/PATCH-1", apptest.AdminToken, `{"price_cents": 1}`)
		apptest.WantProblem(t, res, http.StatusPreconditionRequired, "precondition_required")
	})
	for _, tc := range []badRequest{
		{"UnknownField", `{"price_cents": 1, "stock": 100}`, "body breaks the schema"},
		{"Empty", `{}`, "body breaks the schema"},
		{"NegativePrice", `{"price_cents": -5}`, "body breaks the schema"},
		{"EmptyName", `{"name": ""}`, "body breaks the schema"},
		{"Malformed", `{"name"`, "body breaks the schema"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := r.OffContract(tc.breach).Do(t, http.MethodPatch, "/v1/products/PATCH-1", apptest.AdminToken, tc.body, "If-Match", `"3"`)
			apptest.WantProblem(t, res, http.StatusBadRequest, "invalid_request")
		})
	}
	t.Run("UnknownSKU", func(t *testing.T) {
		res := r.Do(t, http.MethodPatch, "/v1/products/NOPE", apptest.AdminToken, `{"price_cents": 1}`, "If-Match", `"1"`)
		apptest.WantProblem(t, res, http.StatusNotFound, "not_found")
	})
	t.Run("AsUser", func(t *testing.T) {
		apptest.WantProblem(t, patch(t, u.Token, `"3"`, `{"price_cents": 1}`), http.StatusForbidden, "forbidden")
	})
	t.Run("NoToken", func(t *testing.T) {
		apptest.WantProblem(t, patch(t, "", `"3"`, `{"price_cents": 1}`), http.StatusUnauthorized, "unauthenticated")
	})
	if n := e.Count(t, `SELECT version::int FROM products WHERE sku = 'PATCH-1'`); n != 3 {
		t.Errorf("version %d, want 3 (two edits)", n)
	}
}

func TestProducts_Restock(t *testing.T) {
	e := apptest.New(t, 1, nil)
	r := e.R(0)
	apptest.MustCreateProduct(t, r, "RS-1", 100, 10)
	apptest.MustCreateProduct(t, r, "RS-2", 100, 10)
	u := apptest.MustCreateUser(t, r, "gina")
	key := apptest.NewKey()
	restock := func(t *testing.T, sku, token, body string, hdr ...string) apptest.Response {
		t.Helper()
		return r.Do(t, http.MethodPost, "/v1/products/"+sku+"/restock", token, body, hdr...)
	}

	var first apptest.Response
	t.Run("OK", func(t *testing.T) {
		first = restock(t, "RS-1", apptest.AdminToken, `{"quantity": 5}`, "Idempotency-Key", key)
		apptest.WantStatus(t, first, http.StatusOK)
		got := apptest.Decode[apptest.Product](t, first)
		if got.StockAvailable != 15 || got.Version != 1 {
			t.Errorf("got %+v, want stock 15 and the version unchanged (1)", got)
		}
		if first.Header.Get("Idempotent-Replayed") != "" {
			t.Errorf("first answer marked replayed")
		}
	})
	t.Run("Replay", func(t *testing.T) {
		// The same JSON, spelled differently, is the same request.
		for _, body := range []string{`{"quantity": 5}`, `{ "quantity" : 5 }`} {
			res := restock(t, "RS-1", apptest.AdminToken, body, "Idempotency-Key", key)
			apptest.WantStatus(t, res, http.StatusOK)
			if res.Header.Get("Idempotent-Replayed") != "true" || !bytes.Equal(res.Body, first.Body) ||
				res.Header.Get("ETag") != first.Header.Get("ETag") {
				t.Errorf("got %s (replayed %q), want the first answer replayed byte for byte",
					res, res.Header.Get("Idempotent-Replayed"))
			}
		}
		if got := e.Stock(t, "RS-1"); got != 15 {
			t.Errorf("stock %d after replays, want 15 (added once)", got)
		}
	})
	t.Run("KeyReusedOtherBody", func(t *testing.T) {
		res := restock(t, "RS-1", apptest.AdminToken, `{"quantity": 6}`, "Idempotency-Key", key)
		apptest.WantProblem(t, res, http.StatusUnprocessableEntity, "idempotency_key_reused")
	})
	t.Run("KeyReusedOtherPath", func(t *testing.T) {
		res := restock(t, "RS-2", apptest.AdminToken, `{"quantity": 5}`, "Idempotency-Key", key)
		apptest.WantProblem(t, res, http.StatusUnprocessableEntity, "idempotency_key_reused")
	})
	for _, tc := range []struct{ name, key string }{
		{"NoKey", ""},
		{"KeyTooLong", strings.Repeat("k", 256)},
		{"KeyNotPrintable", "caf\u00e9"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var hdr []string
			if tc.key != "" {
				hdr = []string{"Idempotency-Key", tc.key}
			}
			res := r.OffContract("Idempotency-Key missing or malformed").Do(t, http.MethodPost, "/v1/products/RS-1/restock", apptest.AdminToken, `{"quantity": 1}`, hdr...)
			apptest.WantProblem(t, res, http.StatusBadRequest, "idempotency_key_required")
		})
	}
	for _, tc := range []badRequest{
		{"ZeroQuantity", `{"quantity": 0}`, "body breaks the schema"},
		{"NegativeQuantity", `{"quantity": -3}`, "body breaks the schema"},
		{"NoQuantity", `{}`, "body breaks the schema"},
		{"UnknownField", `{"quantity": 1, "sku": "RS-2"}`, "body breaks the schema"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := r.OffContract(tc.breach).Do(t, http.MethodPost, "/v1/products/RS-1/restock", apptest.AdminToken, tc.body, "Idempotency-Key", apptest.NewKey())
			apptest.WantProblem(t, res, http.StatusBadRequest, "invalid_request")
		})
	}
	t.Run("PastStockCap", func(t *testing.T) {
		// A product is created with at most 1,000,000,000 in stock; a
		// restock stops there too.
		apptest.MustCreateProduct(t, r, "RS-CAP", 100, 999_999_999)
		apptest.WantStatus(t, restock(t, "RS-CAP", apptest.AdminToken, `{"quantity": 1}`, "Idempotency-Key", apptest.NewKey()), http.StatusOK)
		for _, q := range []string{"1", "1000000"} {
			res := restock(t, "RS-CAP", apptest.AdminToken, `{"quantity": `+q+`}`, "Idempotency-Key", apptest.NewKey())
			apptest.WantProblem(t, res, http.StatusBadRequest, "invalid_request")
			if d := res.Problem().Detail; !strings.HasPrefix(d, "quantity:") {
				t.Errorf("detail %q, want it to name quantity", d)
			}
		}
		if got := e.Stock(t, "RS-CAP"); got != 1_000_000_000 {
			t.Errorf("stock %d, want 1000000000 (unchanged by the refused restocks)", got)
		}
	})
	t.Run("UnknownSKU", func(t *testing.T) {
		res := restock(t, "NOPE", apptest.AdminToken, `{"quantity": 1}`, "Idempotency-Key", apptest.NewKey())
		apptest.WantProblem(t, res, http.StatusNotFound, "not_found")
	})
	t.Run("AsUser", func(t *testing.T) {
		res := restock(t, "RS-1", u.Token, `{"quantity": 1}`, "Idempotency-Key", apptest.NewKey())
		apptest.WantProblem(t, res, http.StatusForbidden, "forbidden")
	})
	t.Run("NoToken", func(t *testing.T) {
		res := restock(t, "RS-1", "", `{"quantity": 1}`, "Idempotency-Key", apptest.NewKey())
		apptest.WantProblem(t, res, http.StatusUnauthorized, "unauthenticated")
	})
	if a, b := e.Stock(t, "RS-1"), e.Stock(t, "RS-2"); a != 15 || b != 10 {
		t.Errorf("stock %d and %d, want 15 and 10", a, b)
	}
}

func TestOrders_Create(t *testing.T) {
	e := apptest.New(t, 1, nil)
	r := e.R(0)
	apptest.MustCreateProduct(t, r, "ORD-A", 1250, 50)
	apptest.MustCreateProduct(t, r, "ORD-B", 399, 50)
	apptest.MustCreateProduct(t, r, "ORD-SHORT", 100, 1)
	u := apptest.MustCreateUser(t, r, "hank")
	create := func(t *testing.T, token string, body any, hdr ...string) apptest.Response {
		t.Helper()
		return r.Do(t, http.MethodPost, "/v1/orders", token, body, hdr...)
	}
	// noChange checks that nothing was reserved or placed by refused requests.
	noChange := func(t *testing.T, orders, a, b int) {
		t.Helper()
		if n := e.Count(t, `SELECT count(*)::int FROM orders`); n != orders {
			t.Errorf("%d orders, want %d", n, orders)
		}
		if got := e.Stock(t, "ORD-A"); got != a {
			t.Errorf("ORD-A stock %d, want %d", got, a)
		}
		if got := e.Stock(t, "ORD-B"); got != b {
			t.Errorf("ORD-B stock %d, want %d", got, b)
		}
	}

	key := apptest.NewKey()
	body := `{"items": [{"sku": "ORD-B", "quantity": 3}, {"sku": "ORD-A", "quantity": 2}]}`
	var first apptest.Response
	t.Run("Created", func(t *testing.T) {
		before := e.Clock.Now()
		first = create(t, u.Token, body, "Idempotency-Key", key)
		apptest.WantStatus(t, first, http.StatusCreated)
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(first.Body, &fields); err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{"id", "status", "items", "total_cents", "version", "created_at", "expires_at"} {
			if _, ok := fields[f]; !ok {
				t.Errorf("order has no %q: %s", f, first.Body)
			}
		}
		o := apptest.Decode[apptest.Order](t, first)
		if !uuidPattern.MatchString(o.ID) || o.Status != "pending_payment" || o.Version != 1 {
			t.Errorf("got id %q, status %q, version %d; want a uuid, pending_payment, 1", o.ID, o.Status, o.Version)
		}
		wantItems := []apptest.OrderItem{{SKU: "ORD-A", Quantity: 2, UnitPriceCents: 1250}, {SKU: "ORD-B", Quantity: 3, UnitPriceCents: 399}}
		if !slices.Equal(o.Items, wantItems) || o.TotalCents != 2*1250+3*399 {
			t.Errorf("got items %+v total %d, want %+v total %d", o.Items, o.TotalCents, wantItems, 2*1250+3*399)
		}
		created, err1 := time.Parse(time.RFC3339, o.CreatedAt)
		expires, err2 := time.Parse(time.RFC3339, o.ExpiresAt)
		if err1 != nil || err2 != nil || !strings.HasSuffix(o.CreatedAt, "Z") || !strings.HasSuffix(o.ExpiresAt, "Z") {
			t.Errorf("created_at %q, expires_at %q: want RFC 3339 UTC", o.CreatedAt, o.ExpiresAt)
		}
		if created.Before(before.Add(-time.Second)) || expires.Sub(created) != apptest.OrderTTL {
			t.Errorf("created_at %s, expires_at %s: want now and now + %s", created, expires, apptest.OrderTTL)
		}
		if loc := first.Header.Get("Location"); loc != "/v1/orders/"+o.ID {
			t.Errorf("Location %q, want /v1/orders/%s", loc, o.ID)
		}
		noChange(t, 1, 48, 47)
	})
	t.Run("Replay", func(t *testing.T) {
		res := create(t, u.Token, body, "Idempotency-Key", key)
		apptest.WantStatus(t, res, http.StatusCreated)
		if res.Header.Get("Idempotent-Replayed") != "true" || !bytes.Equal(res.Body, first.Body) ||
			res.Header.Get("Location") != first.Header.Get("Location") {
			t.Errorf("got %s, want the first answer replayed byte for byte", res)
		}
		noChange(t, 1, 48, 47)
	})
	t.Run("KeyReusedOtherBody", func(t *testing.T) {
		res := create(t, u.Token, `{"items": [{"sku": "ORD-A", "quantity": 1}]}`, "Idempotency-Key", key)
		apptest.WantProblem(t, res, http.StatusUnprocessableEntity, "idempotency_key_reused")
		noChange(t, 1, 48, 47)
	})
	t.Run("KeyRecordSwept", func(t *testing.T) {
		// The key's record gone, as the sweep removes it after a day: the
		// order's own row remembers its request (orders_user_request_key),
		// and answers only the same request.
		if _, err := e.DB.Exec(context.Background(), `DELETE FROM idempotency_keys`); err != nil {
			t.Fatal(err)
		}
		res := create(t, u.Token, `{"items": [{"sku": "ORD-A", "quantity": 1}]}`, "Idempotency-Key", key)
		apptest.WantProblem(t, res, http.StatusUnprocessableEntity, "idempotency_key_reused")
		noChange(t, 1, 48, 47)
		// That refusal is the key's record now; gone again, the same
		// request finds its order.
		if _, err := e.DB.Exec(context.Background(), `DELETE FROM idempotency_keys`); err != nil {
			t.Fatal(err)
		}
		res = create(t, u.Token, body, "Idempotency-Key", key)
		apptest.WantStatus(t, res, http.StatusCreated)
		if apptest.Decode[apptest.Order](t, res).ID != apptest.Decode[apptest.Order](t, first).ID {
			t.Errorf("got %s, want the first order", res)
		}
		noChange(t, 1, 48, 47)
	})
	t.Run("KeyIsPerUser", func(t *testing.T) {
		other := apptest.MustCreateUser(t, r, "ivy")
		res := create(t, other.Token, body, "Idempotency-Key", key)
		apptest.WantStatus(t, res, http.StatusCreated)
		if apptest.Decode[apptest.Order](t, res).ID == apptest.Decode[apptest.Order](t, first).ID {
			t.Errorf("another user's key replayed the first user's order")
		}
		noChange(t, 2, 46, 44)
	})

	items21 := make([]apptest.Line, 21)
	for i := range items21 {
		items21[i] = apptest.Line{SKU: fmt.Sprintf("S%d", i), Quantity: 1}
	}
	many, _ := json.Marshal(apptest.OrderBody(items21...))
	for _, tc := range []badRequest{
		{"MalformedJSON", `{"items": [`, "body breaks the schema"},
		{"UnknownField", `{"items": [{"sku": "ORD-A", "quantity": 1}], "coupon": "FREE"}`, "body breaks the schema"},
		{"UnknownItemField", `{"items": [{"sku": "ORD-A", "quantity": 1, "price_cents": 0}]}`, "body breaks the schema"},
		{"QuantityString", `{"items": [{"sku": "ORD-A", "quantity": "2"}]}`, "body breaks the schema"},
		{"QuantityFraction", `{"items": [{"sku": "ORD-A", "quantity": 1.5}]}`, "body breaks the schema"},
		{"ItemsNotArray", `{"items": {"sku": "ORD-A", "quantity": 1}}`, "body breaks the schema"},
		{"ItemNotObject", `{"items": ["ORD-A"]}`, "body breaks the schema"},
		{"BodyNotObject", `[{"sku": "ORD-A", "quantity": 1}]`, "body breaks the schema"},
		{"QuantityZero", `{"items": [{"sku": "ORD-A", "quantity": 0}]}`, "body breaks the schema"},
		{"QuantityNegative", `{"items": [{"sku": "ORD-A", "quantity": -1}]}`, "body breaks the schema"},
		{"Quantity101", `{"items": [{"sku": "ORD-A", "quantity": 101}]}`, "body breaks the schema"},
		{"NoQuantity", `{"items": [{"sku": "ORD-A"}]}`, "body breaks the schema"},
		{"NoItems", `{"items": []}`, "body breaks the schema"},
		{"ItemsNull", `{"items": null}`, "body breaks the schema"},
		{"EmptyObject", `{}`, "body breaks the schema"},
		{"EmptyBody", ``, "body breaks the schema"},
		{"TwentyOneItems", string(many), "body breaks the schema"},
		{"DuplicateSKU", `{"items": [{"sku": "ORD-A", "quantity": 1}, {"sku": "ORD-A", "quantity": 2}]}`, ""},
		{"BadSKU", `{"items": [{"sku": "ORD A", "quantity": 1}]}`, "body breaks the schema"},
		{"DuplicateKey", `{"items": [{"sku": "ORD-A", "quantity": 1, "quantity": 2}]}`, ""},
		{"KeyCase", `{"Items": [{"sku": "ORD-A", "quantity": 1}]}`, "body breaks the schema"},
		{"TrailingData", `{"items": [{"sku": "ORD-A", "quantity": 1}]} x`, ""},
	} {
		t.Run("Invalid/"+tc.name, func(t *testing.T) {
			res := r.OffContract(tc.breach).Do(t, http.MethodPost, "/v1/orders", u.Token, tc.body, "Idempotency-Key", apptest.NewKey())
			apptest.WantProblem(t, res, http.StatusBadRequest, "invalid_request")
		})
	}
	noChange(t, 2, 46, 44)

	t.Run("UnknownSKU", func(t *testing.T) {
		res := create(t, u.Token, `{"items": [{"sku": "ORD-A", "quantity": 1}, {"sku": "NOPE", "quantity": 1}]}`,
			"Idempotency-Key", apptest.NewKey())
		apptest.WantProblem(t, res, http.StatusNotFound, "not_found")
		noChange(t, 2, 46, 44)
	})
	t.Run("OutOfStock", func(t *testing.T) {
		res := create(t, u.Token, `{"items": [{"sku": "ORD-SHORT", "quantity": 2}]}`, "Idempotency-Key", apptest.NewKey())
		apptest.WantProblem(t, res, http.StatusConflict, "out_of_stock")
		if d := res.Problem().Detail; !strings.Contains(d, "ORD-SHORT") {
			t.Errorf("detail %q does not name the SKU", d)
		}
		if got := e.Stock(t, "ORD-SHORT"); got != 1 {
			t.Errorf("ORD-SHORT stock %d, want 1", got)
		}
	})
	t.Run("OutOfStock/SecondItemShort", func(t *testing.T) {
		// ORD-A and ORD-B are taken first (stock is taken in SKU order); the
		// third is short, and the first two must come back untouched.
		res := create(t, u.Token, `{"items": [{"sku": "ORD-A", "quantity": 5}, {"sku": "ORD-B", "quantity": 5},
			{"sku": "ORD-SHORT", "quantity": 2}]}`, "Idempotency-Key", apptest.NewKey())
		apptest.WantProblem(t, res, http.StatusConflict, "out_of_stock")
		noChange(t, 2, 46, 44)
		if n := e.Count(t, `SELECT count(*)::int FROM order_items WHERE sku = 'ORD-SHORT'`); n != 0 {
			t.Errorf("%d order items for the short SKU", n)
		}
	})
	t.Run("PayloadTooLarge", func(t *testing.T) {
		big := `{"items": [{"sku": "ORD-A", "quantity": 1}]}` + strings.Repeat(" ", 64<<10)
		res := create(t, u.Token, big, "Idempotency-Key", apptest.NewKey())
		apptest.WantProblem(t, res, http.StatusRequestEntityTooLarge, "payload_too_large")
		// Without Content-Length the limit is found while reading.
		res = create(t, u.Token, bytes.NewBufferString(big), "Idempotency-Key", apptest.NewKey())
		apptest.WantProblem(t, res, http.StatusRequestEntityTooLarge, "payload_too_large")
		noChange(t, 2, 46, 44)
	})
	t.Run("LargestBody", func(t *testing.T) {
		small := `{"items": [{"sku": "ORD-A", "quantity": 1}]}`
		res := create(t, u.Token, small+strings.Repeat(" ", 64<<10-len(small)), "Idempotency-Key", apptest.NewKey())
		apptest.WantStatus(t, res, http.StatusCreated)
		noChange(t, 3, 45, 44)
	})
	t.Run("NoToken", func(t *testing.T) {
		res := create(t, "", body, "Idempotency-Key", apptest.NewKey())
		apptest.WantProblem(t, res, http.StatusUnauthorized, "unauthenticated")
	})
	t.Run("UnknownToken", func(t *testing.T) {
		res := create(t, "shop_nobody", body, "Idempotency-Key", apptest.NewKey())
		apptest.WantProblem(t, res, http.StatusUnauthorized, "unauthenticated")
	})
	t.Run("NoIdempotencyKey", func(t *testing.T) {
		res := r.OffContract("no Idempotency-Key").Do(t, http.MethodPost, "/v1/orders", u.Token, body)
		apptest.WantProblem(t, res, http.StatusBadRequest, "idempotency_key_required")
	})
	t.Run("TwoIdempotencyKeys", func(t *testing.T) {
		res := create(t, u.Token, body, "Idempotency-Key", apptest.NewKey(), "Idempotency-Key", apptest.NewKey())
		apptest.WantProblem(t, res, http.StatusBadRequest, "idempotency_key_required")
	})
	noChange(t, 3, 45, 44)
}

func TestOrders_Get(t *testing.T) {
	e := apptest.New(t, 1, nil)
	r := e.R(0)
	apptest.MustCreateProduct(t, r, "GETO", 100, 10)
	owner, other := apptest.MustCreateUser(t, r, "jack"), apptest.MustCreateUser(t, r, "kate")
	res := r.Do(t, http.MethodPost, "/v1/orders", owner.Token, apptest.OrderBody(apptest.Line{SKU: "GETO", Quantity: 2}), "Idempotency-Key", apptest.NewKey())
	apptest.WantStatus(t, res, http.StatusCreated)
	o := apptest.Decode[apptest.Order](t, res)

	t.Run("Own", func(t *testing.T) {
		got := r.Do(t, http.MethodGet, "/v1/orders/"+o.ID, owner.Token, nil)
		apptest.WantStatus(t, got, http.StatusOK)
		if !bytes.Equal(got.Body, res.Body) {
			t.Errorf("GET gives\n%s\nPOST gave\n%s", got.Body, res.Body)
		}
	})
	for _, tc := range []struct{ name, token, id string }{
		{"OtherUsers", other.Token, o.ID},
		{"NotAUUID", owner.Token, "123"},
		{"Unknown", owner.Token, "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			apptest.WantProblem(t, r.Do(t, http.MethodGet, "/v1/orders/"+tc.id, tc.token, nil), http.StatusNotFound, "not_found")
		})
	}
	t.Run("NoToken", func(t *testing.T) {
		apptest.WantProblem(t, r.Do(t, http.MethodGet, "/v1/orders/"+o.ID, "", nil), http.StatusUnauthorized, "unauthenticated")
	})
}

func TestOrders_List(t *testing.T) {
	e := apptest.New(t, 1, nil)
	r := e.R(0)
	apptest.MustCreateProduct(t, r, "LISTO", 100, 100)
	a, b := apptest.MustCreateUser(t, r, "leo"), apptest.MustCreateUser(t, r, "mia")
	var mine, theirs []string
	for i := range 5 {
		mine = append(mine, apptest.MustCreateOrder(t, r, a.Token, apptest.Line{SKU: "LISTO", Quantity: i + 1}).ID)
		if i < 2 {
			theirs = append(theirs, apptest.MustCreateOrder(t, r, b.Token, apptest.Line{SKU: "LISTO", Quantity: 1}).ID)
		}
	}
	slices.Reverse(mine) // newest first
	slices.Reverse(theirs)

	listAll := func(t *testing.T, token string, limit int) ([]string, []int) {
		t.Helper()
		var ids []string
		var sizes []int
		cursor := ""
		for range 10 {
			res := r.Do(t, http.MethodGet, fmt.Sprintf("/v1/orders?limit=%d&cursor=%s", limit, url.QueryEscape(cursor)), token, nil)
			apptest.WantStatus(t, res, http.StatusOK)
			p := apptest.Decode[apptest.Page[apptest.Order]](t, res)
			sizes = append(sizes, len(p.Items))
			for _, o := range p.Items {
				ids = append(ids, o.ID)
			}
			if p.NextCursor == nil {
				break
			}
			cursor = *p.NextCursor
		}
		return ids, sizes
	}
	t.Run("PagesNewestFirst", func(t *testing.T) {
		ids, sizes := listAll(t, a.Token, 2)
		if !slices.Equal(ids, mine) || !slices.Equal(sizes, []int{2, 2, 1}) {
			t.Errorf("got %v in pages %v, want %v in pages 2,2,1", ids, sizes, mine)
		}
	})
	t.Run("OnlyOwn", func(t *testing.T) {
		if ids, _ := listAll(t, b.Token, 20); !slices.Equal(ids, theirs) {
			t.Errorf("second user lists %v, want only %v", ids, theirs)
		}
		c := apptest.MustCreateUser(t, r, "nobody")
		res := r.Do(t, http.MethodGet, "/v1/orders", c.Token, nil)
		apptest.WantStatus(t, res, http.StatusOK)
		if !bytes.Contains(res.Body, []byte(`"items":[]`)) || !bytes.Contains(res.Body, []byte(`"next_cursor":null`)) {
			t.Errorf("user without orders gets %s, want an empty list", res.Body)
		}
	})
	t.Run("CursorOfAnotherUser", func(t *testing.T) {
		// A cursor is a position, not a permission: it pages only the caller's orders.
		res := r.Do(t, http.MethodGet, "/v1/orders?limit=1", a.Token, nil)
		cursor := *apptest.Decode[apptest.Page[apptest.Order]](t, res).NextCursor
		res = r.Do(t, http.MethodGet, "/v1/orders?cursor="+url.QueryEscape(cursor), b.Token, nil)
		apptest.WantStatus(t, res, http.StatusOK)
		for _, o := range apptest.Decode[apptest.Page[apptest.Order]](t, res).Items {
			if slices.Contains(mine, o.ID) {
				t.Errorf("second user sees order %s of the first", o.ID)
			}
		}
	})
	for _, q := range []string{"limit=0", "limit=101", "limit=abc", "cursor=" + url.QueryEscape("%%%"),
		"cursor=" + base64.RawURLEncoding.EncodeToString([]byte("2026-01-01T00:00:00Z|not-a-uuid")),
		"cursor=" + base64.RawURLEncoding.EncodeToString([]byte("2026-01-01T00:00:00Z|urn:uuid:0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"))} {
		t.Run("Bad/"+q, func(t *testing.T) {
			apptest.WantProblem(t, r.OffContract(apptest.LimitBreach(q)).Do(t, http.MethodGet, "/v1/orders?"+q, a.Token, nil), http.StatusBadRequest, "invalid_request")
		})
	}
	t.Run("NoToken", func(t *testing.T) {
		apptest.WantProblem(t, r.Do(t, http.MethodGet, "/v1/orders", "", nil), http.StatusUnauthorized, "unauthenticated")
	})
}

func TestOrders_Cancel(t *testing.T) {
	e := apptest.New(t, 1, nil)
	r := e.R(0)
	apptest.MustCreateProduct(t, r, "CXL", 100, 10)
	owner, other := apptest.MustCreateUser(t, r, "nina"), apptest.MustCreateUser(t, r, "otto")
	cancel := func(t *testing.T, token, id string) apptest.Response {
		t.Helper()
		return r.Do(t, http.MethodPost, "/v1/orders/"+id+"/cancel", token, nil)
	}

	o := apptest.MustCreateOrder(t, r, owner.Token, apptest.Line{SKU: "CXL", Quantity: 3})
	t.Run("OtherUsers", func(t *testing.T) {
		apptest.WantProblem(t, cancel(t, other.Token, o.ID), http.StatusNotFound, "not_found")
		if n := e.Count(t, `SELECT count(*)::int FROM orders WHERE id = $1 AND status = 'pending_payment'`, o.ID); n != 1 {
			t.Errorf("another user's cancel changed the order")
		}
	})
	var first apptest.Response
	t.Run("Cancelled", func(t *testing.T) {
		first = cancel(t, owner.Token, o.ID)
		apptest.WantStatus(t, first, http.StatusOK)
		if got := apptest.Decode[apptest.Order](t, first); got.Status != "cancelled" || got.Version != 2 || got.ID != o.ID {
			t.Errorf("got %s, want order %s cancelled at version 2", first.Body, o.ID)
		}
		if got := e.Stock(t, "CXL"); got != 10 {
			t.Errorf("stock %d, want 10 (returned)", got)
		}
	})
	t.Run("AgainUnchanged", func(t *testing.T) {
		res := cancel(t, owner.Token, o.ID)
		apptest.WantStatus(t, res, http.StatusOK)
		if !bytes.Equal(res.Body, first.Body) {
			t.Errorf("second cancel gives\n%s\nfirst gave\n%s", res.Body, first.Body)
		}
		if got := e.Stock(t, "CXL"); got != 10 {
			t.Errorf("stock %d, want 10 (returned once)", got)
		}
		if n := e.Count(t, `SELECT count(*)::int FROM stock_releases WHERE order_id = $1`, o.ID); n != 1 {
			t.Errorf("%d releases, want 1", n)
		}
	})
	t.Run("Paid", func(t *testing.T) {
		paid := apptest.MustCreateOrder(t, r, owner.Token, apptest.Line{SKU: "CXL", Quantity: 1})
		if _, err := e.DB.Exec(context.Background(), `UPDATE orders SET status = 'paid', version = version + 1 WHERE id = $1`, paid.ID); err != nil {
			t.Fatal(err)
		}
		res := cancel(t, owner.Token, paid.ID)
		apptest.WantProblem(t, res, http.StatusConflict, "invalid_state")
		if d := res.Problem().Detail; !strings.Contains(d, "paid") {
			t.Errorf("detail %q does not give the state", d)
		}
		if got := e.Stock(t, "CXL"); got != 9 {
			t.Errorf("stock %d, want 9 (a paid order keeps its stock)", got)
		}
	})
	for _, tc := range []struct{ name, id string }{
		{"NotAUUID", "xyz"},
		{"Unknown", "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			apptest.WantProblem(t, cancel(t, owner.Token, tc.id), http.StatusNotFound, "not_found")
		})
	}
	t.Run("NoToken", func(t *testing.T) {
		apptest.WantProblem(t, cancel(t, "", o.ID), http.StatusUnauthorized, "unauthenticated")
	})
	t.Run("ResourceBusy", func(t *testing.T) {
		// Another replica holds the order's lock past the wait budget.
		busy := apptest.MustCreateOrder(t, r, owner.Token, apptest.Line{SKU: "CXL", Quantity: 1})
		clients := redisx.Clients(testenv.RedisAddrs(t))
		t.Cleanup(func() { _ = redisx.Close(clients) })
		holder, err := lock.New(clients, lock.Options{})
		if err != nil {
			t.Fatal(err)
		}
		held, release := make(chan struct{}), make(chan struct{})
		done := make(chan error, 1)
		go func() {
			done <- holder.Do(context.Background(), "order:"+busy.ID, func(context.Context) error {
				close(held)
				<-release
				return nil
			})
		}()
		<-held
		res := cancel(t, owner.Token, busy.ID)
		close(release)
		if err := <-done; err != nil {
			t.Fatalf("holder: %v", err)
		}
		apptest.WantProblem(t, res, http.StatusConflict, "resource_busy")
		if n := e.Count(t, `SELECT count(*)::int FROM orders WHERE id = $1 AND status = 'pending_payment'`, busy.ID); n != 1 {
			t.Errorf("a busy cancel changed the order")
		}
		apptest.WantStatus(t, cancel(t, owner.Token, busy.ID), http.StatusOK)
	})
}

// TestOrders_CancelExpired expires an order with the injected clock and the
// expiry job, then tries to cancel it.
func TestOrders_CancelExpired(t *testing.T) {
	e := apptest.New(t, 1, nil)
	r := e.R(0)
	apptest.MustCreateProduct(t, r, "EXPD", 100, 10)
	u := apptest.MustCreateUser(t, r, "pat")
	o := apptest.MustCreateOrder(t, r, u.Token, apptest.Line{SKU: "EXPD", Quantity: 4})

	e.Clock.Advance(apptest.OrderTTL + time.Second)
	if n, err := r.App.Orders.ExpireDue(context.Background()); err != nil || n != 1 {
		t.Fatalf("ExpireDue: %d, %v; want 1, nil", n, err)
	}
	res := r.Do(t, http.MethodGet, "/v1/orders/"+o.ID, u.Token, nil)
	apptest.WantStatus(t, res, http.StatusOK)
	if got := apptest.Decode[apptest.Order](t, res); got.Status != "expired" || got.Version != 2 {
		t.Errorf("got %s, want expired at version 2", res.Body)
	}
	res = r.Do(t, http.MethodPost, "/v1/orders/"+o.ID+"/cancel", u.Token, nil)
	apptest.WantProblem(t, res, http.StatusConflict, "invalid_state")
	if d := res.Problem().Detail; !strings.Contains(d, "expired") {
		t.Errorf("detail %q does not give the state", d)
	}
	if got := e.Stock(t, "EXPD"); got != 10 {
		t.Errorf("stock %d, want 10 (returned once, by the expiry)", got)
	}
	if n := e.Count(t, `SELECT count(*)::int FROM stock_releases WHERE order_id = $1 AND reason = 'expired'`, o.ID); n != 1 {
		t.Errorf("%d expired releases, want 1", n)
	}
}

func TestOperations(t *testing.T) {
	e := apptest.New(t, 1, nil)
	r := e.R(0)

	for _, path := range []string{"/healthz", "/readyz"} {
		t.Run(path, func(t *testing.T) {
			apptest.WantStatus(t, r.Do(t, http.MethodGet, path, "", nil), http.StatusOK)
		})
	}
	t.Run("UnknownRoute", func(t *testing.T) {
		apptest.WantProblem(t, r.OffContract("no such route").Do(t, http.MethodGet, "/v1/nothing-here", "", nil), http.StatusNotFound, "not_found")
	})
	t.Run("WrongMethod", func(t *testing.T) {
		res := r.OffContract("no such method").Do(t, http.MethodDelete, "/v1/products", "", nil)
		apptest.WantProblem(t, res, http.StatusMethodNotAllowed, "method_not_allowed")
		if allow := res.Header.Get("Allow"); !strings.Contains(allow, http.MethodGet) {
			t.Errorf("Allow %q, want it to list GET", allow)
		}
	})
	t.Run("NoMetricsOnTheAPIPort", func(t *testing.T) {
		apptest.WantProblem(t, r.OffContract("no /metrics on the API's port").Do(t, http.MethodGet, "/metrics", "", nil), http.StatusNotFound, "not_found")
	})
	t.Run("Metrics", func(t *testing.T) {
		metrics := func() string { return apptest.Scrape(t, r) }
		if m := metrics(); !strings.Contains(m, "shop_http_requests_total{") {
			t.Errorf("/metrics has no shop_http_requests_total")
		}
		if m := metrics(); strings.Contains(m, "shop_conflicts_stopped_total{") {
			t.Fatalf("conflicts counted before any conflict")
		}
		apptest.MustCreateProduct(t, r, "MET", 100, 10)
		u := apptest.MustCreateUser(t, r, "quinn")
		key := apptest.NewKey()
		for range 2 {
			res := r.Do(t, http.MethodPost, "/v1/orders", u.Token, apptest.OrderBody(apptest.Line{SKU: "MET", Quantity: 1}), "Idempotency-Key", key)
			apptest.WantStatus(t, res, http.StatusCreated)
		}
		m := metrics()
		if !regexp.MustCompile(`(?m)^shop_conflicts_stopped_total\{flow="create_order",layer="idempotency"\} 1$`).MatchString(m) {
			t.Errorf("the duplicate request is not counted as stopped by the idempotency layer:\n%s",
				apptest.GrepLines(m, "shop_conflicts_stopped_total"))
		}
		if !regexp.MustCompile(`(?m)^shop_http_requests_total\{method="POST",route="/v1/orders",status="201"\} 2$`).MatchString(m) {
			t.Errorf("the two order requests are not counted:\n%s", apptest.GrepLines(m, "shop_http_requests_total"))
		}
	})
}

func TestRequestID(t *testing.T) {
	e := apptest.New(t, 1, nil)
	r := e.R(0)
	for _, tc := range []struct {
		name, path, sent string
		echoed           bool
	}{
		{"WellFormed", "/healthz", "req-123.abc:XYZ_9", true},
		{"WellFormedOnError", "/v1/me", "trace-42", true},
		{"Malformed", "/healthz", "bad id\twith <html>", false},
		{"TooLong", "/healthz", strings.Repeat("a", 65), false},
		{"Absent", "/healthz", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var hdr []string
			if tc.sent != "" {
				hdr = []string{"X-Request-ID", tc.sent}
			}
			res := r.Do(t, http.MethodGet, tc.path, "", nil, hdr...)
			got := res.Header.Get("X-Request-ID")
			switch {
			case tc.echoed && got != tc.sent:
				t.Errorf("X-Request-ID %q, want %q echoed", got, tc.sent)
			case !tc.echoed && !uuidPattern.MatchString(got):
				t.Errorf("X-Request-ID %q, want a fresh uuid in place of %q", got, tc.sent)
			}
		})
	}
}

// Through the HTTP route, create-order runs under the idempotency claim on
// (user, key) and takes no Redis lock on the same key; cancel, which has no
// claim, takes its lock on the order: one Redis lock after the key
// schemes' clean-up, two (the scheme-1 name and its own) in transition.
func TestOrders_LockUse(t *testing.T) {
	for _, tc := range []struct {
		transition string
		want       string
	}{{"off", "1"}, {"on", "2"}} {
		t.Run("transition "+tc.transition, func(t *testing.T) {
			e := apptest.New(t, 1, map[string]string{"SHOP_KEY_TRANSITION": tc.transition})
			r := e.R(0)
			apptest.MustCreateProduct(t, r, "LOCKS", 100, 10)
			u := apptest.MustCreateUser(t, r, "lena")
			acquired := func() string {
				m := regexp.MustCompile(`(?m)^shop_lock_acquisitions_total\{outcome="acquired"\} (\d+)$`).FindStringSubmatch(apptest.Scrape(t, r))
				if m == nil {
					return "0"
				}
				return m[1]
			}
			res := r.Do(t, http.MethodPost, "/v1/orders", u.Token, apptest.OrderBody(apptest.Line{SKU: "LOCKS", Quantity: 1}), "Idempotency-Key", apptest.NewKey())
			apptest.WantStatus(t, res, http.StatusCreated)
			if got := acquired(); got != "0" {
				t.Fatalf("create took %s Redis locks, want 0: the idempotency claim is its lock", got)
			}
			o := apptest.Decode[apptest.Order](t, res)
			apptest.WantStatus(t, r.Do(t, http.MethodPost, "/v1/orders/"+o.ID+"/cancel", u.Token, nil), http.StatusOK)
			if got := acquired(); got != tc.want {
				t.Fatalf("cancel took %s Redis locks, want %s", got, tc.want)
			}
		})
	}
}
