package main

import (
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shop-example/shop/harness/testenv"
)

// `shop serve` answers the API on SHOP_HTTP_ADDR and the metrics on
// SHOP_METRICS_ADDR, each only there; SIGTERM stops both and the process
// exits cleanly.
func TestServe_MetricsListener(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a server process against real PostgreSQL and Redis")
	}
	s := startServer(t, []string{
		"SHOP_DATABASE_URL=" + testenv.DatabaseURL(t),
		"SHOP_REDIS_ADDRS=" + strings.Join(testenv.RedisAddrs(t), ","),
		"SHOP_GATEWAY_URL=http://127.0.0.1:1", // never called here
	})
	get := func(url string) (int, http.Header, string) {
		t.Helper()
		res, err := http.Get(url)
		if err != nil {
			t.Fatalf("GET %s: %v", url, err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, res.Header, string(b)
	}

	status, header, body := get(s.url + "/metrics")
	if status != http.StatusNotFound || header.Get("Content-Type") != "application/problem+json" || !strings.Contains(body, `"code":"not_found"`) {
		t.Errorf("GET /metrics on the API port: %d %s %s, want 404 not_found", status, header.Get("Content-Type"), body)
	}
	status, header, body = get(s.metricsURL + "/metrics")
	if status != http.StatusOK || !strings.HasPrefix(header.Get("Content-Type"), "text/plain") {
		t.Fatalf("GET /metrics on the metrics port: %d %s", status, header.Get("Content-Type"))
	}
	// startServer waited for /readyz: its check and its request are counted.
	for _, want := range []string{"\nshop_ready 1\n", `shop_http_requests_total{method="GET",route="/readyz",status="200"}`} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %q", strings.TrimSpace(want))
		}
	}
	for _, path := range []string{"/readyz", "/v1/products"} {
		if status, _, _ := get(s.metricsURL + path); status != http.StatusNotFound {
			t.Errorf("GET %s on the metrics port: %d, want 404: it serves the metrics only", path, status)
		}
	}

	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.done:
	case <-time.After(30 * time.Second):
		t.Fatal("no exit 30s after SIGTERM")
	}
	if s.exitErr != nil {
		t.Errorf("exit after SIGTERM: %v, want 0", s.exitErr)
	}
	for _, u := range []string{s.url + "/healthz", s.metricsURL + "/metrics"} {
		if res, err := http.Get(u); err == nil {
			res.Body.Close()
			t.Errorf("GET %s after the exit answered %d", u, res.StatusCode)
		}
	}
}
