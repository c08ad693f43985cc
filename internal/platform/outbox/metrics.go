package outbox

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shop-example/shop/internal/platform/metrics"
)

// Metrics are the outbox's series. A nil *Metrics counts nothing.
type Metrics struct {
	Lag         prometheus.Gauge
	Published   *prometheus.CounterVec
	Redelivered *prometheus.CounterVec
	Consumed    *prometheus.CounterVec
	Retried     *prometheus.CounterVec
	Failed      prometheus.Gauge
}

// NewMetrics registers the outbox's series with m.
func NewMetrics(m *metrics.Metrics) (*Metrics, error) {
	var err error
	o := &Metrics{}
	if o.Lag, err = metrics.Shared(m.Registry, prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "shop_outbox_lag_seconds",
		Help: "Age of the oldest event in the outbox that the relay has not published yet (0 when none is waiting).",
	})); err != nil {
		return nil, err
	}
	if o.Published, err = metrics.Shared(m.Registry, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "shop_outbox_published_total",
		Help: "Events published from the outbox to their stream by this process's relay, by event.",
	}, []string{"event"})); err != nil {
		return nil, err
	}
	if o.Redelivered, err = metrics.Shared(m.Registry, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "shop_outbox_redelivered_total",
		Help: "Events published again from the outbox because a consumer had not recorded them in time, by event.",
	}, []string{"event"})); err != nil {
		return nil, err
	}
	if o.Consumed, err = metrics.Shared(m.Registry, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "shop_events_consumed_total",
		Help: "Deliveries of events handled by a consumer, by consumer, event and outcome (processed, deduplicated, skipped, failed).",
	}, []string{"consumer", "event", "outcome"})); err != nil {
		return nil, err
	}
	if o.Retried, err = metrics.Shared(m.Registry, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "shop_events_retried_total",
		Help: "Deliveries a consumer could not handle yet, left to be delivered again, by reason: unavailable (a lock's quorum or a provider out), resource_busy (a lock held), error.",
	}, []string{"consumer", "event", "reason"})); err != nil {
		return nil, err
	}
	if o.Failed, err = metrics.Shared(m.Registry, prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "shop_events_failed",
		Help: "Events a consumer gave up on for good (a provider refused the effect) and has not acted on since: each is a mail or an effect the shop owes. `shop events failed` lists them, `shop events replay` sends them again.",
	})); err != nil {
		return nil, err
	}
	return o, nil
}

func (m *Metrics) failed(n int) {
	if m != nil {
		m.Failed.Set(float64(n))
	}
}

func (m *Metrics) lag(d time.Duration) {
	if m != nil {
		m.Lag.Set(d.Seconds())
	}
}

func (m *Metrics) published(event string) {
	if m != nil {
		m.Published.WithLabelValues(event).Inc()
	}
}

func (m *Metrics) redelivered(event string) {
	if m != nil {
		m.Redelivered.WithLabelValues(event).Inc()
	}
}

func (m *Metrics) consumed(consumer, event string, o Outcome) {
	if m != nil {
		m.Consumed.WithLabelValues(consumer, event, string(o)).Inc()
	}
}

func (m *Metrics) retried(consumer, event, reason string) {
	if m != nil {
		m.Retried.WithLabelValues(consumer, event, reason).Inc()
	}
}
