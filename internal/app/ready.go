package app

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/shop-example/shop/internal/platform/jobs"
	"github.com/shop-example/shop/internal/platform/lock"
	"github.com/shop-example/shop/internal/platform/metrics"
	"github.com/shop-example/shop/internal/platform/problem"
)

// Readiness says whether this replica can serve requests now (GET /readyz).
//
// PostgreSQL must answer: it holds the layers that make every outcome
// correct (state, version, constraints). The lock quorum is required only in
// strict mode, where a request that needs a lock is refused without one. In
// degrade mode such a request runs on the database's layers, so a lost
// quorum leaves the replica able to serve, and /readyz says 200 and names
// the dependency it serves without. Every replica shares the Redis nodes:
// a 503 there would take all of them out of the balancer at once, for
// nothing the service could not do.

// The dependencies a readiness check looks at, as named in the body and in
// the dependency label of shop_degraded.
const (
	depPostgres   = "postgres"
	depLockQuorum = "lock_quorum"
)

// The states of one dependency.
const (
	checkOK       = "ok"
	checkDegraded = "degraded" // not there, and the replica serves without it
	checkDown     = "down"     // not there, and the replica cannot serve
)

// readyTimeout bounds one check. A PostgreSQL that takes longer to answer a
// ping cannot serve a request within its timeout either.
const readyTimeout = 2 * time.Second

// retryAfterNotReady is what a prober is told to wait after a 503.
const retryAfterNotReady = 2 * time.Second

type check struct {
	Status string `json:"status"`
	Detail string `json:"detail,omitempty"`
}

// readiness is the body of /readyz; a 503 carries the same members in a
// problem document.
type readiness struct {
	Ready    bool             `json:"ready"`
	Degraded []string         `json:"degraded"` // dependencies the replica serves without
	Checks   map[string]check `json:"checks"`
}

// readyProbe runs the checks and keeps the gauges that report them.
type readyProbe struct {
	pool     *pgxpool.Pool
	locker   *lock.Locker
	log      *slog.Logger
	ready    prometheus.Gauge
	degraded *prometheus.GaugeVec

	mu   sync.Mutex
	last string // the state the previous check found, for logging changes
}

func newReadyProbe(pool *pgxpool.Pool, locker *lock.Locker, logger *slog.Logger, m *metrics.Metrics) (*readyProbe, error) {
	p := &readyProbe{
		pool:   pool,
		locker: locker,
		log:    logger,
		ready: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "shop_ready",
			Help: "1 if the last readiness check found this replica able to serve, else 0.",
		}),
		degraded: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "shop_degraded",
			Help: "1 while the replica serves without the dependency (the lock quorum in degrade mode), as of the last readiness check.",
		}, []string{"dependency"}),
	}
	if err := metrics.Register(m.Registry, p.ready, p.degraded); err != nil {
		return nil, fmt.Errorf("register readiness metrics: %w", err)
	}
	// PostgreSQL has no degraded state: without it nothing is served.
	p.degraded.WithLabelValues(depLockQuorum)
	return p, nil
}

// check asks every dependency at once, records the answer in the gauges
// and logs a change of state.
func (p *readyProbe) check(ctx context.Context) readiness {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	var (
		wg       sync.WaitGroup
		pgErr    error
		quorum   lock.Quorum
		postgres = check{Status: checkOK}
	)
	wg.Go(func() { pgErr = p.pool.Ping(ctx) })
	wg.Go(func() { quorum = p.locker.Ping(ctx) })
	wg.Wait()
	if pgErr != nil {
		// The cause goes to the log only: /readyz is public.
		postgres = check{Status: checkDown, Detail: "no answer to a ping"}
	}
	r := readiness{
		Ready:    true,
		Degraded: []string{},
		Checks:   map[string]check{depPostgres: postgres, depLockQuorum: quorumCheck(quorum)},
	}
	for _, dep := range []string{depPostgres, depLockQuorum} {
		switch r.Checks[dep].Status {
		case checkDown:
			r.Ready = false
		case checkDegraded:
			r.Degraded = append(r.Degraded, dep)
		}
	}

	p.ready.Set(boolGauge(r.Ready))
	p.degraded.WithLabelValues(depLockQuorum).Set(boolGauge(r.Checks[depLockQuorum].Status == checkDegraded))
	p.logChange(ctx, r, pgErr)
	return r
}

func quorumCheck(q lock.Quorum) check {
	counted := fmt.Sprintf("%d of %d nodes answer, %d needed", q.Answering, q.Nodes, q.Needed)
	switch {
	case q.Reachable():
		return check{Status: checkOK, Detail: counted}
	case q.Mode == lock.Strict:
		return check{Status: checkDown, Detail: counted + "; requests that need a lock are refused (strict mode)"}
	default:
		return check{Status: checkDegraded, Detail: counted + "; requests run without the lock (degrade mode)"}
	}
}

func (p *readyProbe) logChange(ctx context.Context, r readiness, pgErr error) {
	state := "ready"
	switch {
	case !r.Ready:
		state = "not ready"
	case len(r.Degraded) > 0:
		state = "degraded"
	}
	p.mu.Lock()
	changed := state != p.last
	p.last = state
	p.mu.Unlock()
	if !changed {
		return
	}
	level := slog.LevelWarn
	if state == "ready" {
		level = slog.LevelInfo
	}
	attrs := []any{"postgres", r.Checks[depPostgres].Status, "lock_quorum", r.Checks[depLockQuorum].Detail}
	if pgErr != nil {
		attrs = append(attrs, "postgres_err", pgErr)
	}
	p.log.Log(ctx, level, "readiness: "+state, attrs...)
}

// handle answers /readyz: 200 with the checks when the replica can serve,
// else 503 unavailable with the checks in the problem document.
func (p *readyProbe) handle(c echo.Context) error {
	r := p.check(c.Request().Context())
	if r.Ready {
		return c.JSON(http.StatusOK, r)
	}
	return &problem.Error{
		Code:       problem.Unavailable,
		Detail:     "this replica cannot serve requests now",
		RetryAfter: retryAfterNotReady,
		Extra:      map[string]any{"ready": r.Ready, "degraded": r.Degraded, "checks": r.Checks},
	}
}

// run keeps the gauges current for a scraper when nothing probes /readyz.
func (p *readyProbe) run(ctx context.Context, every time.Duration) {
	jobs.Every(ctx, "", every, func(ctx context.Context) { p.check(ctx) })
}

func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
