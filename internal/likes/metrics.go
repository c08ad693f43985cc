package likes

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shop-example/shop/internal/platform/metrics"
)

// counters are the like metrics: the likes written, and what the last
// reconciliation found.
type counters struct {
	changes         *prometheus.CounterVec
	reconciliations *prometheus.CounterVec
	driftedPosts    prometheus.Gauge
	drift           prometheus.Gauge
}

func newCounters(m *metrics.Metrics) (*counters, error) {
	c := &counters{
		changes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shop_like_changes_total",
			Help: "Likes written, by the state they moved to (liked, unliked). A like of a liked post writes nothing and is not counted here.",
		}, []string{"state"}),
		reconciliations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shop_like_reconciliations_total",
			Help: "Reconciliations of the like counts, by outcome: agree (every post's counter rows sum to its liked rows), drift, or error.",
		}, []string{"outcome"}),
		driftedPosts: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "shop_like_drifted_posts",
			Help: "Posts whose like count disagreed with their liked rows at the last reconciliation. Anything but 0 is a bug.",
		}),
		drift: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "shop_like_count_drift",
			Help: "Sum over posts of |counter rows - liked rows| at the last reconciliation. Anything but 0 is a bug.",
		}),
	}
	if m != nil {
		if err := metrics.Register(m.Registry, c.changes, c.reconciliations, c.driftedPosts, c.drift); err != nil {
			return nil, fmt.Errorf("likes metrics: %w", err)
		}
	}
	return c, nil
}
