package refunds

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shop-example/shop/internal/platform/metrics"
)

// Results, the "result" label of shop_refunds_total.
const (
	resultSucceeded = string(StatusSucceeded)
	resultFailed    = string(StatusFailed) // the processor refused: nothing was given back
	resultUnknown   = "unknown"            // left processing, for the reconciler
	resultRefused   = "refused"            // the shop refused it: invalid, or not what the order allows
)

// counters are the refund metrics: how each refund asked for ended, and
// what the reconciler did.
type counters struct {
	results         *prometheus.CounterVec
	reconciliations *prometheus.CounterVec
}

func newCounters(m *metrics.Metrics) (*counters, error) {
	c := &counters{
		results: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shop_refunds_total",
			Help: "Refunds asked for, by result: succeeded, failed (the processor refused; nothing given back), unknown (left processing for the reconciler), refused (by the shop: invalid, or more than the order allows).",
		}, []string{"result"}),
		reconciliations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shop_refund_reconciliations_total",
			Help: "Processing refunds the reconciler looked at, by what became of them: succeeded, failed, unknown, gone (settled meanwhile).",
		}, []string{"outcome"}),
	}
	if m != nil {
		if err := metrics.Register(m.Registry, c.results, c.reconciliations); err != nil {
			return nil, fmt.Errorf("refunds metrics: %w", err)
		}
	}
	return c, nil
}

// result counts a refund that ended as result (a refund the reconciler
// settles later counts again, with its outcome).
func (c *counters) result(result string) { c.results.WithLabelValues(result).Inc() }
