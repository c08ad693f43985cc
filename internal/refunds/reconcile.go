package refunds

import (
	"context"
	"errors"
	"time"

	"github.com/shop-example/shop/internal/payments"
	"github.com/shop-example/shop/internal/platform/jobs"
)

// reconcileBatch is how many refunds one reconciler pass looks at.
const reconcileBatch = 100

// jobReconcile names the reconciler in shop_job_last_success_timestamp_seconds.
const jobReconcile = "reconcile_refunds"

// Reconcile settles refunds that have been processing for longer than the
// reconcile delay: a processor that did not answer, a crash between the
// refund and its record, an outcome that could not be recorded in time.
// For each, it sends the refund again with the same key, the refund's
// id, so the processor answers with the refund it made (or makes the one
// it never received): never a second refund. Then it records the outcome
// as the request would have.
//
// Every replica runs it, with no lock: the refund's own row is read
// before the processor is asked anything, and its version-checked write
// lets one settler record an outcome when two reconcile it at once (or a
// reconciler and a late request). It returns how many refunds it settled.
func (s *Service) Reconcile(ctx context.Context) (int, error) {
	now := s.stamp()
	due, err := s.store.ProcessingSince(ctx, now.Add(-s.reconcileAfter), reconcileBatch)
	if err != nil {
		return 0, err
	}
	s.metrics.JobSucceeded(jobReconcile, now)
	settled := 0
	for _, r := range due {
		if ctx.Err() != nil {
			return settled, ctx.Err()
		}
		result := s.reconcileOne(ctx, r)
		s.counts.reconciliations.WithLabelValues(result).Inc()
		if Status(result) == StatusSucceeded || Status(result) == StatusFailed {
			settled++
		}
	}
	return settled, nil
}

// reconcileOne settles one refund and says how it went: succeeded,
// failed, unknown (ask again next pass) or gone (settled meanwhile).
func (s *Service) reconcileOne(ctx context.Context, due Refund) string {
	ctx, cancel := context.WithTimeout(ctx, s.budget)
	defer cancel()
	// The refund's own row first: one another settler recorded since the
	// list was read is left alone, and the processor is not asked.
	r, err := s.store.Get(ctx, due.ID)
	if err != nil {
		s.logger.WarnContext(ctx, "reconcile refund", "refund", due.ID, "err", err)
		return resultUnknown
	}
	if r.Status != StatusProcessing {
		return "gone"
	}
	p, err := s.payments.Captured(ctx, r.OrderID)
	if err != nil && !errors.Is(err, payments.ErrNotFound) {
		s.logger.WarnContext(ctx, "reconcile refund", "refund", r.ID, "err", err)
		return resultUnknown
	}
	known, err := s.standing(ctx, r.OrderID, p.ChargeID)
	if err != nil {
		s.logger.WarnContext(ctx, "reconcile refund", "refund", r.ID, "err", err)
		return resultUnknown
	}
	out, err := s.give(ctx, r, known, nil) // the reconciler answers no request
	if out.Status == StatusProcessing || out.ID == "" {
		if ctx.Err() == nil && err != nil {
			s.logger.WarnContext(ctx, "reconcile refund", "refund", r.ID, "err", err)
		}
		return resultUnknown
	}
	return string(out.Status)
}

// RunReconciler calls Reconcile about every interval until ctx ends.
func (s *Service) RunReconciler(ctx context.Context, interval time.Duration) {
	s.metrics.JobStarted(jobReconcile, s.stamp())
	jobs.Every(ctx, "reconcile refunds", interval, func(ctx context.Context) {
		n, err := s.Reconcile(ctx)
		if err != nil && ctx.Err() == nil {
			s.logger.ErrorContext(ctx, "reconcile refunds", "err", err)
		}
		if n > 0 {
			s.logger.InfoContext(ctx, "reconciled refunds", "count", n)
		}
	})
}
