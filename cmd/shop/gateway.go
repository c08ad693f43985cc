package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	gw "github.com/shop-example/shop/internal/gateway"
	"github.com/shop-example/shop/internal/platform/config"
	"github.com/shop-example/shop/internal/platform/httpx"
)

// gateway runs the stand-in card processor until SIGINT or SIGTERM, then
// drains in-flight requests and closes its journal.
func gateway(ctx context.Context, logger *slog.Logger) error {
	cfg, err := config.FromEnv(os.Getenv)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	srv, err := gw.New(gw.Options{
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
