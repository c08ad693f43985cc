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

// seed loads the demo catalogue (app.Seed) and, with SHOP_DEMO=true, the
// demo user, whose token it prints; it can run on every start.
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
	if !cfg.Demo {
		return nil
	}
	u, token, err := app.SeedDemoUser(ctx, pool, cfg.AdminToken)
	if err != nil {
		return err
	}
	logger.Info("demo user", "id", u.ID, "name", u.Name)
	// On standard output, alone on its line, for `docker compose logs seed`
	// and scripts: SHOP_DEMO_TOKEN=shop_...
	fmt.Printf("SHOP_DEMO_TOKEN=%s\n", token)
	return nil
}
