package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/shop-example/shop/internal/app"
	"github.com/shop-example/shop/internal/platform/config"
)

// gateway runs the stand-in card processor until SIGINT or SIGTERM.
func gateway(ctx context.Context, logger *slog.Logger) error {
	cfg, err := config.FromEnv(os.Getenv)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	return app.ServeGateway(ctx, cfg, logger)
}
