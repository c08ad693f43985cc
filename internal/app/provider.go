package app

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/shop-example/shop/internal/platform/httpx"
)

// provider is a stand-in provider's server (gateway.Server, mailer.Server):
// an HTTP API over a journal.
type provider interface {
	Handler() http.Handler
	Close() error
}

// serveProvider runs srv's API on addr until ctx ends, then drains
// in-flight requests for up to drain and closes srv's journal. attrs are
// the settings the "listening" line reports.
func serveProvider(ctx context.Context, logger *slog.Logger, name, addr string, drain time.Duration, srv provider, attrs ...any) error {
	defer srv.Close() //nolint:errcheck // every record was fsynced when it was answered

	logger.Info(name+" listening", append([]any{"addr", addr}, attrs...)...)
	err := httpx.Serve(ctx, nil, addr, srv.Handler(), drain)
	logger.Info(name+" stopped", "err", err)
	return err
}
