package idempotency

import (
	"errors"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shop-example/shop/internal/platform/metrics"
)

// What the claim decided for a request: the values of the "outcome" label.
const (
	outcomeClaimed    = "claimed"     // a new key: the handler runs
	outcomeTakenOver  = "taken_over"  // an expired claim taken over: the handler runs again
	outcomeReplayed   = "replayed"    // the stored answer was sent
	outcomeInProgress = "in_progress" // 409 request_in_progress
	outcomeReused     = "reused"      // 422 idempotency_key_reused
)

// What became of a claim after the handler: the values of the "result" label.
const (
	resultStored     = "stored"      // the answer is stored for replay
	resultReleased   = "released"    // not stored (5xx or transient); the key is free again
	resultStaleOwner = "stale_owner" // the key had been taken over; nothing written
	resultError      = "error"       // the database refused; the lease will expire
)

// counters are the package's own Prometheus collectors. A nil *counters
// (no Metrics given) counts nothing.
type counters struct {
	requests *prometheus.CounterVec
	results  *prometheus.CounterVec
	swept    prometheus.Counter
}

func newCounters(m *metrics.Metrics, logger *slog.Logger) *counters {
	if m == nil {
		return nil
	}
	c := &counters{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shop_idempotency_requests_total",
			Help: "Requests with an Idempotency-Key, by what the claim decided.",
		}, []string{"outcome"}),
		results: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shop_idempotency_results_total",
			Help: "Claims after the handler ran, by what became of them.",
		}, []string{"result"}),
		swept: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "shop_idempotency_swept_total",
			Help: "Idempotency keys deleted after their retention.",
		}),
	}
	// A registry stands for one process: a second Store on it shares the
	// first one's series. A clash with another collector of the same name
	// is a wiring bug; it is logged and this store counts unregistered
	// rather than refusing to serve.
	var err error
	if c.requests, err = register(m.Registry, c.requests); err == nil {
		if c.results, err = register(m.Registry, c.results); err == nil {
			c.swept, err = register(m.Registry, c.swept)
		}
	}
	if err != nil {
		logger.Error("register idempotency metrics", "err", err)
	}
	for _, o := range []string{outcomeClaimed, outcomeTakenOver, outcomeReplayed, outcomeInProgress, outcomeReused} {
		c.requests.WithLabelValues(o)
	}
	for _, r := range []string{resultStored, resultReleased, resultStaleOwner, resultError} {
		c.results.WithLabelValues(r)
	}
	return c
}

// register registers col, or returns the collector already registered
// under the same description.
func register[C prometheus.Collector](reg prometheus.Registerer, col C) (C, error) {
	err := reg.Register(col)
	if err == nil {
		return col, nil
	}
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing, nil
		}
	}
	return col, err
}

func (c *counters) outcome(o string) {
	if c != nil {
		c.requests.WithLabelValues(o).Inc()
	}
}

func (c *counters) result(r string) {
	if c != nil {
		c.results.WithLabelValues(r).Inc()
	}
}

func (c *counters) sweptKeys(n int64) {
	if c != nil {
		c.swept.Add(float64(n))
	}
}
