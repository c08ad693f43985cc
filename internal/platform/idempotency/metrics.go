package idempotency

import (
	"log/slog"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"

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
	resultStaleOwner = "stale_owner" // another request held or completed the key; nothing written
	resultError      = "error"       // the database refused: 503 instead of an answer it could not store, or the claim waits for its lease
)

// counters are the package's own Prometheus collectors. A nil *counters
// (no Metrics given) counts nothing.
type counters struct {
	requests *prometheus.CounterVec
	results  *prometheus.CounterVec
	swept    prometheus.Counter
	// crossSchemes counts the requests that met a record written under
	// another key scheme than this replica's (package keyscheme): during
	// a rollout, the copies of one request that replicas of both schemes
	// handled. After the clean-up it falls to zero within a retention.
	crossSchemes *prometheus.CounterVec
	// repeats is the time from a key's first submission to each repeat
	// of it. Its shape tells who repeats: tens of milliseconds point at
	// a double click or a broken debounce in a client, seconds at a
	// client's retry policy, minutes and hours at a retrying upstream or
	// a queue redelivering.
	repeats *prometheus.HistogramVec
}

// repeatBuckets span a double click (10 ms) to a day-old retry (a day).
var repeatBuckets = []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600, 6 * 3600, 24 * 3600}

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
		crossSchemes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shop_idempotency_cross_scheme_total",
			Help: "Requests that met an idempotency record of another key scheme than this replica's, by flow and the record's scheme.",
		}, []string{"flow", "scheme"}),
		swept: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "shop_idempotency_swept_total",
			Help: "Idempotency keys deleted after their retention.",
		}),
		repeats: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "shop_idempotency_repeat_interval_seconds",
			Help:    "Time from a key's first submission to each repeat of it, by flow: milliseconds are double clicks, minutes retrying upstreams.",
			Buckets: repeatBuckets,
		}, []string{"flow"}),
	}
	// A registry stands for one process: a second Store on it shares the
	// first one's series. A clash with another collector of the same name
	// is a wiring bug; it is logged and this store counts unregistered
	// rather than refusing to serve.
	var err error
	if c.requests, err = metrics.Shared(m.Registry, c.requests); err == nil {
		if c.results, err = metrics.Shared(m.Registry, c.results); err == nil {
			if c.swept, err = metrics.Shared(m.Registry, c.swept); err == nil {
				if c.repeats, err = metrics.Shared(m.Registry, c.repeats); err == nil {
					c.crossSchemes, err = metrics.Shared(m.Registry, c.crossSchemes)
				}
			}
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

// outcome counts what a key's request met, and r (nil: none) keeps it
// for the request's idempotency span (shop.idempotency.outcome).
func (s *Store) outcome(r *Record, o string) {
	if r != nil {
		r.outcome = o
	}
	s.counters.outcome(o)
}

// result counts what became of a claimed key's answer, and r keeps it
// for the span (shop.idempotency.result).
func (s *Store) result(r *Record, res string) {
	if r != nil {
		r.result = res
	}
	s.counters.result(res)
}

// The idempotency span's attributes.
const (
	attrOutcome = attribute.Key("shop.idempotency.outcome")
	attrResult  = attribute.Key("shop.idempotency.result")
	attrKey     = attribute.Key("shop.idempotency.key")
	attrStored  = attribute.Key("shop.idempotency.stored")
	attrFlow    = attribute.Key("shop.flow")
)

// repeat records a submission of a key first seen at first.
func (c *counters) repeat(flow string, first, now time.Time) {
	if c != nil {
		c.repeats.WithLabelValues(flow).Observe(max(now.Sub(first), 0).Seconds())
	}
}

// crossScheme counts a request of flow that met a record of scheme.
func (c *counters) crossScheme(flow string, scheme int) {
	if c != nil {
		c.crossSchemes.WithLabelValues(flow, strconv.Itoa(scheme)).Inc()
	}
}

func (c *counters) sweptKeys(n int64) {
	if c != nil {
		c.swept.Add(float64(n))
	}
}
