package lock

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"

	"github.com/shop-example/shop/internal/platform/metrics"
)

// Outcomes of an acquisition, the values of the "outcome" label. A lock that
// was acquired and later lost counts once as acquired and once as lost.
const (
	outcomeAcquired    = "acquired"
	outcomeBusy        = "busy"
	outcomeUnavailable = "unavailable"
	outcomeLost        = "lost"
)

// lockMetrics are the lock's Prometheus collectors.
type lockMetrics struct {
	wait         prometheus.Histogram
	tries        prometheus.Histogram
	hold         prometheus.Histogram
	acquisitions *prometheus.CounterVec
	extensions   *prometheus.CounterVec
	unlockErrors prometheus.Counter
	degraded     prometheus.Counter
}

// newLockMetrics registers the lock's collectors on reg. A second Locker
// on the same registry shares the first one's (metrics.Shared).
func newLockMetrics(reg prometheus.Registerer) (_ *lockMetrics, err error) {
	defer func() {
		if err != nil {
			err = fmt.Errorf("register lock metrics: %w", err)
		}
	}()
	var m lockMetrics
	if m.wait, err = metrics.Shared(reg, prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "shop_lock_wait_seconds",
		Help: "Time from asking for a lock to getting it, being refused, or finding the quorum unreachable.",
		// 1 ms to the 2 s default wait budget, plus one bucket above for
		// custom budgets.
		Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2, 5},
	})); err != nil {
		return nil, err
	}
	if m.tries, err = metrics.Shared(reg, prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "shop_lock_tries",
		Help: "Attempts (redsync single tries, each a SET NX on every node, and a release of what it took when it fell short) per acquisition, whatever its outcome.",
		// One is the uncontended lock; a waiter that spends the default
		// 2 s budget, paced at 5–50 ms, makes about a hundred.
		Buckets: []float64{1, 2, 3, 5, 10, 20, 50, 100},
	})); err != nil {
		return nil, err
	}
	if m.hold, err = metrics.Shared(reg, prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "shop_lock_hold_seconds",
		Help: "Time a lock was held, from acquisition to release.",
		// Database work is milliseconds; a gateway call under the
		// watchdog may take tens of seconds.
		Buckets: []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
	})); err != nil {
		return nil, err
	}
	if m.acquisitions, err = metrics.Shared(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "shop_lock_acquisitions_total",
		Help: "Lock acquisitions by outcome: acquired, busy (wait budget spent), unavailable (quorum unreachable), lost (extension failed during the work).",
	}, []string{"outcome"})); err != nil {
		return nil, err
	}
	if m.extensions, err = metrics.Shared(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "shop_lock_extensions_total",
		Help: "Lease extensions made by the watchdog, by result.",
	}, []string{"result"})); err != nil {
		return nil, err
	}
	if m.unlockErrors, err = metrics.Shared(reg, prometheus.NewCounter(prometheus.CounterOpts{
		Name: "shop_lock_unlock_errors_total",
		Help: "Releases that did not reach a quorum; the lease then ends by expiry.",
	})); err != nil {
		return nil, err
	}
	if m.degraded, err = metrics.Shared(reg, prometheus.NewCounter(prometheus.CounterOpts{
		Name: "shop_lock_degraded_total",
		Help: "Work run without the lock because the quorum was unreachable (degrade mode).",
	})); err != nil {
		return nil, err
	}

	// Create every labelled series up front, so dashboards and alerts
	// see a zero rather than no data.
	for _, o := range []string{outcomeAcquired, outcomeBusy, outcomeUnavailable, outcomeLost} {
		m.acquisitions.WithLabelValues(o)
	}
	for _, r := range []string{"ok", "failed"} {
		m.extensions.WithLabelValues(r)
	}
	return &m, nil
}

func (m *lockMetrics) outcome(o string) { m.acquisitions.WithLabelValues(o).Inc() }

func (m *lockMetrics) extension(ok bool) {
	if ok {
		m.extensions.WithLabelValues("ok").Inc()
		return
	}
	m.extensions.WithLabelValues("failed").Inc()
}

// The lock spans' attributes (lock.wait, lock.hold).
const (
	attrKey      = attribute.Key("shop.lock.key")
	attrName     = attribute.Key("shop.lock.name")
	attrNodes    = attribute.Key("shop.lock.nodes")
	attrAnswered = attribute.Key("shop.lock.nodes_answered")
	attrTries    = attribute.Key("shop.lock.tries")
	attrResult   = attribute.Key("shop.lock.result")
	attrMode     = attribute.Key("shop.lock.mode")
	attrLost     = attribute.Key("shop.lock.lost")
)
