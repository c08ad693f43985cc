package app_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shop-example/shop/harness/apptest"
	"github.com/shop-example/shop/harness/testenv"
	"github.com/shop-example/shop/internal/app"
	"github.com/shop-example/shop/internal/platform/config"
	"github.com/shop-example/shop/internal/platform/redisx"
)

// replicaOn is one replica of the service on the database at dbURL, whose
// pool connects only when a request needs it, as a replica whose database
// went away after it started.
func replicaOn(t *testing.T, dbURL string) *apptest.Replica {
	t.Helper()
	environ := map[string]string{
		"SHOP_DATABASE_URL": dbURL,
		"SHOP_REDIS_ADDRS":  strings.Join(testenv.RedisAddrs(t), ","),
		"SHOP_ADMIN_TOKEN":  apptest.AdminToken,
	}
	cfg, err := config.FromEnv(func(k string) string { return environ[k] })
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	pool, err := pgxpool.New(context.Background(), dbURL)
	if err != nil {
		t.Fatalf("pool: %v", err)
	}
	t.Cleanup(pool.Close)
	clients := redisx.Clients(cfg.RedisAddrs)
	t.Cleanup(func() { _ = redisx.Close(clients) })
	a, err := app.New(cfg, app.Deps{Pool: pool, Redis: clients, Logger: apptest.Logger(t)})
	if err != nil {
		t.Fatalf("app.New: %v", err)
	}
	t.Cleanup(a.Close)
	return apptest.Serve(t, a, &http.Client{Transport: apptest.CheckedTransport(t, http.DefaultTransport), Timeout: 30 * time.Second})
}

// A database that refuses connections, or is full (SQLSTATE 53300, as
// `shop bench orders -clients 128` once made it), answers every request
// that needs it with 503 unavailable and Retry-After, never 500.
func TestDatabaseUnavailable(t *testing.T) {
	for _, tc := range []struct {
		name string
		url  func(testing.TB) string
	}{
		{"Refused", testenv.UnreachableDatabaseURL},
		{"TooManyConnections", testenv.FullDatabaseURL},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := replicaOn(t, tc.url(t))
			for _, req := range []struct {
				method, path, token string
				body                any
				header              []string
			}{
				{http.MethodPost, "/v1/users", "", `{"name": "una"}`, nil},
				{http.MethodGet, "/v1/me", "shop_some-token", nil, nil},
				{http.MethodGet, "/v1/products", "", nil, nil},
				{http.MethodGet, "/v1/products/SKU-1", "", nil, nil},
				{http.MethodPost, "/v1/products", apptest.AdminToken, `{"sku": "U-1", "name": "x", "price_cents": 1, "stock": 1}`, nil},
				{http.MethodPost, "/v1/products/SKU-1/restock", apptest.AdminToken, `{"quantity": 1}`, []string{"Idempotency-Key", apptest.NewKey()}},
				{http.MethodPost, "/v1/orders", "shop_some-token", apptest.OrderBody(apptest.Line{SKU: "SKU-1", Quantity: 1}), []string{"Idempotency-Key", apptest.NewKey()}},
			} {
				res := r.Do(t, req.method, req.path, req.token, req.body, req.header...)
				if res.Status != http.StatusServiceUnavailable || res.Code() != "unavailable" {
					t.Errorf("%s %s: got %s, want 503 unavailable", req.method, req.path, res)
					continue
				}
				if got := res.Header.Get("Retry-After"); got != "2" {
					t.Errorf("%s %s: Retry-After %q, want 2", req.method, req.path, got)
				}
			}
		})
	}
}
