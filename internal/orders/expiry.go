package orders

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/shop-example/shop/internal/platform/jobs"
	"github.com/shop-example/shop/internal/platform/layers"
	"github.com/shop-example/shop/internal/platform/postgres"
)

// expiryBatch is how many orders one expiry transaction handles.
const expiryBatch = 100

// jobExpire names the expiry job in shop_job_last_success_timestamp_seconds,
// as the alerts in deploy/prometheus do.
const jobExpire = "expire_orders"

// ExpireDue expires every pending order whose time is up and returns how
// many it expired. Every replica runs it:
//
//	1 lock          none: FOR UPDATE SKIP LOCKED splits the due orders
//	                between concurrent runs (sqlDueOrders)
//	2 state         Expire: pending and past its time; an order being
//	                paid waits for its payment
//	3 version       Store.Update's write: a cancel that raced the job
//	                and committed first makes the batch roll back
//	4 constraint    stock_releases_pkey: one release per order
//
// A run that reached the end of the due orders is recorded as the job's
// success (shop_job_last_success_timestamp_seconds): one that failed, or
// whose batch was rolled back, is not, so the stall alert sees orders
// that stay due however the job goes wrong.
func (s *Service) ExpireDue(ctx context.Context) (int, error) {
	total := 0
	for {
		var n int
		err := postgres.InTx(ctx, s.db, func(tx pgx.Tx) error {
			var err error
			n, err = s.orders.ExpireDue(ctx, tx, s.stamp(), expiryBatch, Expire(s.stamp()))
			return err
		})
		switch {
		case errors.Is(err, ErrVersionConflict):
			// A cancel moved one of the batch first: the next run reads it.
			s.expire.Stopped(ctx, layers.Version)
			return total, nil
		case errors.Is(err, ErrAlreadyReleased):
			// Only reachable if a release slipped past the rule: the whole
			// batch rolled back; counted, and tried on the next run.
			s.expire.Stopped(ctx, layers.Constraint)
			return total, nil
		}
		total += n
		if err == nil && n < expiryBatch {
			s.metrics.JobSucceeded(jobExpire, s.now())
		}
		if err != nil || n < expiryBatch {
			return total, err
		}
	}
}

// RunExpiry calls ExpireDue about every interval until ctx ends.
func (s *Service) RunExpiry(ctx context.Context, interval time.Duration) {
	s.metrics.JobStarted(jobExpire, s.now())
	jobs.Every(ctx, "expire orders", interval, func(ctx context.Context) {
		n, err := s.ExpireDue(ctx)
		if err != nil && ctx.Err() == nil {
			s.logger.ErrorContext(ctx, "expire orders", "err", err)
		}
		if n > 0 {
			s.logger.InfoContext(ctx, "expired orders", "count", n)
		}
	})
}
