//go:build e2e

package e2e

import (
	"context"
	"net/http"
	"strings"
	"testing"
)

// What the balancer answers itself, and what the API port no longer
// serves: a body over the service's 64 KiB is refused by nginx with a
// problem document like the service's; /metrics is not on the API port;
// the shop's page is at /; /readyz reports its checks.
func (sc *scenario) balancerEdge(ctx context.Context, t *testing.T) {
	resp, err := sc.c.once(ctx, request{method: http.MethodPost, path: "/v1/users",
		body: map[string]string{"name": strings.Repeat("x", 64<<10)}, offContract: "body over 64 KiB"})
	if err != nil {
		t.Fatal(err)
	}
	if resp.status != http.StatusRequestEntityTooLarge || resp.problem().Code != "payload_too_large" ||
		resp.header.Get("Content-Type") != "application/problem+json" || resp.header.Get("X-Content-Type-Options") != "nosniff" {
		t.Errorf("POST over 64 KiB: %s (%s), want nginx's 413 payload_too_large problem document with nosniff",
			resp, resp.header.Get("Content-Type"))
	}

	resp, err = sc.c.once(ctx, request{method: http.MethodGet, path: "/metrics", offContract: "no /metrics on the API's port"})
	if err != nil {
		t.Fatal(err)
	}
	if resp.status != http.StatusNotFound || resp.problem().Code != "not_found" {
		t.Errorf("GET /metrics through the balancer: %s, want 404 not_found: the metrics have a port of their own", resp)
	}

	// The pages, from whichever replica the balancer picks.
	resp, err = sc.c.once(ctx, request{method: http.MethodGet, path: "/"})
	if err != nil {
		t.Fatal(err)
	}
	if resp.status != http.StatusOK || !strings.HasPrefix(resp.header.Get("Content-Type"), "text/html") ||
		!strings.Contains(string(resp.body), "<html") || resp.header.Get("X-Served-By") == "" {
		t.Errorf("GET / through the balancer: %s (%s, served by %q), want the shop's page",
			resp, resp.header.Get("Content-Type"), resp.header.Get("X-Served-By"))
	}

	ready := expect[struct {
		Ready  bool `json:"ready"`
		Checks map[string]struct {
			Status string `json:"status"`
		} `json:"checks"`
	}](ctx, t, sc.c, request{method: http.MethodGet, path: "/readyz"}, http.StatusOK)
	if !ready.Ready || ready.Checks["postgres"].Status != "ok" || ready.Checks["lock_quorum"].Status != "ok" {
		t.Errorf("/readyz: %+v, want ready with postgres and lock_quorum ok", ready)
	}
}
