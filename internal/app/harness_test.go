package app_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shop-example/shop/internal/app"
	"github.com/shop-example/shop/internal/books"
	"github.com/shop-example/shop/internal/gateway"
	"github.com/shop-example/shop/internal/gateway/gatewaytest"
	"github.com/shop-example/shop/internal/platform/config"
	"github.com/shop-example/shop/internal/platform/contract"
	"github.com/shop-example/shop/internal/platform/redisx"
	"github.com/shop-example/shop/internal/platform/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

const (
	testAdminToken = "test-admin-token"
	// orderTTL is SHOP_ORDER_TTL in these tests; the clock is moved past it.
	orderTTL = 15 * time.Minute
)

// env is N replicas of the service on one database and one lock quorum,
// as docker compose runs them, with a payment gateway reached over HTTP,
// plus a direct pool for checking invariants.
type env struct {
	db       *pgxpool.Pool
	clock    *testenv.Clock // shared by every replica; it runs with real time, so lists sort by it
	gateway  *gateway.Server
	slow     *gatewaytest.HoldBack // the gateway's pm_card_slow answers wait for its Release
	cfg      config.Config
	replicas []*replica
}

// replica is one app.New with its own pool, Redis clients and HTTP
// servers: the API's and the metrics'.
type replica struct {
	app        *app.App
	url        string
	metricsURL string
	// client checks every exchange against docs/openapi.yaml
	// (checkedTransport); scrapes go around it, /metrics being the
	// metrics listener's and no part of the API.
	client *http.Client
	// breach, when set, is why the requests of this copy of the replica
	// break the contract on purpose (offContract).
	breach string
}

// serveReplica serves a's API and metrics on servers of their own, as
// `shop serve` does, closed when the test ends.
func serveReplica(t testing.TB, a *app.App, client *http.Client) *replica {
	t.Helper()
	srv := httptest.NewServer(a.Echo)
	t.Cleanup(srv.Close)
	metrics := httptest.NewServer(a.MetricsHandler())
	t.Cleanup(metrics.Close)
	return &replica{app: a, url: srv.URL, metricsURL: metrics.URL, client: client}
}

// newEnv builds replicas of the service on a fresh database, and a
// gateway of their own. vars override the service's environment
// (SHOP_ADMIN_TOKEN is the test token unless overridden, SHOP_ORDER_TTL is
// orderTTL, SHOP_GATEWAY_SLOW_DELAY sets the window of the gateway's
// hold-back; a pm_card_slow answer inside it waits for env.slow's
// Release, not for the clock). The rate limits are off: these tests race hundreds of requests from one
// address and one user, which is what the limits exist to refuse; the
// limits' own tests turn them on (limitedEnv).
func newEnv(t *testing.T, replicas int, vars map[string]string) *env {
	t.Helper()
	return newEnvWith(t, replicas, vars, app.Deps{})
}

// newEnvWith is newEnv with the layer switches of deps (Layers,
// NaiveStock) in every replica: the ablation matrices take layers off.
func newEnvWith(t *testing.T, replicas int, vars map[string]string, switches app.Deps) *env {
	t.Helper()
	return newEnvThrough(t, replicas, vars, switches, nil)
}

// newEnvThrough is newEnvWith whose replicas reach the database through
// cutter (the checks' pool goes straight to it); nil is no cutter.
func newEnvThrough(t *testing.T, replicas int, vars map[string]string, switches app.Deps, cutter *testenv.CommitCutter) *env {
	t.Helper()
	dbURL := testenv.DatabaseURL(t)
	replicaURL := dbURL
	if cutter != nil {
		replicaURL = cutter.URL(dbURL)
	}
	environ := map[string]string{
		"SHOP_DATABASE_URL":    dbURL,
		"SHOP_REDIS_ADDRS":     strings.Join(testenv.RedisAddrs(t), ","),
		"SHOP_ADMIN_TOKEN":     testAdminToken,
		"SHOP_ORDER_TTL":       orderTTL.String(),
		"SHOP_GATEWAY_TIMEOUT": "5s",
		"SHOP_RATE_LIMIT":      "off",
	}
	maps.Copy(environ, vars)
	cfg, err := config.FromEnv(func(k string) string { return environ[k] })
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	slow := gatewaytest.NewHoldBack()
	gw, gwURL := gatewaytest.Start(t, gateway.Options{SlowDelay: cfg.GatewaySlowDelay, Sleep: slow.Sleep, Logger: testLogger(t)})
	if vars["SHOP_GATEWAY_URL"] == "" {
		cfg.GatewayURL = gwURL
	}

	logger := switches.Logger
	if logger == nil {
		logger = testLogger(t)
	}
	transport := &http.Transport{MaxIdleConns: 128, MaxIdleConnsPerHost: 64, IdleConnTimeout: 30 * time.Second}
	checked := checkedTransport(t, transport)
	if len(switches.Layers.Taken()) > 0 {
		// A service with defences taken off is broken on purpose: the
		// 500s the ablation counts (a constraint the missing layers let a
		// write run into) are its breakage, not a drift of the contract.
		// Every other answer is still checked.
		checked.Skip = func(_ *http.Request, res *http.Response) bool {
			return res.StatusCode == http.StatusInternalServerError
		}
	}
	client := &http.Client{Transport: checked, Timeout: 30 * time.Second}
	t.Cleanup(transport.CloseIdleConnections)

	e := &env{db: testenv.PoolFor(t, dbURL), clock: testenv.NewClock(), gateway: gw, slow: slow, cfg: cfg}
	for range replicas {
		pool := testenv.PoolFor(t, replicaURL)
		clients := redisx.Clients(cfg.RedisAddrs)
		t.Cleanup(func() { _ = redisx.Close(clients) })
		a, err := app.New(cfg, app.Deps{Pool: pool, Redis: clients, Logger: logger, Now: e.clock.Now,
			Layers: switches.Layers, NaiveStock: switches.NaiveStock})
		if err != nil {
			t.Fatalf("app.New: %v", err)
		}
		t.Cleanup(a.Close)
		e.replicas = append(e.replicas, serveReplica(t, a, client))
	}
	// Cleanups run last-in first-out: a test that ended while a slow
	// answer was held lets it go before the replicas and the gateway wait
	// for their requests to finish.
	t.Cleanup(slow.Release)
	return e
}

// settleLeftovers runs the reconciler once over payments a storm left
// processing, as every replica's would after the reconcile delay: on a
// loaded machine a payment may run out of its budget before its outcome
// is recorded (the database, or the gateway, did not answer in time), or
// a lease that could not be extended cancels the work after its charge,
// by design; its request answers 202 and leaves the outcome to the
// reconciler.
func (e *env) settleLeftovers(t *testing.T) {
	t.Helper()
	left := e.count(t, `SELECT count(*) FROM payments WHERE status = 'processing'`)
	if left == 0 {
		return
	}
	e.clock.Advance(e.cfg.ReconcileAfter + time.Second)
	n, err := e.r(0).app.Payments.Reconcile(context.Background())
	if err != nil {
		t.Errorf("reconcile: %v", err)
	}
	t.Logf("%d payments were left processing; the reconciler settled %d", left, n)
}

// assertBooks audits the orders and payments against the gateway's
// charges (package books) and fails the test unless they balance with
// nothing left in flight.
func (e *env) assertBooks(t *testing.T) {
	t.Helper()
	r, err := books.Check(context.Background(), e.db, nil, e.cfg.GatewayURL)
	switch {
	case err != nil:
		t.Fatalf("books: %v", err)
	case !r.OK() || r.InFlight != 0:
		t.Error(r)
	default:
		t.Log(r)
	}
}

// scrape returns the replica's metrics, from its metrics listener.
func scrape(t testing.TB, r *replica) string {
	t.Helper()
	res, err := (&http.Client{Transport: unchecked(r.client.Transport)}).Get(r.metricsURL + "/metrics")
	if err != nil {
		t.Fatalf("scrape: %v", err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("scrape: %d %s (%v)", res.StatusCode, b, err)
	}
	return string(b)
}

// r returns replica i modulo their number, so loops spread requests.
func (e *env) r(i int) *replica { return e.replicas[i%len(e.replicas)] }

// testLogger sends the service's warnings and errors to the test log, and
// drops them once the test is over (a late log line would panic).
func testLogger(t *testing.T) *slog.Logger {
	w := &testLogWriter{t: t}
	t.Cleanup(w.stop) // registered first, so it runs after the servers close
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type testLogWriter struct {
	mu   sync.Mutex
	t    *testing.T
	done bool
}

func (w *testLogWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log("service: " + strings.TrimSpace(string(p)))
	}
	return len(p), nil
}

func (w *testLogWriter) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.done = true
}

// response is what a request got back.
type response struct {
	Status int
	Header http.Header
	Body   []byte
}

// problemDoc is an RFC 9457 error body.
type problemDoc struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Code   string `json:"code"`
	Detail string `json:"detail"`
}

// problem decodes the error body; the zero value if it is not one.
func (r response) problem() problemDoc {
	var p problemDoc
	_ = json.Unmarshal(r.Body, &p)
	return p
}

// code is the problem code of an error answer.
func (r response) code() string { return r.problem().Code }

func (r response) String() string {
	return fmt.Sprintf("%d %s", r.Status, bytes.TrimSpace(r.Body))
}

// do sends a request to the replica. token, if set, goes in a bearer
// Authorization header; header holds more name/value pairs. body is sent
// as is when it is []byte, string or io.Reader (a reader is sent chunked,
// without Content-Length), JSON-encoded otherwise, and not at all when nil.
//
// Every error answer is checked against the problem+json contract on the
// way. do is safe to call from goroutines: a request that fails is reported
// with t.Errorf and comes back with Status 0.
func (r *replica) do(t testing.TB, method, path, token string, body any, header ...string) response {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		rd = bytes.NewReader(b)
	case string:
		rd = strings.NewReader(b)
	case io.Reader:
		rd = b
	default:
		enc, err := json.Marshal(b)
		if err != nil {
			t.Errorf("encode body: %v", err)
			return response{}
		}
		rd = bytes.NewReader(enc)
	}
	ctx := contract.WithReporter(context.Background(), t)
	if r.breach != "" {
		ctx = contract.OffContract(ctx, r.breach)
	}
	req, err := http.NewRequestWithContext(ctx, method, r.url+path, rd)
	if err != nil {
		t.Errorf("%s %s: %v", method, path, err)
		return response{}
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if len(header)%2 != 0 {
		t.Errorf("do: header pairs: odd count %d", len(header))
		return response{}
	}
	for i := 0; i < len(header); i += 2 {
		req.Header.Add(header[i], header[i+1])
	}
	res, err := r.client.Do(req)
	if err != nil {
		t.Errorf("%s %s: %v", method, path, err)
		return response{}
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Errorf("%s %s: read body: %v", method, path, err)
		return response{}
	}
	out := response{Status: res.StatusCode, Header: res.Header, Body: b}
	if out.Status >= 400 {
		checkProblem(t, method+" "+path, out)
	}
	checkHeaders(t, method+" "+path, out)
	return out
}

// checkHeaders checks the headers API.md promises on every answer:
// nosniff everywhere, no-store on the API, a Location on every 201.
func checkHeaders(t testing.TB, what string, r response) {
	t.Helper()
	if got := r.Header.Get("X-Content-Type-Options"); got != "nosniff" {
		t.Errorf("%s: %d answered with X-Content-Type-Options %q, want nosniff", what, r.Status, got)
	}
	if got := r.Header.Get("Cache-Control"); got != "no-store" {
		t.Errorf("%s: %d answered with Cache-Control %q, want no-store", what, r.Status, got)
	}
	if r.Status == http.StatusCreated && r.Header.Get("Location") == "" {
		t.Errorf("%s: 201 without a Location", what)
	}
}

// retryAfterCodes are the codes whose answers must carry Retry-After.
var retryAfterCodes = map[string]bool{
	"request_in_progress": true, "resource_busy": true, "rate_limited": true, "unavailable": true,
}

// checkProblem checks an error answer against API.md, "Errors": an
// application/problem+json body with type, title, status and a code, and
// Retry-After where the code promises one.
func checkProblem(t testing.TB, what string, r response) {
	t.Helper()
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/problem+json") {
		t.Errorf("%s: %d answered with Content-Type %q, want application/problem+json", what, r.Status, ct)
	}
	var p problemDoc
	if err := json.Unmarshal(r.Body, &p); err != nil {
		t.Errorf("%s: %d body is not a problem document: %v: %s", what, r.Status, err, r.Body)
		return
	}
	if p.Code == "" || p.Type == "" || p.Title == "" || p.Status != r.Status {
		t.Errorf("%s: problem document lacks code, type, title or the right status (%d): %s", what, r.Status, r.Body)
	}
	if retryAfterCodes[p.Code] {
		if n, err := strconv.Atoi(r.Header.Get("Retry-After")); err != nil || n < 1 {
			t.Errorf("%s: %s without a Retry-After of whole seconds (got %q)", what, p.Code, r.Header.Get("Retry-After"))
		}
	}
}

// wantStatus fails the test unless r has the status.
func wantStatus(t testing.TB, r response, status int) {
	t.Helper()
	if r.Status != status {
		t.Fatalf("got %s, want %d", r, status)
	}
}

// wantProblem fails the test unless r is an error answer with the status
// and code.
func wantProblem(t testing.TB, r response, status int, code string) {
	t.Helper()
	if r.Status != status || r.code() != code {
		t.Fatalf("got %s, want %d %s", r, status, code)
	}
}

// decode decodes a JSON answer into a T.
func decode[T any](t testing.TB, r response) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(r.Body, &v); err != nil {
		t.Fatalf("decode %T from %s: %v", v, r, err)
	}
	return v
}

// newKey returns a fresh Idempotency-Key.
func newKey() string { return rand.Text() }

// The JSON shapes of API.md.
type (
	user struct {
		ID    string `json:"id"`
		Name  string `json:"name"`
		Token string `json:"token"`
	}
	product struct {
		SKU            string `json:"sku"`
		Name           string `json:"name"`
		PriceCents     int64  `json:"price_cents"`
		StockAvailable int    `json:"stock_available"`
		Version        int64  `json:"version"`
	}
	page[T any] struct {
		Items      []T     `json:"items"`
		NextCursor *string `json:"next_cursor"`
	}
	line struct {
		SKU      string `json:"sku"`
		Quantity int    `json:"quantity"`
	}
	orderItem struct {
		SKU            string `json:"sku"`
		Quantity       int    `json:"quantity"`
		UnitPriceCents int64  `json:"unit_price_cents"`
	}
	order struct {
		ID         string      `json:"id"`
		Status     string      `json:"status"`
		Items      []orderItem `json:"items"`
		TotalCents int64       `json:"total_cents"`
		Version    int64       `json:"version"`
		CreatedAt  string      `json:"created_at"`
		ExpiresAt  string      `json:"expires_at"`
	}
)

// orderBody is the body of POST /v1/orders.
func orderBody(lines ...line) map[string]any { return map[string]any{"items": lines} }

func mustCreateUser(t testing.TB, r *replica, name string) user {
	t.Helper()
	res := r.do(t, http.MethodPost, "/v1/users", "", map[string]string{"name": name})
	wantStatus(t, res, http.StatusCreated)
	u := decode[user](t, res)
	if u.ID == "" || u.Token == "" || u.Name != name {
		t.Fatalf("POST /v1/users: want id, name %q and token, got %s", name, res.Body)
	}
	return u
}

func mustCreateProduct(t testing.TB, r *replica, sku string, priceCents int64, stock int) product {
	t.Helper()
	res := r.do(t, http.MethodPost, "/v1/products", testAdminToken,
		map[string]any{"sku": sku, "name": "Product " + sku, "price_cents": priceCents, "stock": stock})
	wantStatus(t, res, http.StatusCreated)
	return decode[product](t, res)
}

func mustCreateOrder(t testing.TB, r *replica, token string, lines ...line) order {
	t.Helper()
	res := r.do(t, http.MethodPost, "/v1/orders", token, orderBody(lines...), "Idempotency-Key", newKey())
	wantStatus(t, res, http.StatusCreated)
	return decode[order](t, res)
}

// count runs a query that returns one integer.
func (e *env) count(t testing.TB, query string, args ...any) int {
	t.Helper()
	var n int
	if err := e.db.QueryRow(context.Background(), query, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

// stock reads a product's stock_available from the database.
func (e *env) stock(t testing.TB, sku string) int {
	t.Helper()
	return e.count(t, `SELECT stock_available FROM products WHERE sku = $1`, sku)
}

// warm opens conns keep-alive connections to every replica, and as many
// database connections in its pool (/readyz pings Postgres), so that
// requests released by a barrier race each other, not the handshakes.
func (e *env) warm(t testing.TB, conns int) {
	t.Helper()
	for _, r := range e.replicas {
		testenv.Together(conns, func(int) { r.do(t, http.MethodGet, "/readyz", "", nil) })
	}
}

// inParallel calls fn(i) for every i in [0, n) from a pool of workers.
func inParallel(n, workers int, fn func(i int)) {
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

// checkedTransport sends through next and checks every request and answer
// against docs/openapi.yaml (package contract), failing the test that sent
// the request on a mismatch.
func checkedTransport(t testing.TB, next http.RoundTripper) *contract.Transport {
	t.Helper()
	spec, err := contract.Load()
	if err != nil {
		t.Fatalf("openapi: %v", err)
	}
	return &contract.Transport{Spec: spec, Next: next, Report: t}
}

// unchecked returns the transport a checked one sends through.
func unchecked(rt http.RoundTripper) http.RoundTripper {
	if c, ok := rt.(*contract.Transport); ok && c.Next != nil {
		return c.Next
	}
	return rt
}

// offContract returns a copy of the replica whose requests break the API's
// contract on purpose, for the reason why (a hostile-input test sending
// invalid JSON, a missing header, an unknown route). Their answers are still
// checked against docs/openapi.yaml and must be 4xx refusals; a request so
// marked that the document admits fails the test, so marks stay narrow.
// An empty why is no mark: r itself, held to the contract (table tests mark
// only their hostile cases).
func (r *replica) offContract(why string) *replica {
	if why == "" {
		return r
	}
	c := *r
	c.breach = why
	return &c
}
