package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"

	"github.com/shop-example/shop/internal/app"
	"github.com/shop-example/shop/internal/platform/config"
	"github.com/shop-example/shop/internal/platform/httpx"
	"github.com/shop-example/shop/internal/platform/postgres"
	"github.com/shop-example/shop/internal/platform/redisx"
)

// serve runs one replica until SIGINT or SIGTERM, then stops accepting,
// drains in-flight requests (their locks are released as they finish),
// stops the jobs and closes the pools.
func serve(ctx context.Context, logger *slog.Logger) error {
	cfg, err := config.FromEnv(os.Getenv)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	logger.Info("starting", "config", cfg)
	if cfg.Migrate {
		if err := postgres.MigrateUp(cfg.DatabaseURL); err != nil {
			return err
		}
	}
	pool, err := postgres.Open(ctx, cfg.DatabaseURL, cfg.DBMaxConns)
	if err != nil {
		return err
	}
	defer pool.Close()
	clients := redisx.Clients(cfg.RedisAddrs)
	defer redisx.Close(clients) //nolint:errcheck

	a, err := app.New(cfg, app.Deps{Pool: pool, Redis: clients, Logger: logger})
	if err != nil {
		return err
	}
	defer a.Close()
	jobsCtx, stopJobs := context.WithCancel(context.WithoutCancel(ctx))
	var jobs sync.WaitGroup
	jobs.Go(func() { a.RunJobs(jobsCtx) })
	defer jobs.Wait()
	defer stopJobs()

	logger.Info("listening", "addr", cfg.HTTPAddr)
	err = httpx.Serve(ctx, nil, cfg.HTTPAddr, a.Echo, cfg.ShutdownDrain)
	logger.Info("stopped", "err", err)
	return err
}

func migrateCmd(direction string, logger *slog.Logger) error {
	cfg, err := config.FromEnv(os.Getenv)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	m, err := postgres.NewMigrator(cfg.DatabaseURL)
	if err != nil {
		return err
	}
	defer m.Close() //nolint:errcheck
	switch direction {
	case "up":
		err = m.Up()
	case "down":
		err = m.Down()
	case "version":
	default:
		return errUsage
	}
	if err != nil {
		return err
	}
	version, dirty, err := m.Version()
	if err != nil {
		return fmt.Errorf("read version: %w", err)
	}
	logger.Info("schema", "version", version, "dirty", dirty)
	fmt.Printf("version %d dirty=%t\n", version, dirty)
	return nil
}
