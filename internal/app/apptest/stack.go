package apptest

import (
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync/atomic"
	"testing"
)

// Stack is replicas of the service behind a balancer; everything stops
// when the test ends.
type Stack struct {
	BaseURL    string   // the balancer
	GatewayURL string   // the payment gateway, for its audit
	Replicas   []string // each replica's own URL
	Env        *Env     // the replicas, the gateway and the database behind them
}

// Start starts replicas of the service (New) behind a balancer. vars
// override the service's environment; the rate limits are off unless vars
// turn them on (load scripts register many users from one address).
func Start(t testing.TB, replicas int, vars map[string]string) *Stack {
	t.Helper()
	e := New(t, replicas, vars)
	s := &Stack{GatewayURL: e.Cfg.GatewayURL, Env: e}
	var backends []*url.URL
	for _, r := range e.Replicas {
		u, err := url.Parse(r.URL)
		if err != nil {
			t.Fatalf("replica URL: %v", err)
		}
		s.Replicas = append(s.Replicas, r.URL)
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
