package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/shop-example/shop/internal/app"
	"github.com/shop-example/shop/internal/platform/config"
)

// mailer runs the stand-in mail provider until SIGINT or SIGTERM.
func mailer(ctx context.Context, logger *slog.Logger) error {
	cfg, err := config.FromEnv(os.Getenv)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	return app.ServeMailer(ctx, cfg, logger)
}
