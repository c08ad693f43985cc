package seats

import (
	"context"
	"errors"
	"time"

	"github.com/shop-example/shop/internal/platform/jobs"
)

// expiryBatch is how many holds one expiry statement handles.
const expiryBatch = 100

// jobExpire names the expiry job in shop_job_last_success_timestamp_seconds.
const jobExpire = "expire_holds"

// ExpireDue expires every active hold whose time is up, frees its seats,
// and returns how many it expired. Every replica runs it; each batch is
// one statement (Store.ExpireDue), which PostgreSQL runs as its own
// transaction:
//
//	1 lock          none: FOR UPDATE SKIP LOCKED splits the due holds
//	                between concurrent runs, and skips a hold a confirm
//	                or release is moving (sqlExpireDue)
//	2 state         status = 'active' and past its time, asked again in
//	                the write
//	3 version       the version bump: a confirm racing the job either
//	                moved the hold first (the job no longer finds it
//	                active) or finds it expired when it re-reads its own
//	                row (hold_expired), never both
//	4 constraint    holdings_within_caps: the holdings it counts down
//	                stay within 0 and the caps
//
// A run that reached the end of the due holds is recorded as the job's
// success.
func (s *Service) ExpireDue(ctx context.Context) (int, error) {
	total := 0
	for {
		n, err := s.store.ExpireDue(ctx, s.stamp(), expiryBatch)
		total += n
		s.counts.expired.Add(float64(n))
		if errors.Is(err, ErrDeadlock) {
			// Another replica's batch counted down a holding of the same
			// user and event in the other order; this batch rolled back,
			// and the next run takes it.
			return total, nil
		}
		if err != nil {
			return total, err
		}
		if n < expiryBatch {
			s.metrics.JobSucceeded(jobExpire, s.now())
			return total, nil
		}
	}
}

// RunExpiry calls ExpireDue about every interval until ctx ends.
func (s *Service) RunExpiry(ctx context.Context, interval time.Duration) {
	s.metrics.JobStarted(jobExpire, s.now())
	jobs.Every(ctx, "expire holds", interval, func(ctx context.Context) {
		n, err := s.ExpireDue(ctx)
		if err != nil && ctx.Err() == nil {
			s.logger.ErrorContext(ctx, "expire holds", "err", err)
		}
		if n > 0 {
			s.logger.InfoContext(ctx, "expired holds", "count", n)
		}
	})
}
