package standin

import (
	"context"
	"log/slog"

	"github.com/shop-example/shop/harness/gateway"
	"github.com/shop-example/shop/internal/platform/config"
)

// Gateway runs `shop gateway`, the stand-in card processor, on
// cfg.GatewayAddr until ctx ends, then drains in-flight requests and
// closes its journal.
func Gateway(ctx context.Context, cfg config.Config, logger *slog.Logger) error {
	tp, stop, err := providerTracing(cfg, "shop-gateway")
	if err != nil {
		return err
	}
	defer stop()
	srv, err := gateway.New(gateway.Options{
		JournalPath:   cfg.GatewayJournal,
		SlowDelay:     cfg.GatewaySlowDelay,
		NoRefundLimit: cfg.GatewayNoRefundLimit,
		Logger:        logger,
		Tracing:       tp,
	})
	if err != nil {
		return err
	}
	return serveProvider(ctx, logger, "gateway", cfg.GatewayAddr, cfg.ShutdownDrain, srv,
		"journal", cfg.GatewayJournal, "slow_delay", cfg.GatewaySlowDelay.String(), "refund_limit", !cfg.GatewayNoRefundLimit)
}
