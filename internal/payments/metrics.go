package payments

import (
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
}

func newCounters(m *metrics.Metrics) *counters {
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
	}
	if m != nil {
		m.Registry.MustRegister(c.attempts, c.outcomes, c.refunds, c.reconciliations)
	}
	return c
}

func (c *counters) outcome(o string) { c.outcomes.WithLabelValues(o).Inc() }
