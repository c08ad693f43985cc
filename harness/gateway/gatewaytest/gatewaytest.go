// Package gatewaytest starts the stand-in card processor for a test, as
// `shop gateway` runs it: a real HTTP server, its journal in the test's
// temporary directory, both closed when the test ends.
package gatewaytest

import (
	"log/slog"
	"net/http/httptest"
	"testing"

	"github.com/shop-example/shop/harness/gateway"
)

// Start starts a gateway built from opts (a journal in t.TempDir() and a
// silent logger unless opts name their own) and returns it with its base
// URL.
func Start(t testing.TB, opts gateway.Options) (*gateway.Server, string) {
	t.Helper()
	if opts.JournalPath == "" {
		opts.JournalPath = t.TempDir() + "/gateway.jsonl"
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	gw, err := gateway.New(opts)
	if err != nil {
		t.Fatalf("gateway.New: %v", err)
	}
	srv := httptest.NewServer(gw.Handler())
	t.Cleanup(func() {
		srv.Close()
		if err := gw.Close(); err != nil {
			t.Errorf("gateway Close: %v", err)
		}
	})
	return gw, srv.URL
}
