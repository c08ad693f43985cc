package seats

import (
	"context"
	"time"

	"github.com/shop-example/shop/internal/platform/jobs"
)

// expiryBatch is how many holds one expiry statement handles.
const expiryBatch = 100

// jobExpire names the expiry job in shop_job_last_success_timestamp_seconds.
const jobExpire = "expire_holds"

// ExpireDue expires every active hold whose time is up, frees its seats,
// and returns how many it expired. Every replica runs it; each hold is
// expired once (Store.ExpireDue says how), and a confirm racing it either
// moved the hold first (the job skips or no longer finds it active) or
// finds it expired when it re-reads its own row (hold_expired).
func (s *Service) ExpireDue(ctx context.Context) (int, error) {
	total := 0
	for {
		n, err := s.store.ExpireDue(ctx, s.stamp(), expiryBatch)
		total += n
		if err != nil {
			return total, err
		}
		if n < expiryBatch {
			s.counts.expired.Add(float64(total))
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
