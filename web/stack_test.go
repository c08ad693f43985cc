//go:build browser

package web_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shop-example/shop/harness/apptest"
	"github.com/shop-example/shop/harness/testenv"
	"github.com/shop-example/shop/internal/app"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// stack is what `docker compose up` runs, in one process (apptest): two
// replicas, api-1 and api-2, behind a round-robin balancer, a payment
// gateway, PostgreSQL and the Redis quorum; a demo server, with the rate
// limits on, and the race lab's own gateway and mail provider.
type stack struct {
	url        string // the balancer's, behind front (Jaeger's query API beside it)
	jaeger     *jaeger
	gateway    string
	labGateway string // the live copy's: a lab order's charges are there
	labMailer  string // the live copy's: a lab order's receipts are there
	db         *pgxpool.Pool
}

func startStack(t *testing.T) *stack {
	t.Helper()
	// The replicas send their spans to the Jaeger stand-in, as compose's
	// do with make up-observability; the OTLP exporter reads the
	// process's environment, the service's settings its Vars.
	j := startJaeger(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", j.url)
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "200")
	s := apptest.StartWith(t, 2, apptest.StackOptions{
		Vars: map[string]string{
			"SHOP_DEMO":                   "true",
			"SHOP_RATE_LIMIT":             "on",
			"SHOP_GATEWAY_TIMEOUT":        "3s",
			"OTEL_EXPORTER_OTLP_ENDPOINT": j.url,
		},
		Names:      []string{"api-1", "api-2"},
		LabGateway: true,
		LabMailer:  true,
	})
	if _, err := app.Seed(context.Background(), s.Env.DB); err != nil {
		t.Fatal(err)
	}
	return &stack{url: front(t, s.BaseURL, j), jaeger: j, gateway: s.GatewayURL, labGateway: s.LabGatewayURL, labMailer: s.LabMailerURL, db: s.Env.DB}
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

// post sends body to path on the stack with token, and wants a 201.
func (s *stack) post(t *testing.T, path, token, body string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, s.url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusCreated {
		t.Fatalf("POST %s: %d %s", path, res.StatusCode, b)
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
