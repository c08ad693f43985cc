package payments

import (
	"context"
	"time"

	"github.com/shop-example/shop/internal/orders"
	"github.com/shop-example/shop/internal/platform/jobs"
	"github.com/shop-example/shop/internal/platform/problem"
)

// reconcileBatch is how many payments one reconciler pass looks at.
const reconcileBatch = 100

// jobReconcile names the reconciler in shop_job_last_success_timestamp_seconds,
// as the alerts in deploy/prometheus do.
const jobReconcile = "reconcile_payments"

// Reconcile settles payments that have been processing for longer than
// the reconcile delay: a gateway timeout, a crash between the charge and
// its record, a refund that did not go through. For each, it sends the
// charge again with the same key, so the gateway answers with the charge
// it made (or makes the one it never received), and records the outcome
// as the request would have.
//
// Every replica runs it. The payment lock keeps two reconcilers (or a
// reconciler and a live request) from working on one order at once; if
// the lock is unavailable, the version check on the payment row still
// lets only one of them record an outcome. It returns how many payments
// it settled.
//
// A pass that could list the due payments is the job's success; the
// payments it could not settle are its backlog (shop_payment_reconcile_*).
func (s *Service) Reconcile(ctx context.Context) (int, error) {
	now := s.stamp()
	due, err := s.store.ProcessingSince(ctx, now.Add(-s.reconcileAfter), reconcileBatch)
	if err != nil {
		return 0, err
	}
	s.metrics.JobSucceeded(jobReconcile, now)
	settled, left := 0, 0
	var oldest time.Time // due is longest-waiting first
	for _, p := range due {
		if ctx.Err() != nil {
			return settled, ctx.Err()
		}
		result := s.reconcileOne(ctx, p)
		s.counts.reconciliations.WithLabelValues(result).Inc()
		switch Status(result) {
		case StatusSucceeded, StatusFailed, StatusRefunded:
			settled++
		}
		// Busy is another reconciler's (or the request's) to settle, gone
		// is settled: only an unknown outcome is this pass's backlog.
		if result == outcomeUnknown {
			if left++; left == 1 {
				oldest = p.UpdatedAt
			}
		}
	}
	s.counts.unsettled(left, oldest, now)
	return settled, nil
}

// reconcileOne settles one payment and says how it went: succeeded,
// failed, refunded, rejected, unknown (ask again next pass), busy (someone else is
// on it) or gone (settled meanwhile).
func (s *Service) reconcileOne(ctx context.Context, due Payment) string {
	ctx, cancel := context.WithTimeout(ctx, s.budget)
	defer cancel()
	var result string
	err := s.reconcile.Lock(ctx, "payment:"+due.OrderID, func(ctx context.Context) error {
		p, err := s.store.Get(ctx, due.ID)
		if err != nil {
			return err
		}
		if p.Status != StatusProcessing {
			result = "gone"
			return nil
		}
		p, err = s.charge(ctx, p, orders.Order{}, nil) // the reconciler answers no request
		switch {
		case problem.CodeOf(err) == problem.Invalid:
			result = outcomeRejected // refused by the gateway, and discarded
			return nil
		case p.Status == StatusProcessing:
			return err
		}
		result = string(p.Status)
		return nil
	})
	switch {
	case result != "":
		return result
	case problem.CodeOf(err) == problem.ResourceBusy:
		return "busy"
	default:
		if ctx.Err() == nil {
			s.logger.WarnContext(ctx, "reconcile payment", "payment", due.ID, "err", err)
		}
		return "unknown"
	}
}

// RunReconciler calls Reconcile about every interval until ctx ends.
func (s *Service) RunReconciler(ctx context.Context, interval time.Duration) {
	s.metrics.JobStarted(jobReconcile, s.stamp())
	jobs.Every(ctx, "reconcile payments", interval, func(ctx context.Context) {
		n, err := s.Reconcile(ctx)
		if err != nil && ctx.Err() == nil {
			s.logger.ErrorContext(ctx, "reconcile payments", "err", err)
		}
		if n > 0 {
			s.logger.InfoContext(ctx, "reconciled payments", "count", n)
		}
	})
}
