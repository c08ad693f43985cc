// Package mailertest starts the stand-in mail provider for a test, as
// `shop mailer` runs it: a real HTTP server, its journal in the test's
// temporary directory, both closed when the test ends.
package mailertest

import (
	"log/slog"
	"net/http/httptest"
	"testing"

	"github.com/shop-example/shop/harness/mailer"
)

// Start starts a mailer built from opts (a journal in t.TempDir() and a
// silent logger unless opts name their own) and returns it with its base
// URL.
func Start(t testing.TB, opts mailer.Options) (*mailer.Server, string) {
	t.Helper()
	if opts.JournalPath == "" {
		opts.JournalPath = t.TempDir() + "/mailer.jsonl"
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	m, err := mailer.New(opts)
	if err != nil {
		t.Fatalf("mailer.New: %v", err)
	}
	srv := httptest.NewServer(m.Handler())
	t.Cleanup(func() {
		srv.Close()
		if err := m.Close(); err != nil {
			t.Errorf("mailer Close: %v", err)
		}
	})
	return m, srv.URL
}
