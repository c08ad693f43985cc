package lab

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// A lab schema (shop_lab_live, the sandboxes') would otherwise grow by
// every run's users, products, orders and events for as long as the demo
// server runs. It keeps a window instead: before a run starts, if the
// schema holds more than keepUsers users and no run on any replica is
// using it, its tables are emptied. Every run holds the schema, in shared
// mode, for its whole length; the sweep takes it in exclusive mode, and
// only if it can at once, so it never empties tables under a run that is
// setting up or checking its invariant.
const keepUsers = 1000

// kept are the tables a sweep leaves: the migrations' version, and how
// far the copy's relay has published (its offsets row: new events have
// newer transaction ids, so it stays right over an emptied outbox).
var kept = []string{"schema_migrations", "watermill_offsets_outbox"}

// The schema's run lock, keyed by the schema's name, and the sweep.
const (
	sqlHoldShared   = `SELECT pg_advisory_lock_shared(hashtextextended('shop-lab-run:' || current_schema(), 0))`
	sqlTryAlone     = `SELECT pg_try_advisory_lock(hashtextextended('shop-lab-run:' || current_schema(), 0))`
	sqlReleaseAlone = `SELECT pg_advisory_unlock(hashtextextended('shop-lab-run:' || current_schema(), 0))`
	sqlUsers        = `SELECT count(*) FROM users`
	sqlTables       = `SELECT format('%I.%I', schemaname, tablename) FROM pg_tables
		WHERE schemaname = current_schema() AND tablename <> ALL ($1) ORDER BY tablename`
)

// holdSchema holds pool's schema for a run, until release is called. The
// lock is a session's, on a connection of its own: the run's requests keep
// every connection of the pool.
func holdSchema(ctx context.Context, pool *pgxpool.Pool) (release func(), err error) {
	conn, err := pgx.ConnectConfig(ctx, pool.Config().ConnConfig.Copy())
	if err != nil {
		return nil, fmt.Errorf("hold the lab's schema: %w", err)
	}
	if _, err := conn.Exec(ctx, sqlHoldShared); err != nil {
		_ = conn.Close(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("hold the lab's schema: %w", err)
	}
	// Closing the session ends its advisory locks.
	return func() { _ = conn.Close(context.WithoutCancel(ctx)) }, nil
}

// sweep empties pool's schema's tables (but kept) when they hold more
// than keep users and no run holds the schema. It reports whether it did.
func sweep(ctx context.Context, pool *pgxpool.Pool, keep int) (bool, error) {
	var users int
	if err := pool.QueryRow(ctx, sqlUsers).Scan(&users); err != nil {
		return false, fmt.Errorf("sweep: %w", err)
	}
	if users <= keep {
		return false, nil
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return false, fmt.Errorf("sweep: %w", err)
	}
	defer conn.Release()
	var alone bool
	if err := conn.QueryRow(ctx, sqlTryAlone).Scan(&alone); err != nil || !alone {
		return false, err
	}
	defer func() {
		if _, err := conn.Exec(context.WithoutCancel(ctx), sqlReleaseAlone); err != nil {
			_ = conn.Conn().Close(context.WithoutCancel(ctx))
		}
	}()
	rows, err := conn.Query(ctx, sqlTables, kept)
	if err != nil {
		return false, fmt.Errorf("sweep: %w", err)
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(tables) == 0 {
		return false, err
	}
	if _, err := conn.Exec(ctx, "TRUNCATE "+strings.Join(tables, ", ")); err != nil {
		return false, fmt.Errorf("sweep: %w", err)
	}
	return true, nil
}
