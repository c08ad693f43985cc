// Command shop is the whole service in one binary:
//
//	shop serve                        run the HTTP API and the background jobs
//	shop migrate up|down|version      manage the database schema
//	shop seed                         load the demo catalogue
//	shop events failed                list the events a consumer gave up on for good (see docs/OPERATIONS.md)
//	shop events replay ID...|-all     send them again to their streams
//	shop bench orders|payments|likes|seats  measure order creation, payment, likes or seat holds (see docs/BENCHMARKS.md)
//	shop bench strategies                   every way to guard each flow, side by side (see docs/STRATEGIES.md)
//	shop bench outside                      the four flows from a client outside two replicas (see docs/BENCHMARKS.md)
//	shop bench events                       the outbox's relay and consumers: drains and the lag at a payment rate (see docs/BENCHMARKS.md)
//	shop bench history -doc FILE            the goals of the last strategies runs, from the file's git history
//	shop load [flags] SCRIPT.js       run a bundled k6 script without k6 (see README.md, "Load testing")
//	shop gateway                      run the stand-in card processor (its own port)
//	shop mailer                       run the stand-in mail provider (its own port)
//	shop health <url>                 exit 0 if the URL answers 200 (container healthcheck)
//
// Settings come from the environment (SHOP_*, see README.md).
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/shop-example/shop/harness/bench"
	"github.com/shop-example/shop/harness/load"
	"github.com/shop-example/shop/harness/standin"
)

const usage = `usage: shop <command>

commands:
  serve                              run the HTTP API and background jobs
  migrate up|down|version            manage the database schema
  seed                               load the demo catalogue (safe to run again)
  events failed                      list the events a consumer gave up on for good (a mail the provider refused)
  events replay ID...|-all           send those events again to their streams, once the cause is fixed
  bench orders|payments|likes|seats  benchmark order creation, payment, likes or seat holds against a baseline
  bench strategies                   every way to guard each flow, side by side, with an anomaly audit
  bench outside                      the four flows over HTTP against two replicas, each its own process, audited
  bench events                       the outbox's relay and consumers: events/s drained, and the lag at a payment rate, checked once each
  bench history -doc FILE            the goals of the last strategies runs, read from FILE's git history (measures nothing)
  load [flags] SCRIPT.js             run a k6 script of loadtest/k6 without k6 (shop load --help)
  gateway                            run the stand-in card processor (payment gateway)
  mailer                             run the stand-in mail provider (its own port)
  health <url>                       exit 0 if the URL answers 200 (container healthcheck)
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	logger := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	err := run(ctx, os.Args[1:], logger)
	stop()
	if errors.Is(err, errUsage) {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	// shop load exits with k6's codes and has said why already.
	var exit *load.ExitError
	if errors.As(err, &exit) {
		os.Exit(exit.Code)
	}
	if err != nil {
		logger.Error("shop", "err", err)
		os.Exit(1)
	}
}

var errUsage = errors.New("usage")

func run(ctx context.Context, args []string, logger *slog.Logger) error {
	if len(args) == 0 {
		return errUsage
	}
	switch args[0] {
	case "serve":
		return serve(ctx, logger)
	case "migrate":
		if len(args) != 2 {
			return errUsage
		}
		return migrateCmd(args[1], logger)
	case "seed":
		return seed(ctx, logger)
	case "events":
		return eventsCmd(ctx, args[1:], os.Stdout)
	case "bench":
		err := bench.Run(ctx, args[1:], logger)
		if errors.Is(err, bench.ErrUsage) {
			return errUsage
		}
		return err
	case "load":
		return load.Run(ctx, args[1:], os.Stdout, os.Stderr)
	case "gateway":
		return provider(ctx, logger, standin.Gateway)
	case "mailer":
		return provider(ctx, logger, standin.Mailer)
	case "health":
		return health(ctx, args[1:])
	case "help", "-h", "--help":
		fmt.Print(usage)
		return nil
	}
	return errUsage
}
