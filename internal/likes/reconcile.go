package likes

import (
	"context"
	"time"

	"github.com/shop-example/shop/internal/platform/jobs"
)

// tallyBatch is how many posts one reconciliation statement checks.
const tallyBatch = 500

// maxDriftListed bounds the drifted posts a report lists (and the log
// names); the gauges count them all.
const maxDriftListed = 100

// Report is what a reconciliation found.
type Report struct {
	Posts   int     // posts checked
	Drifted int     // posts whose count disagreed with their liked rows
	Drift   int64   // sum over posts of |counter rows - liked rows|
	Listed  []Tally // the first of the drifted posts, up to 100
}

// Agrees reports whether every post's count equalled its liked rows.
func (r Report) Agrees() bool { return r.Drifted == 0 }

// Reconcile checks, for every post, that the sum of its counter rows
// equals the number of its liked rows, and reports the posts where it
// does not in the metrics (shop_like_drifted_posts, shop_like_count_drift)
// and the log. It changes nothing: by construction the two cannot
// disagree (each counter row moves in the statement that flips a like
// row naming it), so a drift is a bug to look at, not a number to paper
// over. Each page of posts is read in one snapshot, so likes committing
// meanwhile never show as drift. Every replica may run it; it only reads.
func (s *Service) Reconcile(ctx context.Context) (Report, error) {
	var r Report
	after := ""
	for {
		page, err := s.store.Tallies(ctx, after, tallyBatch)
		if err != nil {
			s.counts.reconciliations.WithLabelValues("error").Inc()
			return r, err
		}
		for _, t := range page {
			r.Posts++
			if d := t.Drift(); d != 0 {
				r.Drifted++
				r.Drift += max(d, -d)
				if len(r.Listed) < maxDriftListed {
					r.Listed = append(r.Listed, t)
					s.logger.ErrorContext(ctx, "like count drifted from the likes",
						"post", t.PostID, "counted", t.Counted, "liked_rows", t.LikedRows)
				}
			}
		}
		if len(page) < tallyBatch {
			break
		}
		after = page[len(page)-1].PostID
	}
	outcome := "agree"
	if !r.Agrees() {
		outcome = "drift"
	}
	s.counts.reconciliations.WithLabelValues(outcome).Inc()
	s.counts.driftedPosts.Set(float64(r.Drifted))
	s.counts.drift.Set(float64(r.Drift))
	return r, nil
}

// RunReconciler calls Reconcile about every interval until ctx ends.
func (s *Service) RunReconciler(ctx context.Context, interval time.Duration) {
	jobs.Every(ctx, "reconcile likes", interval, func(ctx context.Context) {
		if _, err := s.Reconcile(ctx); err != nil && ctx.Err() == nil {
			s.logger.ErrorContext(ctx, "reconcile like counts", "err", err)
		}
	})
}
