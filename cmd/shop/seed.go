package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/shop-example/shop/internal/app"
	"github.com/shop-example/shop/internal/platform/config"
	"github.com/shop-example/shop/internal/platform/postgres"
)

// seed loads the demo catalogue (app.Seed); it can run on every start.
func seed(ctx context.Context, logger *slog.Logger) error {
	cfg, err := config.FromEnv(os.Getenv)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	pool, err := postgres.Open(ctx, cfg.DatabaseURL, 2)
	if err != nil {
		return err
	}
	defer pool.Close()
	created, err := app.Seed(ctx, pool)
	if err != nil {
		return err
	}
	logger.Info("seeded", "created", created, "catalogue", len(app.DemoCatalogue))
	return nil
}
