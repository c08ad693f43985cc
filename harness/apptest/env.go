package apptest

import (
	"context"
	"crypto/rand"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shop-example/shop/harness/books"
	"github.com/shop-example/shop/harness/gateway"
	"github.com/shop-example/shop/harness/gateway/gatewaytest"
	"github.com/shop-example/shop/harness/lab"
	"github.com/shop-example/shop/harness/mailer"
	"github.com/shop-example/shop/harness/mailer/mailertest"
	"github.com/shop-example/shop/harness/testenv"
	"github.com/shop-example/shop/internal/app"
	"github.com/shop-example/shop/internal/platform/config"
	"github.com/shop-example/shop/internal/platform/redisx"
)

const (
	// AdminToken is SHOP_ADMIN_TOKEN in every replica unless vars say otherwise.
	AdminToken = "test-admin-token"
	// OrderTTL is SHOP_ORDER_TTL in these tests; the clock is moved past it.
	OrderTTL = 15 * time.Minute
)

// Env is N replicas of the service on one database and one lock quorum,
// as docker compose runs them, with a payment gateway reached over HTTP,
// plus a direct pool for checking invariants.
type Env struct {
	DB         *pgxpool.Pool         // straight to the database, for the checks afterwards
	Clock      *testenv.Clock        // shared by every replica; it runs with real time, so lists sort by it
	Gateway    *gateway.Server       // the payment gateway, with its audit of charges
	Slow       *gatewaytest.HoldBack // the gateway's pm_card_slow answers wait for its Release
	LabGateway *gateway.Server       // the race lab's live copy's (StackOptions.LabGateway); nil without one
	LabMailer  *mailer.Server        // the race lab's live copy's mail provider (StackOptions.LabMailer); nil without one
	Mailer     *mailer.Server        // the mail provider, with its audit of messages (SHOP_MAILER_KEY_TTL applies)
	Cfg        config.Config         // every replica's configuration, its name aside (StackOptions.Names)
	Replicas   []*Replica

	// What Restart needs to start a replica again: the environment the
	// configurations were read from, each replica's own part of it and
	// its configuration, and how a replica is started.
	environ map[string]string
	each    []map[string]string
	cfgs    []config.Config
	start   func(t testing.TB, c config.Config) *Replica
	mu      sync.Mutex   // guards Replicas and down while a replica restarts
	down    map[int]bool // replicas out of rotation (Restart)
	broken  *atomic.Bool // layers taken off: the 500s they cause are not the contract's
}

// Replica is one app.New with its own pool, Redis clients and HTTP
// servers: the API's and the metrics'.
type Replica struct {
	App        *app.App
	URL        string
	MetricsURL string
	// client checks every exchange against docs/openapi.yaml
	// (CheckedTransport); scrapes go around it, /metrics being the
	// metrics listener's and no part of the API.
	client *http.Client
	// breach, when set, is why the requests of this copy of the replica
	// break the contract on purpose (OffContract).
	breach string
	// stop closes its servers, waiting for the requests they hold (and,
	// for the Env's replicas, then the app); once.
	stop func()
}

// Serve serves a's API and metrics on servers of their own, as
// `shop serve` does, closed when the test ends.
func Serve(t testing.TB, a *app.App, client *http.Client) *Replica {
	t.Helper()
	srv := httptest.NewServer(a.Echo)
	t.Cleanup(srv.Close)
	metrics := httptest.NewServer(a.MetricsHandler())
	t.Cleanup(metrics.Close)
	return &Replica{App: a, URL: srv.URL, MetricsURL: metrics.URL, client: client,
		stop: sync.OnceFunc(func() { srv.Close(); metrics.Close() })}
}

// New builds replicas of the service on a fresh database, and a
// gateway of their own. vars override the service's environment
// (SHOP_ADMIN_TOKEN is the test token unless overridden, SHOP_ORDER_TTL is
// OrderTTL, SHOP_GATEWAY_SLOW_DELAY sets the window of the gateway's
// hold-back; a pm_card_slow answer inside it waits for Env.Slow's
// Release, not for the clock). The rate limits are off: these tests race hundreds of requests from one
// address and one user, which is what the limits exist to refuse; the
// limits' own tests turn them on (NewLimited).
func New(t testing.TB, replicas int, vars map[string]string) *Env {
	t.Helper()
	return NewWith(t, replicas, vars, app.Deps{})
}

// NewWith is New with deps' variants (Variants, Events.Consumers) in
// every replica: the ablation matrices take layers off.
func NewWith(t testing.TB, replicas int, vars map[string]string, switches app.Deps) *Env {
	t.Helper()
	return NewThrough(t, replicas, vars, switches, nil)
}

// NewThrough is NewWith whose replicas reach the database through
// cutter (the checks' pool goes straight to it); nil is no cutter.
func NewThrough(t testing.TB, replicas int, vars map[string]string, switches app.Deps, cutter *testenv.CommitCutter) *Env {
	t.Helper()
	return build(t, spec{replicas: replicas, vars: vars, switches: switches, cutter: cutter})
}

// NewEach is NewWith with one replica for each of each: its variables
// override vars for that replica alone (replicas side by side on two key
// schemes, SHOP_KEY_SCHEME). Env.Cfg is the configuration vars alone make.
func NewEach(t testing.TB, vars map[string]string, each []map[string]string, switches app.Deps) *Env {
	t.Helper()
	return build(t, spec{replicas: len(each), vars: vars, each: each, switches: switches})
}

// spec is what an Env is built from: New's arguments, and what a Stack
// asks for besides (StackOptions).
type spec struct {
	replicas   int
	vars       map[string]string
	each       []map[string]string // per replica, over vars (NewEach)
	switches   app.Deps
	cutter     *testenv.CommitCutter
	names      []string // SHOP_REPLICA_NAME of each replica, in order
	labGateway bool     // a gateway of its own for the lab's live copy
	labMailer  bool     // and a mail provider of its own
}

// build starts the gateways and the replicas of s, each replica on its own
// pool and Redis clients.
func build(t testing.TB, s spec) *Env {
	t.Helper()
	replicas, vars, switches, cutter := s.replicas, s.vars, s.switches, s.cutter
	dbURL := testenv.DatabaseURL(t)
	replicaURL := dbURL
	if cutter != nil {
		replicaURL = cutter.URL(dbURL)
	}
	environ := map[string]string{
		"SHOP_DATABASE_URL":    dbURL,
		"SHOP_REDIS_ADDRS":     strings.Join(testenv.RedisAddrs(t), ","),
		"SHOP_ADMIN_TOKEN":     AdminToken,
		"SHOP_ORDER_TTL":       OrderTTL.String(),
		"SHOP_GATEWAY_TIMEOUT": "5s",
		"SHOP_RATE_LIMIT":      "off",
		// The tests share Redis: each Env's event streams are its own.
		"SHOP_EVENTS_PREFIX": "test:" + rand.Text() + ":events:",
	}
	maps.Copy(environ, vars)
	cfg, err := config.FromEnv(func(k string) string { return environ[k] })
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	slow := gatewaytest.NewHoldBack()
	gw, gwURL := gatewaytest.Start(t, gateway.Options{SlowDelay: cfg.GatewaySlowDelay, NoRefundLimit: cfg.GatewayNoRefundLimit,
		Sleep: slow.Sleep, Logger: Logger(t)})
	if vars["SHOP_GATEWAY_URL"] == "" {
		cfg.GatewayURL = gwURL
	}
	var mail *mailer.Server
	if vars["SHOP_MAILER_URL"] == "" {
		mail, cfg.MailerURL = mailertest.Start(t, mailer.Options{KeyTTL: cfg.MailerKeyTTL, Logger: Logger(t)})
	}
	var labGateway *gateway.Server
	if s.labGateway && vars["SHOP_LAB_GATEWAY_URL"] == "" {
		labGateway, cfg.LabGatewayURL = gatewaytest.Start(t, gateway.Options{SlowDelay: cfg.GatewaySlowDelay, Logger: Logger(t)})
	}
	var labMailer *mailer.Server
	if s.labMailer && vars["SHOP_LAB_MAILER_URL"] == "" {
		labMailer, cfg.LabMailerURL = mailertest.Start(t, mailer.Options{KeyTTL: cfg.MailerKeyTTL, Logger: Logger(t)})
	}

	logger := switches.Logger
	if logger == nil {
		logger = Logger(t)
	}
	transport := &http.Transport{MaxIdleConns: 128, MaxIdleConnsPerHost: 64, IdleConnTimeout: 30 * time.Second}
	checked := CheckedTransport(t, transport)
	// A service with defences taken off (a variant, or a constraint
	// dropped: Env.Drop) is broken on purpose: the 500s the ablation counts
	// (a constraint the missing layers let a write run into) are its
	// breakage, not a drift of the contract. Every other answer is still
	// checked.
	var broken atomic.Bool
	broken.Store(anyVariant(switches.Variants) || anyVariant(switches.Events.Consumers))
	checked.Skip = func(_ *http.Request, res *http.Response) bool {
		return broken.Load() && res.StatusCode == http.StatusInternalServerError
	}
	client := &http.Client{Transport: checked, Timeout: 30 * time.Second}
	t.Cleanup(transport.CloseIdleConnections)

	e := &Env{DB: testenv.PoolFor(t, dbURL), Clock: testenv.NewClock(), Gateway: gw, Slow: slow, LabGateway: labGateway, LabMailer: labMailer, Mailer: mail, Cfg: cfg,
		environ: environ, each: s.each, down: map[int]bool{}, broken: &broken}
	e.start = func(t testing.TB, c config.Config) *Replica {
		t.Helper()
		pool := testenv.PoolFor(t, replicaURL)
		clients := redisx.Clients(c.RedisAddrs)
		t.Cleanup(func() { _ = redisx.Close(clients) })
		deps := app.Deps{Pool: pool, Redis: clients, Logger: logger, Now: e.Clock.Now,
			Variants: switches.Variants, BlindSchemes: switches.BlindSchemes, Events: switches.Events,
			SpanProcessor: switches.SpanProcessor}
		a, err := app.New(c, deps)
		if err != nil {
			t.Fatalf("app.New: %v", err)
		}
		// A demo server's race lab, attached as `shop serve` attaches it.
		closeLab := func() {}
		if c.Demo {
			l, err := lab.Attach(a, c, deps)
			if err != nil {
				a.Close()
				t.Fatalf("lab.Attach: %v", err)
			}
			closeLab = l.Close
		}
		r := Serve(t, a, client)
		closeServers := r.stop
		r.stop = sync.OnceFunc(func() { closeServers(); closeLab(); a.Close() })
		t.Cleanup(r.stop)
		return r
	}
	for i := range replicas {
		c, err := e.config(i, nil)
		if err != nil {
			t.Fatalf("config of replica %d: %v", i, err)
		}
		if i < len(s.names) {
			c.ReplicaName = s.names[i]
		}
		e.cfgs = append(e.cfgs, c)
		e.Replicas = append(e.Replicas, e.start(t, c))
	}
	// Cleanups run last-in first-out: a test that ended while a slow
	// answer was held lets it go before the replicas and the gateway wait
	// for their requests to finish.
	t.Cleanup(slow.Release)
	return e
}

// SettleLeftovers runs the reconcilers once over payments and refunds a
// storm left processing, as every replica's would after the reconcile
// delay: on a
// loaded machine a payment may run out of its budget before its outcome
// is recorded (the database, or the gateway, did not answer in time), or
// a lease that could not be extended cancels the work after its charge,
// by design; its request answers 202 and leaves the outcome to the
// reconciler.
func (e *Env) SettleLeftovers(t *testing.T) {
	t.Helper()
	left := e.Count(t, `SELECT count(*) FROM payments WHERE status = 'processing'`)
	refunds := e.Count(t, `SELECT count(*) FROM refunds WHERE status = 'processing'`)
	if left == 0 && refunds == 0 {
		return
	}
	e.Clock.Advance(e.Cfg.ReconcileAfter + time.Second)
	if left > 0 {
		n, err := e.R(0).App.Payments.Reconcile(context.Background())
		if err != nil {
			t.Errorf("reconcile: %v", err)
		}
		t.Logf("%d payments were left processing; the reconciler settled %d", left, n)
	}
	if refunds > 0 {
		n, err := e.R(0).App.Refunds.Reconcile(context.Background())
		if err != nil {
			t.Errorf("reconcile refunds: %v", err)
		}
		t.Logf("%d refunds were left processing; the reconciler settled %d", refunds, n)
	}
}

// AssertBooks audits the orders and payments against the gateway's
// charges (package books) and fails the test unless they balance with
// nothing left in flight.
func (e *Env) AssertBooks(t *testing.T) {
	t.Helper()
	r, err := books.Check(context.Background(), e.DB, nil, e.Cfg.GatewayURL)
	switch {
	case err != nil:
		t.Fatalf("books: %v", err)
	case !r.OK() || r.InFlight != 0:
		t.Error(r)
	default:
		t.Log(r)
	}
}

// R returns replica i modulo their number, so loops spread requests; while
// one restarts (Restart), the next in rotation.
func (e *Env) R(i int) *Replica {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := len(e.Replicas)
	for j := range n {
		if k := (i + j) % n; !e.down[k] {
			return e.Replicas[k]
		}
	}
	return e.Replicas[i%n]
}

// config is replica i's configuration: the Env's environment, the
// replica's own variables (NewEach), then vars.
func (e *Env) config(i int, vars map[string]string) (config.Config, error) {
	own := maps.Clone(e.environ)
	if i < len(e.each) {
		maps.Copy(own, e.each[i])
	}
	maps.Copy(own, vars)
	c, err := config.FromEnv(func(k string) string { return own[k] })
	if err != nil {
		return c, err
	}
	c.GatewayURL, c.LabGatewayURL, c.MailerURL, c.LabMailerURL = e.Cfg.GatewayURL, e.Cfg.LabGatewayURL, e.Cfg.MailerURL, e.Cfg.LabMailerURL
	return c, nil
}

// Restart replaces replica i as a rolling update does: it leaves the
// rotation (R sends nothing more to it); after a moment, the preStop
// sleep in which a balancer stops sending, its servers close, waiting for
// the requests they hold (the drain), and its app closes; then a new
// replica starts with vars over the replica's configuration and takes its
// place.
func (e *Env) Restart(t testing.TB, i int, vars map[string]string) {
	t.Helper()
	c, err := e.config(i, vars)
	if err != nil {
		t.Fatalf("config of replica %d: %v", i, err)
	}
	c.ReplicaName = e.cfgs[i].ReplicaName
	e.mu.Lock()
	e.down[i] = true
	old := e.Replicas[i]
	e.mu.Unlock()
	time.Sleep(100 * time.Millisecond)
	old.stop()
	r := e.start(t, c)
	e.mu.Lock()
	e.Replicas[i], e.cfgs[i] = r, c
	delete(e.down, i)
	e.mu.Unlock()
}

// Logger sends the service's warnings and errors to the test log, and
// drops them once the test is over (a late log line would panic).
func Logger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(testLog(t, "service: "), &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// testLog writes each line to the test log after prefix, until the test
// is over.
func testLog(t testing.TB, prefix string) *logWriter {
	w := &logWriter{t: t, prefix: prefix}
	t.Cleanup(w.stop) // registered first, so it runs after the servers close
	return w
}

type logWriter struct {
	mu     sync.Mutex
	t      testing.TB
	prefix string
	done   bool
}

func (w *logWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(w.prefix + strings.TrimSpace(string(p)))
	}
	return len(p), nil
}

func (w *logWriter) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.done = true
}

// Count runs a query that returns one integer.
func (e *Env) Count(t testing.TB, query string, args ...any) int {
	t.Helper()
	var n int
	if err := e.DB.QueryRow(context.Background(), query, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

// Stock reads a product's stock_available from the database.
func (e *Env) Stock(t testing.TB, sku string) int {
	t.Helper()
	return e.Count(t, `SELECT stock_available FROM products WHERE sku = $1`, sku)
}

// Warm opens conns keep-alive connections to every replica, and as many
// database connections in its pool (/readyz pings Postgres), so that
// requests released by a barrier race each other, not the handshakes.
func (e *Env) Warm(t testing.TB, conns int) {
	t.Helper()
	for _, r := range e.Replicas {
		testenv.Together(conns, func(int) { r.Do(t, http.MethodGet, "/readyz", "", nil) })
	}
}

// InParallel calls fn(i) for every i in [0, n) from a pool of workers.
func InParallel(n, workers int, fn func(i int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(workers, n) {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				fn(i)
			}
		})
	}
	wg.Wait()
}

// anyVariant reports whether v takes any layer off: any of its steps set.
func anyVariant(v app.Variants) bool {
	rv := reflect.ValueOf(v)
	for i := range rv.NumField() {
		if f := rv.Field(i); f.Kind() == reflect.Func && !f.IsNil() {
			return true
		}
	}
	return false
}
