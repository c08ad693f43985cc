// Package metrics holds the Prometheus registry of one process and the
// metrics every flow shares. Each server gets its own registry (no global
// state), so tests can run several servers in one process and read each
// one's counters.
package metrics

import (
	"errors"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metrics is the registry of one process and the metrics shared by flows.
type Metrics struct {
	Registry *prometheus.Registry

	// ConflictsStopped counts each conflict by the layer that stopped it:
	// the first layer to refuse a duplicate, stale or illegal action.
	ConflictsStopped *prometheus.CounterVec
	// JobSuccess is, per background job, when its last successful pass
	// ended: the alert on a stalled job compares it with the time now, so
	// a job that fails or stops running is seen whatever the reason. The
	// job is the "task" label: Prometheus gives "job" to the scrape job,
	// and would rename this one exported_job.
	JobSuccess *prometheus.GaugeVec
}

// New returns a registry with the Go and process collectors and the shared
// metrics registered.
func New() *Metrics {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	m := &Metrics{
		Registry: reg,
		ConflictsStopped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shop_conflicts_stopped_total",
			Help: "Conflicts stopped, by flow and by the defence layer that stopped them.",
		}, []string{"flow", "layer"}),
	}
	m.JobSuccess = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "shop_job_last_success_timestamp_seconds",
		Help: "Unix time at which the background job (task) last finished a pass successfully in this process, or, before its first, at which it started.",
	}, []string{"task"})
	reg.MustRegister(m.ConflictsStopped, m.JobSuccess)
	return m
}

// Register registers each collector with reg, stopping at the first error.
func Register(reg prometheus.Registerer, cs ...prometheus.Collector) error {
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// Shared registers c, or returns the collector already registered under
// the same description. A registry stands for one process, so a second
// instance of a component built on it (a Locker, an idempotency Store)
// counts into the first one's series instead of failing. A collector of
// the same name and another shape is still an error; c itself comes back
// with it, unregistered, for a caller that would rather count unseen
// than stop.
func Shared[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	err := reg.Register(c)
	if err == nil {
		return c, nil
	}
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing, nil
		}
	}
	return c, err
}

// JobStarted records that job started at t. Until its first success the
// time since then is the time without one, so a job that never succeeds
// is seen as stalled as soon as one that stopped succeeding would be.
func (m *Metrics) JobStarted(job string, t time.Time) { m.JobSucceeded(job, t) }

// JobSucceeded records that a pass of job ended successfully at t.
func (m *Metrics) JobSucceeded(job string, t time.Time) {
	if m == nil {
		return
	}
	m.JobSuccess.WithLabelValues(job).Set(float64(t.UnixNano()) / 1e9)
}

// Stopped records that layer stopped a conflict in flow. The layer is
// one of platform/layers' names; a flow counts through layers.Flow.Stopped.
func (m *Metrics) Stopped(flow, layer string) {
	if m == nil {
		return
	}
	m.ConflictsStopped.WithLabelValues(flow, layer).Inc()
}

// Handler serves the registry in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	// OpenMetrics, when the scraper asks for it, carries the latency
	// histograms' exemplars: the trace of a request in each bucket.
	return promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{Registry: m.Registry, EnableOpenMetrics: true})
}
