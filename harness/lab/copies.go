package lab

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/shop-example/shop/harness/gateway"
	"github.com/shop-example/shop/harness/mailer"
	"github.com/shop-example/shop/harness/variants"
	"github.com/shop-example/shop/internal/app"
	"github.com/shop-example/shop/internal/platform/layers"
	"github.com/shop-example/shop/internal/platform/metrics"
	"github.com/shop-example/shop/internal/platform/postgres"
)

// The race lab's tables: the same migrations as the service's, in
// schemas of their own, so no run can touch a real order. Live runs go to
// the first, through the public address; sandboxes to the others. A
// constraint is schema, not code: with layer 4 off a run goes to the bare
// schema, whose constraints the flows lean on are dropped (the ablation
// matrices drop the same ones in their test databases).
const (
	liveSchema        = "shop_lab_live"
	sandboxSchema     = "shop_lab"
	sandboxBareSchema = "shop_lab_bare"
)

// sandboxes builds the race lab's sandboxes: copies of the service with
// some layers off, on the sandbox schema, each serving on a loopback
// port for one run.
type sandboxes struct {
	a *host

	mu    sync.Mutex
	pools map[string]*pgxpool.Pool // by schema: opened, and migrated, by the first run on it

	spans labSpans // the races' spans, of the live copy and the sandboxes alike
}

// open returns a pool on schema, creating and migrating it the first time.
func (s *sandboxes) open(ctx context.Context, schema string) (*pgxpool.Pool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p, ok := s.pools[schema]; ok {
		return p, nil
	}
	// Two replicas may open the same schema at once, and CREATE SCHEMA IF
	// NOT EXISTS is not safe against itself (the loser fails on the
	// catalogue's unique index): the lock makes the second wait and find it.
	err := postgres.InTx(ctx, s.a.deps.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('shop-lab-schema:' || $1, 0))`, schema); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+schema)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("create schema: %w", err)
	}
	u, err := s.schemaURL(schema)
	if err != nil {
		return nil, err
	}
	if err := postgres.MigrateUp(u); err != nil {
		return nil, err
	}
	pool, err := postgres.Open(ctx, u, 8)
	if err != nil {
		return nil, err
	}
	if schema == sandboxBareSchema {
		for _, c := range app.Layer4 {
			if _, err := pool.Exec(ctx, c.DropIfExists()); err != nil {
				pool.Close()
				return nil, fmt.Errorf("%s: %w", c.DropIfExists(), err)
			}
		}
	}
	if s.pools == nil {
		s.pools = map[string]*pgxpool.Pool{}
	}
	s.pools[schema] = pool
	return pool, nil
}

// schemaURL is the database's URL with schema as its search path.
func (s *sandboxes) schemaURL(schema string) (string, error) {
	u, err := url.Parse(s.a.cfg.DatabaseURL)
	if err != nil {
		return "", err
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// build is a Sandbox: the service with set's layers, its flows and the
// consumers of its events on the variants that take the others off
// (harness/variants), rate limits off (the run is bounded by the lab),
// stock taken by read-check-write when the version layer is off (the
// lost update that layer exists to stop).
func (s *sandboxes) build(ctx context.Context, set layers.Set) (_ Target, _ func(), err error) {
	schema := sandboxSchema
	if !set.On(layers.Constraint) {
		schema = sandboxBareSchema
	}
	pool, err := s.open(ctx, schema)
	if err != nil {
		return Target{}, nil, err
	}
	var undo teardown
	defer func() {
		if err != nil {
			undo.run()
		}
	}()
	// A gateway of its own, so the sandbox's charges never reach the
	// journal the books of real orders are audited against; its own
	// check of refunds is off, so that what a missing layer lets through
	// reaches the processor (a refund beyond what was captured), as it
	// would at a processor whose bound is the charge, not the order.
	_, gwURL, stopGateway, err := s.gateway(refundLimitOff)
	if err != nil {
		return Target{}, nil, err
	}
	undo.add(stopGateway)
	// A mail provider of its own too. Its memory of keys goes with the
	// idempotency layer, of which the provider's key is the mail's part:
	// with the layer off it forgets a key at once, as a real provider
	// has a day later, and a copy of an event that reaches it after that
	// is a mail of its own.
	ttl := mailer.DefaultKeyTTL
	if !set.On(layers.Idempotency) {
		ttl = forgetfulKeys
	}
	mailURL, stopMailer, err := s.mailer(ttl)
	if err != nil {
		return Target{}, nil, err
	}
	undo.add(stopMailer)
	replays, err := newReplayCounter(mailURL)
	if err != nil {
		return Target{}, nil, err
	}
	undo.add(replays.close)
	cfg := s.a.cfg
	cfg.GatewayURL = gwURL
	cfg.MailerURL = replays.URL
	cfg.Events.Prefix = labStreams(s.a.cfg.Events.Prefix) + "sandbox-" + rand.Text()[:8] + ":"
	cfg.Demo = false
	cfg.ReplicaName = "sandbox"
	cfg.RateLimit.Off = true
	spans, recorder, err := s.spans.open(ctx, s)
	if err != nil {
		return Target{}, nil, err
	}
	v := variants.For(set, variants.ReadCheckWrite, nil)
	sb, err := app.New(cfg, app.Deps{Pool: pool, Redis: s.a.deps.Redis, Logger: s.a.deps.Logger, Now: s.a.deps.Now,
		Variants: v, Events: app.EventDeps{Consumers: v},
		KeepSpans: Traced, SpanProcessors: []sdktrace.SpanProcessor{recorder}})
	if err != nil {
		return Target{}, nil, err
	}
	undo.add(sb.Close)
	if err := replays.register(sb.Metrics); err != nil {
		return Target{}, nil, err
	}
	// Its consumers as two replicas run them (compose's), so that the
	// copies of a storm meet as many consumers at once as on the live
	// copy.
	evs := startLabEvents(sb, pool, 2)
	undo.add(func() {
		evs.close()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if err := evs.expire(ctx, time.Minute); err != nil {
			s.a.deps.Logger.Warn("lab sandbox: expire its streams", "err", err)
		}
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return Target{}, nil, err
	}
	// A race's requests are marked before the sandbox's tracing sees
	// them, so that their spans are recorded.
	srv := &http.Server{Handler: MarkRuns(sb.Echo), ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.a.deps.Logger.Warn("lab sandbox", "err", err)
		}
	}()
	undo.add(func() { _ = srv.Close() })
	return Target{Name: "sandbox", URL: "http://" + ln.Addr().String(), GatewayURL: gwURL, AdminToken: cfg.AdminToken,
		MailerURL: mailURL, Events: evs, Pool: pool, Metrics: sb.Metrics, Layers: set, Spans: spans}, undo.run, nil
}

// teardown stops what was started, the last first.
type teardown []func()

func (t *teardown) add(stop func()) { *t = append(*t, stop) }

func (t teardown) run() {
	for i := len(t) - 1; i >= 0; i-- {
		t[i]()
	}
}

// The refund limit of a lab gateway: a sandbox's is off, the live copy's
// on, as a real processor's is.
const (
	refundLimitOn  = false
	refundLimitOff = true
)

// gateway starts a stand-in card processor for one sandbox run, its
// journal in a temporary directory removed when it stops; with
// noRefundLimit (refundLimitOff) it refunds whatever it is asked.
func (s *sandboxes) gateway(noRefundLimit bool) (*gateway.Server, string, func(), error) {
	dir, err := os.MkdirTemp("", "shop-lab-gateway-")
	if err != nil {
		return nil, "", nil, err
	}
	gw, err := gateway.New(gateway.Options{JournalPath: filepath.Join(dir, "journal.jsonl"),
		SlowDelay: s.a.cfg.GatewaySlowDelay, Logger: s.a.deps.Logger, NoRefundLimit: noRefundLimit})
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, "", nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		_ = gw.Close()
		_ = os.RemoveAll(dir)
		return nil, "", nil, err
	}
	srv := &http.Server{Handler: gw.Handler(), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	stop := func() {
		_ = srv.Close()
		_ = gw.Close()
		_ = os.RemoveAll(dir)
	}
	return gw, "http://" + ln.Addr().String(), stop, nil
}

// liveCopy is this replica's copy of the service for the race lab's live
// runs: every layer on and the same limits, on the live schema, the lab's
// gateway and the lab's mail provider, its consumers on the lab's
// streams. Every replica of a demo server builds one on the first request
// routed to it, so a race sent through the balancer reaches the copy on
// whichever replica serves it, as a real client's reaches the shop, and
// the copies of a redelivery storm reach the consumers of both.
type liveCopy struct {
	a   *host
	key string // the RouteHeader value that routes to the copy

	mu         sync.Mutex
	app        *app.App      // guarded by mu; nil until the first request
	pool       *pgxpool.Pool // its tables, the live schema's
	metrics    atomic.Value  // *metrics.Metrics, once app is built
	gatewayURL string
	mailerURL  string
	events     *labEvents
	spans      *SpanStore
	stop       teardown
}

// newLiveCopy returns the copy of a, not yet built. Its key is derived
// from the admin token, which every replica shares (a demo server has
// one): only the lab's own requests reach the copy.
func newLiveCopy(a *host) *liveCopy {
	mac := hmac.New(sha256.New, []byte(a.cfg.AdminToken))
	mac.Write([]byte("shop race lab: live copy"))
	return &liveCopy{a: a, key: hex.EncodeToString(mac.Sum(nil))}
}

// get returns the copy, building it the first time.
func (l *liveCopy) get(ctx context.Context) (_ *app.App, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.app != nil {
		return l.app, nil
	}
	pool, err := l.a.sandboxes.open(ctx, liveSchema)
	if err != nil {
		return nil, err
	}
	var undo teardown
	defer func() {
		if err != nil {
			undo.run()
		}
	}()
	if l.gatewayURL = l.a.cfg.LabGatewayURL; l.gatewayURL == "" {
		var stopGateway func()
		if _, l.gatewayURL, stopGateway, err = l.a.sandboxes.gateway(refundLimitOn); err != nil {
			return nil, err
		}
		undo.add(stopGateway)
	}
	if l.mailerURL = l.a.cfg.LabMailerURL; l.mailerURL == "" {
		var stopMailer func()
		if l.mailerURL, stopMailer, err = l.a.sandboxes.mailer(l.a.cfg.MailerKeyTTL); err != nil {
			return nil, err
		}
		undo.add(stopMailer)
	}
	replays, err := newReplayCounter(l.mailerURL)
	if err != nil {
		return nil, err
	}
	undo.add(replays.close)
	cfg := l.a.cfg
	cfg.GatewayURL = l.gatewayURL
	cfg.MailerURL = replays.URL
	cfg.Events.Prefix = labStreams(l.a.cfg.Events.Prefix)
	cfg.Demo = false // no lab in the copy, so no copy of the copy
	cfg.ReplicaName = l.a.Replica()
	spans, recorder, err := l.a.sandboxes.spans.open(ctx, l.a.sandboxes)
	if err != nil {
		return nil, err
	}
	l.spans = spans
	copied, err := app.New(cfg, app.Deps{Pool: pool, Redis: l.a.deps.Redis, Logger: l.a.deps.Logger, Now: l.a.deps.Now,
		KeepSpans: Traced, SpanProcessors: []sdktrace.SpanProcessor{recorder}})
	if err != nil {
		return nil, err
	}
	undo.add(copied.Close)
	if err := replays.register(copied.Metrics); err != nil {
		return nil, err
	}
	l.events = startLabEvents(copied, pool, 1)
	undo.add(l.events.close)
	l.app, l.pool, l.stop = copied, pool, undo
	l.metrics.Store(copied.Metrics)
	return copied, nil
}

// route serves a request carrying the copy's key from the copy: run
// before the router, so the request meets the copy's whole stack, its
// own middleware, guards and limits included, and none of this replica's.
func (l *liveCopy) route(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		got := c.Request().Header.Get(RouteHeader)
		if got == "" || !l.a.cfg.Demo || subtle.ConstantTimeCompare([]byte(got), []byte(l.key)) != 1 {
			return next(c)
		}
		copied, err := l.get(c.Request().Context())
		if err != nil {
			return fmt.Errorf("lab live copy: %w", err)
		}
		// A race's request is marked here, before the copy's tracing sees
		// it: its spans are recorded, for the race's waterfall.
		MarkRuns(copied.Echo).ServeHTTP(c.Response(), c.Request())
		return nil
	}
}

// target is a Target for a live run: the public address, with the key
// that routes each request to the copy, and the copy's tables, gateway,
// mail provider and streams.
func (l *liveCopy) target(ctx context.Context) (Target, error) {
	copied, err := l.get(ctx)
	if err != nil {
		return Target{}, err
	}
	return Target{Name: "live", URL: l.a.cfg.LabTarget, Header: http.Header{RouteHeader: {l.key}},
		GatewayURL: l.gatewayURL, AdminToken: l.a.cfg.AdminToken, MailerURL: l.mailerURL, Events: l.events, Pool: l.pool, Metrics: copied.Metrics,
		Spans: l.spans}, nil
}

// liveMetrics is the copy's registry, nil before it is built.
func (l *liveCopy) liveMetrics() *metrics.Metrics {
	m, _ := l.metrics.Load().(*metrics.Metrics)
	return m
}

func (l *liveCopy) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stop.run()
}

func (s *sandboxes) close() {
	s.spans.close()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.pools {
		p.Close()
	}
}
