package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"

	"github.com/shop-example/shop/harness/lab"
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

	deps := app.Deps{Pool: pool, Redis: clients, Logger: logger}
	a, err := app.New(cfg, deps)
	if err != nil {
		return err
	}
	defer a.Close()
	// A demo server's race lab attaches itself to the shop (harness/lab);
	// its copies of the service stop before the shop closes.
	if cfg.Demo {
		l, err := lab.Attach(a, cfg, deps)
		if err != nil {
			return err
		}
		defer l.Close()
	}
	jobsCtx, stopJobs := context.WithCancel(context.WithoutCancel(ctx))
	var jobs sync.WaitGroup
	jobs.Go(func() { a.RunJobs(jobsCtx) })
	defer jobs.Wait()
	defer stopJobs()

	logger.Info("listening", "addr", cfg.HTTPAddr, "metrics_addr", cfg.MetricsAddr)
	err = serveAPIAndMetrics(ctx, cfg, a)
	logger.Info("stopped", "err", err)
	return err
}

// serveAPIAndMetrics runs the API and the metrics, each on its own port,
// until ctx ends; then both stop accepting and drain. Both ports are taken
// before either serves, so a port that is in use stops the start, and a
// server that fails stops the other.
func serveAPIAndMetrics(ctx context.Context, cfg config.Config, a *app.App) error {
	apiLn, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", cfg.HTTPAddr, err)
	}
	metricsLn, err := net.Listen("tcp", cfg.MetricsAddr)
	if err != nil {
		apiLn.Close() //nolint:errcheck // the listen error is the one to report
		return fmt.Errorf("listen for metrics %s: %w", cfg.MetricsAddr, err)
	}
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	var (
		wg                 sync.WaitGroup
		apiErr, metricsErr error
	)
	wg.Go(func() {
		defer stop()
		apiErr = httpx.Serve(ctx, apiLn, cfg.HTTPAddr, a.Echo, cfg.ShutdownDrain)
	})
	wg.Go(func() {
		defer stop()
		if err := httpx.Serve(ctx, metricsLn, cfg.MetricsAddr, a.MetricsHandler(), cfg.ShutdownDrain); err != nil {
			metricsErr = fmt.Errorf("metrics: %w", err)
		}
	})
	wg.Wait()
	return errors.Join(apiErr, metricsErr)
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
