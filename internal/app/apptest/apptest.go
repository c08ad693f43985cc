// Package apptest starts the whole stack for a test that talks to it only
// over HTTP, as a client outside would: replicas of the service on one
// test database and the Redis lock quorum, the payment gateway, and a
// round-robin balancer in front, as docker compose runs them. The k6
// scripts' runner test uses it; the flow tests of package app keep their
// own harness, which also reaches into the replicas.
package apptest

import (
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/shop-example/shop/internal/app"
	"github.com/shop-example/shop/internal/gateway"
	"github.com/shop-example/shop/internal/gateway/gatewaytest"
	"github.com/shop-example/shop/internal/platform/config"
	"github.com/shop-example/shop/internal/platform/redisx"
	"github.com/shop-example/shop/internal/platform/testenv"
)

// AdminToken is SHOP_ADMIN_TOKEN in the stack.
const AdminToken = "apptest-admin-token"

// Stack is a running stack; everything stops when the test ends.
type Stack struct {
	BaseURL    string   // the balancer
	GatewayURL string   // the payment gateway, for its audit
	Replicas   []string // each replica's own URL
}

// Start starts replicas of the service behind a balancer. vars override
// the service's environment; the rate limits are off unless vars turn
// them on (load scripts register many users from one address).
func Start(t testing.TB, replicas int, vars map[string]string) *Stack {
	t.Helper()
	dbURL := testenv.DatabaseURL(t)
	environ := map[string]string{
		"SHOP_DATABASE_URL": dbURL,
		"SHOP_REDIS_ADDRS":  strings.Join(testenv.RedisAddrs(t), ","),
		"SHOP_ADMIN_TOKEN":  AdminToken,
		"SHOP_RATE_LIMIT":   "off",
	}
	maps.Copy(environ, vars)
	cfg, err := config.FromEnv(func(k string) string { return environ[k] })
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	logger := testLogger(t)
	_, gwURL := gatewaytest.Start(t, gateway.Options{SlowDelay: cfg.GatewaySlowDelay, Logger: logger})
	cfg.GatewayURL = gwURL

	s := &Stack{GatewayURL: gwURL}
	var backends []*url.URL
	for range replicas {
		pool := testenv.PoolFor(t, dbURL)
		clients := redisx.Clients(cfg.RedisAddrs)
		t.Cleanup(func() { _ = redisx.Close(clients) })
		a, err := app.New(cfg, app.Deps{Pool: pool, Redis: clients, Logger: logger})
		if err != nil {
			t.Fatalf("app.New: %v", err)
		}
		t.Cleanup(a.Close)
		srv := httptest.NewServer(a.Echo)
		t.Cleanup(srv.Close)
		s.Replicas = append(s.Replicas, srv.URL)
		u, _ := url.Parse(srv.URL)
		backends = append(backends, u)
	}
	lb := httptest.NewServer(balancer(backends))
	t.Cleanup(lb.Close)
	s.BaseURL = lb.URL
	return s
}

// balancer sends each request to the next backend in turn, as the
// compose stack's nginx does.
func balancer(backends []*url.URL) http.Handler {
	var next atomic.Uint64
	proxies := make([]*httputil.ReverseProxy, len(backends))
	for i, b := range backends {
		proxies[i] = &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) { r.SetURL(b) }}
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		proxies[int(next.Add(1)%uint64(len(proxies)))].ServeHTTP(w, r)
	})
}

// testLogger sends the service's warnings and errors to the test log, and
// drops them once the test is over (a late log line would panic).
func testLogger(t testing.TB) *slog.Logger {
	w := &logWriter{t: t}
	t.Cleanup(w.stop) // registered first, so it runs after the servers close
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type logWriter struct {
	mu   sync.Mutex
	t    testing.TB
	done bool
}

func (w *logWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log("service: " + strings.TrimSpace(string(p)))
	}
	return len(p), nil
}

func (w *logWriter) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.done = true
}
