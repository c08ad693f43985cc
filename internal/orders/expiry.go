package orders

import (
	"context"
	"errors"
	"time"

	"github.com/shop-example/shop/internal/platform/jobs"
	"github.com/shop-example/shop/internal/platform/layers"
)

// expiryBatch is how many orders one expiry transaction handles.
const expiryBatch = 100

// jobExpire names the expiry job in shop_job_last_success_timestamp_seconds,
// as the alerts in deploy/prometheus do.
const jobExpire = "expire_orders"

// ExpireDue expires every pending order whose time is up and returns how
// many it expired. Every replica runs it; FOR UPDATE SKIP LOCKED splits the
// due orders between concurrent runs, the version bump makes a racing
// cancel lose cleanly, and stock_releases admits one release per order.
// An order being paid is not pending, and waits for its payment.
//
// A run that reached the end of the due orders is recorded as the job's
// success (shop_job_last_success_timestamp_seconds): one that failed, or
// whose batch was rolled back, is not, so the stall alert sees orders
// that stay due however the job goes wrong.
func (s *Service) ExpireDue(ctx context.Context) (int, error) {
	total := 0
	for {
		n, err := s.store.ExpireDue(ctx, s.layers, s.now().UTC().Truncate(time.Microsecond), expiryBatch)
		if errors.Is(err, ErrAlreadyReleased) {
			// Only reachable if a release slipped past the status check:
			// the whole batch rolled back; count it and try the next run.
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
