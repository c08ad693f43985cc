package apptest

import (
	"net/http"
	"testing"
)

// The JSON shapes of API.md.
type (
	User struct {
		ID    string `json:"id"`
		Name  string `json:"name"`
		Token string `json:"token"`
	}
	Product struct {
		SKU            string `json:"sku"`
		Name           string `json:"name"`
		PriceCents     int64  `json:"price_cents"`
		StockAvailable int    `json:"stock_available"`
		Version        int64  `json:"version"`
	}
	Page[T any] struct {
		Items      []T     `json:"items"`
		NextCursor *string `json:"next_cursor"`
	}
	Line struct {
		SKU      string `json:"sku"`
		Quantity int    `json:"quantity"`
	}
	OrderItem struct {
		SKU            string `json:"sku"`
		Quantity       int    `json:"quantity"`
		UnitPriceCents int64  `json:"unit_price_cents"`
	}
	Order struct {
		ID         string      `json:"id"`
		Status     string      `json:"status"`
		Items      []OrderItem `json:"items"`
		TotalCents int64       `json:"total_cents"`
		Version    int64       `json:"version"`
		CreatedAt  string      `json:"created_at"`
		ExpiresAt  string      `json:"expires_at"`
	}
)

// OrderBody is the body of POST /v1/orders.
func OrderBody(lines ...Line) map[string]any { return map[string]any{"items": lines} }

func MustCreateUser(t testing.TB, r *Replica, name string) User {
	t.Helper()
	res := r.Do(t, http.MethodPost, "/v1/users", "", map[string]string{"name": name})
	WantStatus(t, res, http.StatusCreated)
	u := Decode[User](t, res)
	if u.ID == "" || u.Token == "" || u.Name != name {
		t.Fatalf("POST /v1/users: want id, name %q and token, got %s", name, res.Body)
	}
	return u
}

func MustCreateProduct(t testing.TB, r *Replica, sku string, priceCents int64, stock int) Product {
	t.Helper()
	res := r.Do(t, http.MethodPost, "/v1/products", AdminToken,
		map[string]any{"sku": sku, "name": "Product " + sku, "price_cents": priceCents, "stock": stock})
	WantStatus(t, res, http.StatusCreated)
	return Decode[Product](t, res)
}

func MustCreateOrder(t testing.TB, r *Replica, token string, lines ...Line) Order {
	t.Helper()
	res := r.Do(t, http.MethodPost, "/v1/orders", token, OrderBody(lines...), "Idempotency-Key", NewKey())
	WantStatus(t, res, http.StatusCreated)
	return Decode[Order](t, res)
}
