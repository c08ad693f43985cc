// Package standin runs the stand-ins of the shop's outside providers as
// processes of their own: `shop gateway`, the card processor
// (harness/gateway), and `shop mailer`, the mail provider
// (harness/mailer). The shop reaches both only over HTTP, as it would
// reach the real ones.
package standin

import (
	"context"
	"log/slog"
	"net/http"
	"os"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/shop-example/shop/internal/platform/config"
	"github.com/shop-example/shop/internal/platform/httpx"
	"github.com/shop-example/shop/internal/platform/tracing"
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

// providerTracing is a provider's tracer provider, as the standard
// variables ask (nil when off), and its shutdown. Its spans name their
// process as a replica's do: SHOP_REPLICA_NAME, else the host's name.
func providerTracing(cfg config.Config, service string) (trace.TracerProvider, func(), error) {
	t, err := tracing.New(context.Background(), tracing.Config{Settings: cfg.Tracing, Service: service, Instance: instanceName(cfg.ReplicaName)})
	if err != nil {
		return nil, nil, err
	}
	stop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), tracing.FlushTimeout)
		defer cancel()
		_ = t.Shutdown(ctx)
	}
	if !t.On() {
		return nil, stop, nil
	}
	return t.Provider(), stop, nil
}

// instanceName is what a provider's spans call its process:
// SHOP_REPLICA_NAME, else the host's name.
func instanceName(configured string) string {
	if configured != "" {
		return configured
	}
	if h, err := os.Hostname(); err == nil {
		return h
	}
	return "unknown"
}
