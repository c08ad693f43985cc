//go:build browser

package web_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shop-example/shop/internal/app"
	"github.com/shop-example/shop/internal/gateway"
	"github.com/shop-example/shop/internal/gateway/gatewaytest"
	"github.com/shop-example/shop/internal/platform/config"
	"github.com/shop-example/shop/internal/platform/redisx"
	"github.com/shop-example/shop/internal/platform/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// stack is what `docker compose up` runs, in one process: two replicas
// behind a round-robin balancer, a payment gateway, PostgreSQL and the
// Redis quorum; a demo server, with the rate limits on, and the race
// lab's own gateway.
type stack struct {
	url        string // the balancer's
	gateway    string
	labGateway string // the live copy's: a lab order's charges are there
	db         *pgxpool.Pool
}

func startStack(t *testing.T) *stack {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lbURL := "http://" + ln.Addr().String()
	dbURL := testenv.DatabaseURL(t)
	environ := map[string]string{
		"SHOP_DATABASE_URL":    dbURL,
		"SHOP_REDIS_ADDRS":     strings.Join(testenv.RedisAddrs(t), ","),
		"SHOP_ADMIN_TOKEN":     "browser-admin-token",
		"SHOP_DEMO":            "true",
		"SHOP_LAB_TARGET":      lbURL,
		"SHOP_GATEWAY_TIMEOUT": "3s",
	}
	cfg, err := config.FromEnv(func(k string) string { return environ[k] })
	if err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	_, gwURL := gatewaytest.Start(t, gateway.Options{SlowDelay: cfg.GatewaySlowDelay, Logger: logger})
	cfg.GatewayURL = gwURL
	_, labGwURL := gatewaytest.Start(t, gateway.Options{SlowDelay: cfg.GatewaySlowDelay, Logger: logger})
	cfg.LabGatewayURL = labGwURL

	db := testenv.PoolFor(t, dbURL)
	if _, err := app.Seed(context.Background(), db); err != nil {
		t.Fatal(err)
	}
	var backends []*url.URL
	for i := range 2 {
		c := cfg
		c.ReplicaName = fmt.Sprintf("api-%d", i+1)
		clients := redisx.Clients(c.RedisAddrs)
		t.Cleanup(func() { _ = redisx.Close(clients) })
		a, err := app.New(c, app.Deps{Pool: testenv.PoolFor(t, dbURL), Redis: clients, Logger: logger})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(a.Close)
		srv := httptest.NewServer(a.Echo)
		t.Cleanup(srv.Close)
		u, _ := url.Parse(srv.URL)
		backends = append(backends, u)
	}
	var next atomic.Uint64
	lb := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(backends[next.Add(1)%uint64(len(backends))])
			r.SetXForwarded()
		},
		FlushInterval: -1, // Server-Sent Events go through as they come
	}
	srv := &http.Server{Handler: lb, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return &stack{url: lbURL, gateway: gwURL, labGateway: labGwURL, db: db}
}

// get reads path from the stack with token (may be empty) into v.
func (s *stack) get(t *testing.T, base, path, token string, v any) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s", path, res.StatusCode, b)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
}

// count runs a count query on the stack's database.
func (s *stack) count(t *testing.T, sql string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := s.db.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}
