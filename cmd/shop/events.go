package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

	"github.com/shop-example/shop/internal/platform/config"
	"github.com/shop-example/shop/internal/platform/outbox"
	"github.com/shop-example/shop/internal/platform/postgres"
	"github.com/shop-example/shop/internal/platform/redisx"
)

// eventsCmd is `shop events failed` and `shop events replay ID…|-all`:
// the events a consumer gave up on for good (outbox.Failures), and their
// replay to their streams (outbox.Relay.Replay), with the settings of
// `shop serve`.
func eventsCmd(ctx context.Context, args []string, out io.Writer) error {
	if len(args) == 0 || (args[0] != "failed" && args[0] != "replay") ||
		(args[0] == "failed" && len(args) != 1) || (args[0] == "replay" && len(args) < 2) {
		return errUsage
	}
	cfg, err := config.FromEnv(os.Getenv)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	pool, err := postgres.Open(ctx, cfg.DatabaseURL, 2)
	if err != nil {
		return err
	}
	defer pool.Close()
	if args[0] == "failed" {
		failures, err := outbox.Failures(ctx, pool)
		if err != nil {
			return err
		}
		return printFailures(out, failures)
	}

	ids := args[1:]
	if len(ids) == 1 && ids[0] == "-all" {
		ids = nil
	}
	addr := cfg.Events.Redis
	if addr == "" {
		addr = cfg.RedisAddrs[0] // as serve: the lock quorum's first node
	}
	rdb := redisx.ClientWithin(addr, 3*time.Second)
	defer rdb.Close()
	relay, err := outbox.NewRelay(pool, rdb, outbox.Options{Prefix: cfg.Events.Prefix})
	if err != nil {
		return err
	}
	replayed, err := relay.Replay(ctx, ids...)
	if perr := printFailures(out, replayed); perr != nil && err == nil {
		err = perr
	}
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(out, "replayed %d; each stays listed until its consumer has acted on it\n", len(replayed))
	return err
}

// printFailures writes one line per failure, the oldest first.
func printFailures(out io.Writer, failures []outbox.Failure) error {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "FIRST FAILED\tCONSUMER\tEVENT\tID\tSUBJECT\tATTEMPTS\tLAST ERROR")
	for _, f := range failures {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%d\t%s\n", f.FirstAt.UTC().Format(time.RFC3339), f.Consumer,
			f.Event.Name, f.Event.ID, f.Event.Subject, f.Attempts, f.Error)
	}
	return w.Flush()
}
