package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/shop-example/shop/internal/platform/config"
)

// provider runs a stand-in provider, `shop gateway` (standin.Gateway) or
// `shop mailer` (standin.Mailer), on the settings from the environment
// until SIGINT or SIGTERM.
func provider(ctx context.Context, logger *slog.Logger, serve func(context.Context, config.Config, *slog.Logger) error) error {
	cfg, err := config.FromEnv(os.Getenv)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	return serve(ctx, cfg, logger)
}
