package idempotency

import (
	"context"
	"fmt"
	"time"
)

// sweepBatch bounds the rows one sweeping transaction deletes, so a large
// backlog never holds thousands of row locks or one long transaction.
const sweepBatch = 1000

// sqlSweep deletes one batch of keys created before $1. FOR UPDATE SKIP
// LOCKED lets sweepers in every replica run at once without waiting for or
// deadlocking on each other, and skips a key a request is claiming right
// now. A claim whose lease is still running is never swept, however old:
// its owner would find its key gone and its answer unstored.
const sqlSweep = `
DELETE FROM idempotency_keys
 WHERE (principal, key) IN (
       SELECT principal, key
         FROM idempotency_keys
        WHERE created_at < $1
          AND (status_code IS NOT NULL OR locked_until < $2)
        LIMIT $3
          FOR UPDATE SKIP LOCKED)`

// Sweep deletes the keys created before now-olderThan, in bounded batches,
// and returns how many it deleted. It is safe to run in every replica at
// once: each batch skips the rows another sweeper holds. olderThan is not
// held to the retention minimum, so tests can sweep young keys; RunSweeper
// uses Options.Retention.
func (s *Store) Sweep(ctx context.Context, olderThan time.Duration) (int64, error) {
	if olderThan <= 0 {
		return 0, fmt.Errorf("sweep idempotency keys: olderThan must be positive, not %s", olderThan)
	}
	now := s.now().UTC()
	cutoff := now.Add(-olderThan)
	var total int64
	for {
		// One statement, one transaction; on the async-commit pool a
		// delete lost in a crash is only a key swept on the next round.
		tag, err := s.db.Exec(ctx, sqlSweep, cutoff, now, sweepBatch)
		if err != nil {
			return total, fmt.Errorf("sweep idempotency keys: %w", err)
		}
		n := tag.RowsAffected()
		total += n
		s.counters.sweptKeys(n)
		if n < sweepBatch {
			// Done, or the rest is held by another sweeper, which will
			// delete it.
			return total, nil
		}
		if err := ctx.Err(); err != nil {
			return total, fmt.Errorf("sweep idempotency keys: %w", err)
		}
	}
}

// RunSweeper sweeps at once and then every interval until ctx ends,
// deleting the keys older than Options.Retention. Errors are logged; the
// next round tries again.
func (s *Store) RunSweeper(ctx context.Context, interval time.Duration) {
	if interval <= 0 {
		interval = time.Hour
	}
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		n, err := s.Sweep(ctx, s.retention)
		switch {
		case err != nil && ctx.Err() == nil:
			s.logger.ErrorContext(ctx, "sweep idempotency keys", "err", err)
		case n > 0:
			s.logger.InfoContext(ctx, "swept idempotency keys", "deleted", n, "retention", s.retention)
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}
