package app

import (
	"context"
	"log/slog"

	"github.com/shop-example/shop/internal/gateway"
	"github.com/shop-example/shop/internal/platform/config"
)

// ServeGateway runs `shop gateway`, the stand-in card processor, on
// cfg.GatewayAddr until ctx ends, then drains in-flight requests and
// closes its journal.
func ServeGateway(ctx context.Context, cfg config.Config, logger *slog.Logger) error {
	tp, stop, err := providerTracing(cfg, "shop-gateway")
	if err != nil {
		return err
	}
	defer stop()
	srv, err := gateway.New(gateway.Options{
		JournalPath: cfg.GatewayJournal,
		SlowDelay:   cfg.GatewaySlowDelay,
		Logger:      logger,
		Tracing:     tp,
	})
	if err != nil {
		return err
	}
	return serveProvider(ctx, logger, "gateway", cfg.GatewayAddr, cfg.ShutdownDrain, srv,
		"journal", cfg.GatewayJournal, "slow_delay", cfg.GatewaySlowDelay.String())
}
