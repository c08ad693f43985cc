package app

import (
	"context"
	"log/slog"

	"github.com/shop-example/shop/internal/gateway"
	"github.com/shop-example/shop/internal/platform/config"
	"github.com/shop-example/shop/internal/platform/httpx"
)

// ServeGateway runs `shop gateway`, the stand-in card processor, on
// cfg.GatewayAddr until ctx ends, then drains in-flight requests and
// closes its journal.
func ServeGateway(ctx context.Context, cfg config.Config, logger *slog.Logger) error {
	srv, err := gateway.New(gateway.Options{
		JournalPath: cfg.GatewayJournal,
		SlowDelay:   cfg.GatewaySlowDelay,
		Logger:      logger,
	})
	if err != nil {
		return err
	}
	defer srv.Close() //nolint:errcheck // every record was fsynced when it was answered

	logger.Info("gateway listening", "addr", cfg.GatewayAddr,
		"journal", cfg.GatewayJournal, "slow_delay", cfg.GatewaySlowDelay.String())
	err = httpx.Serve(ctx, nil, cfg.GatewayAddr, srv.Handler(), cfg.ShutdownDrain)
	logger.Info("gateway stopped", "err", err)
	return err
}
