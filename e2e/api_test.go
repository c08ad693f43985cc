//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"testing"
)

// The resources of docs/API.md, as far as the scenario reads them.
type (
	user struct {
		ID    string `json:"id"`
		Token string `json:"token"`
	}
	product struct {
		SKU            string `json:"sku"`
		StockAvailable int    `json:"stock_available"`
	}
	orderItem struct {
		SKU      string `json:"sku"`
		Quantity int    `json:"quantity"`
	}
	order struct {
		ID     string      `json:"id"`
		Status string      `json:"status"`
		Items  []orderItem `json:"items"`
	}
	payment struct {
		ID          string  `json:"id"`
		OrderID     string  `json:"order_id"`
		Status      string  `json:"status"`
		AmountCents int64   `json:"amount_cents"`
		ChargeID    *string `json:"charge_id"`
		RefundID    *string `json:"refund_id"`
	}
	// charge is a charge in the gateway's audit.
	charge struct {
		ID        string `json:"id"`
		Status    string `json:"status"`
		Reference string `json:"reference"`
	}
)

// expect sends req and fails the test unless the answer has the status.
func expect[T any](ctx context.Context, t testing.TB, c *client, req request, status int) T {
	t.Helper()
	var v T
	resp, err := c.do(ctx, req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.method, req.path, err)
	}
	if resp.status != status {
		t.Fatalf("%s %s: got %s, want %d", req.method, req.path, resp, status)
	}
	if err := resp.decode(&v); err != nil {
		t.Fatalf("%s %s: %v", req.method, req.path, err)
	}
	return v
}

func register(ctx context.Context, c *client, name string) (user, error) {
	var u user
	resp, err := c.do(ctx, request{method: http.MethodPost, path: "/v1/users", body: map[string]string{"name": name}})
	if err != nil {
		return u, err
	}
	if resp.status != http.StatusCreated {
		return u, fmt.Errorf("register %s: %s", name, resp)
	}
	return u, resp.decode(&u)
}

func getProduct(ctx context.Context, t testing.TB, c *client, sku string) product {
	t.Helper()
	return expect[product](ctx, t, c, request{method: http.MethodGet, path: "/v1/products/" + sku}, http.StatusOK)
}

// listOrders returns every order of the user, following the cursor.
func listOrders(ctx context.Context, c *client, token string) ([]order, error) {
	var all []order
	cursor := ""
	for page := 0; page < 100; page++ {
		path := "/v1/orders?limit=100"
		if cursor != "" {
			path += "&cursor=" + url.QueryEscape(cursor)
		}
		resp, err := c.do(ctx, request{method: http.MethodGet, path: path, token: token})
		if err != nil {
			return nil, err
		}
		if resp.status != http.StatusOK {
			return nil, fmt.Errorf("list orders: %s", resp)
		}
		var p struct {
			Items      []order `json:"items"`
			NextCursor string  `json:"next_cursor"`
		}
		if err := resp.decode(&p); err != nil {
			return nil, err
		}
		all = append(all, p.Items...)
		if p.NextCursor == "" {
			return all, nil
		}
		cursor = p.NextCursor
	}
	return nil, fmt.Errorf("list orders: more than 100 pages")
}

// succeededPayments counts the order's payments with status succeeded.
func succeededPayments(ctx context.Context, c *client, token, orderID string) (int, error) {
	resp, err := c.do(ctx, request{method: http.MethodGet, path: "/v1/orders/" + orderID + "/payments", token: token})
	if err != nil {
		return 0, err
	}
	if resp.status != http.StatusOK {
		return 0, fmt.Errorf("list payments of %s: %s", orderID, resp)
	}
	var p struct {
		Items []payment `json:"items"`
	}
	if err := resp.decode(&p); err != nil {
		return 0, err
	}
	n := 0
	for _, pm := range p.Items {
		if pm.Status == "succeeded" {
			n++
		}
	}
	return n, nil
}
