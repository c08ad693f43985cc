package main

import (
	"context"
	"log/slog"
)

func bench(ctx context.Context, args []string, logger *slog.Logger) error {
	return errUsage
}
