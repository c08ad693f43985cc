package ratelimit

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shop-example/shop/internal/platform/metrics"
)

// The values of the "decision" label.
const (
	decisionAllowed = "allowed"
	decisionDenied  = "denied"
)

// limitMetrics count what the limiter decided, per policy. A request let
// through because Redis did not answer is neither allowed nor denied: it
// is counted as fail-open only, so allowed + denied + fail-open is every
// request a policy saw.
type limitMetrics struct {
	decisions *prometheus.CounterVec
	failOpens *prometheus.CounterVec
}

func newLimitMetrics(reg prometheus.Registerer) (*limitMetrics, error) {
	m := &limitMetrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shop_rate_limit_requests_total",
			Help: "Requests counted by a rate limit, by limit and decision: allowed or denied (429).",
		}, []string{"limit", "decision"}),
		failOpens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shop_rate_limit_fail_open_total",
			Help: "Requests let through unlimited because the limiter's Redis did not answer in time.",
		}, []string{"limit"}),
	}
	if err := metrics.Register(reg, m.decisions, m.failOpens); err != nil {
		return nil, fmt.Errorf("register rate limit metrics: %w", err)
	}
	return m, nil
}

// init creates a policy's series up front, so dashboards and alerts see a
// zero rather than no data.
func (m *limitMetrics) init(name string) {
	m.decisions.WithLabelValues(name, decisionAllowed)
	m.decisions.WithLabelValues(name, decisionDenied)
	m.failOpens.WithLabelValues(name)
}

func (m *limitMetrics) decided(name, decision string) {
	m.decisions.WithLabelValues(name, decision).Inc()
}

func (m *limitMetrics) failOpen(name string) { m.failOpens.WithLabelValues(name).Inc() }
