package payments

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shop-example/shop/internal/platform/metrics"
)

// Outcomes, the "outcome" label of the payment counters.
const (
	outcomeSucceeded = "succeeded"
	outcomeFailed    = "failed"
	outcomeRefunded  = "refunded"
	outcomeUnknown   = "unknown"
	outcomeRejected  = "rejected" // the gateway refused the request as invalid; the payment is discarded
)

// counters are the payment metrics: how many payments began, how each
// attempt to settle one ended, how many charges went back, and what the
// reconciler did.
type counters struct {
	attempts        prometheus.Counter
	outcomes        *prometheus.CounterVec
	refunds         prometheus.Counter
	reconciliations *prometheus.CounterVec
	// backlog and oldest are what the reconciler's last pass could not
	// settle: the alert on a reconciler that is not keeping up reads
	// them (a backlog counted when a pass begins would include payments
	// it is about to settle, and show a steady trickle as a backlog).
	backlog prometheus.Gauge
	oldest  prometheus.Gauge
}

func newCounters(m *metrics.Metrics) (*counters, error) {
	c := &counters{
		attempts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "shop_payment_attempts_total",
			Help: "Payments begun (a processing payment row written).",
		}),
		outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shop_payment_outcomes_total",
			Help: "Payment settlements by outcome: succeeded, failed, refunded, rejected (an invalid request, discarded), or unknown (left to the reconciler).",
		}, []string{"outcome"}),
		refunds: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "shop_payment_refunds_total",
			Help: "Charges refunded because their order stopped waiting (cancelled or expired) while they were in flight.",
		}),
		reconciliations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shop_payment_reconciliations_total",
			Help: "Processing payments the reconciler looked at, by what became of them.",
		}, []string{"outcome"}),
		backlog: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "shop_payment_reconcile_backlog",
			Help: "Payments processing for longer than the reconcile delay that the reconciler's last pass could not settle (outcome unknown); at most one batch (100).",
		}),
		oldest: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "shop_payment_reconcile_oldest_seconds",
			Help: "How long the oldest payment the reconciler's last pass could not settle had been processing; 0 when it settled every payment due.",
		}),
	}
	if m != nil {
		if err := metrics.Register(m.Registry, c.attempts, c.outcomes, c.refunds, c.reconciliations, c.backlog, c.oldest); err != nil {
			return nil, fmt.Errorf("payments metrics: %w", err)
		}
	}
	return c, nil
}

// unsettled records what a reconciler pass left processing at now: left
// payments, the oldest of which began processing at since.
func (c *counters) unsettled(left int, since, now time.Time) {
	c.backlog.Set(float64(left))
	if left == 0 {
		c.oldest.Set(0)
		return
	}
	c.oldest.Set(max(now.Sub(since), 0).Seconds())
}

func (c *counters) outcome(o string) { c.outcomes.WithLabelValues(o).Inc() }
