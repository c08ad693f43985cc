package contract_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/shop-example/shop/internal/platform/contract"
)

func BenchmarkTransport(b *testing.B) {
	order := `{"id":"0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b","status":"pending_payment","items":[{"sku":"A","quantity":1,"unit_price_cents":100}],"total_cents":100,"version":1,"created_at":"2026-01-01T00:00:00Z","expires_at":"2026-01-01T00:15:00Z"}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Location", "/v1/orders/x")
		w.WriteHeader(201)
		_, _ = io.WriteString(w, order)
	}))
	defer srv.Close()
	spec, err := contract.Load()
	if err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		rt   http.RoundTripper
	}{{"plain", http.DefaultTransport}, {"checked", &contract.Transport{Spec: spec, Report: b}}} {
		b.Run(tc.name, func(b *testing.B) {
			c := &http.Client{Transport: tc.rt}
			for b.Loop() {
				req, _ := http.NewRequest("POST", srv.URL+"/v1/orders", strings.NewReader(`{"items":[{"sku":"A","quantity":1}]}`))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Authorization", "Bearer x")
				req.Header.Set("Idempotency-Key", "k")
				res, err := c.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.ReadAll(res.Body)
				res.Body.Close()
			}
		})
	}
}
