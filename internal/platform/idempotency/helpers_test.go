package idempotency

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"
	dto "github.com/prometheus/client_model/go"

	"github.com/shop-example/shop/internal/platform/auth"
	"github.com/shop-example/shop/internal/platform/httpx"
	"github.com/shop-example/shop/internal/platform/metrics"
	"github.com/shop-example/shop/internal/platform/problem"
	"github.com/shop-example/shop/internal/platform/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

const (
	route        = "/v1/things/:id" // guarded by the middleware
	plainRoute   = "/v1/plain/:id"  // the same handler without it
	headerUser   = "X-Test-User"    // becomes the principal
	headerAct    = "X-Test-Act"     // what the handler does; not part of the fingerprint
	testDeadline = 10 * time.Second
)

// clock is the injected time; tests move it to expire leases.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// harness is an echo server with the middleware in front of a handler that
// counts its runs and answers with a fresh random nonce, so a replay is
// told apart from a second run by its bytes.
type harness struct {
	db      *pgxpool.Pool
	clock   *clock
	metrics *metrics.Metrics
	store   *Store
	srv     *httptest.Server
	runs    atomic.Int64

	started chan struct{} // the "block" act says it is running
	unblock chan struct{} // and waits for this
	served  chan struct{} // one value each time a "block" or "wait_for_hangup" request has left the middleware
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	h := &harness{
		db:      testenv.Pool(t),
		clock:   &clock{now: time.Now().UTC()},
		metrics: metrics.New(),
		started: make(chan struct{}, 100),
		unblock: make(chan struct{}),
		served:  make(chan struct{}, 100),
	}
	h.store = NewStore(h.db, Options{Logger: logger, Metrics: h.metrics, Now: h.clock.Now})
	e := httpx.New(h.metrics, httpx.Options{Logger: logger})
	e.POST(route, h.handle, h.principal, h.store.Middleware)
	e.PUT(route, h.handle, h.principal, h.store.Middleware)
	e.POST(plainRoute, h.handle, h.principal)
	h.srv = httptest.NewServer(e)
	t.Cleanup(h.srv.Close)
	return h
}

// principal stands in for the auth middleware: the caller is whoever
// X-Test-User names.
func (h *harness) principal(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if act := c.Request().Header.Get(headerAct); act == "block" || act == "wait_for_hangup" {
			defer func() { h.served <- struct{}{} }()
		}
		if user := c.Request().Header.Get(headerUser); user != "" {
			ctx := auth.WithPrincipal(c.Request().Context(), auth.Principal{UserID: user, Name: user})
			c.SetRequest(c.Request().WithContext(ctx))
		}
		return next(c)
	}
}

func (h *harness) handle(c echo.Context) error {
	run := h.runs.Add(1)
	body, err := io.ReadAll(c.Request().Body)
	if err != nil {
		return err
	}
	switch c.Request().Header.Get(headerAct) {
	case "fail":
		return errors.New("boom")
	case "panic":
		panic("boom")
	case "busy":
		return &problem.Error{Code: problem.ResourceBusy, Detail: "thing:1 is locked", RetryAfter: 2 * time.Second}
	case "rate_limited":
		return &problem.Error{Code: problem.RateLimited, RetryAfter: time.Second}
	case "out_of_stock":
		return problem.New(problem.OutOfStock, "SKU-1: 0 available, 2 requested")
	case "sleep":
		time.Sleep(200 * time.Millisecond)
	case "block":
		h.started <- struct{}{}
		<-h.unblock
	case "wait_for_hangup":
		h.started <- struct{}{}
		<-c.Request().Context().Done()
		return c.Request().Context().Err()
	}
	c.Response().Header().Set(echo.HeaderLocation, "/v1/things/"+c.Param("id"))
	c.Response().Header().Set("ETag", fmt.Sprintf(`"%d"`, run))
	return httpx.JSON(c, http.StatusCreated, map[string]any{
		"run": run, "nonce": nonce(), "body": string(body),
	})
}

// request is what a test sends; the zero value is a POST to /v1/things/1
// by alice with no key.
type request struct {
	method, path, user, key, body, act string
	noUser                             bool
	ctx                                context.Context
}

// reply is what came back.
type reply struct {
	status int
	header http.Header
	body   []byte
}

func (r reply) replayed() bool { return r.header.Get(HeaderReplayed) == "true" }

// code is the "code" member of a problem document, or "".
func (r reply) code() string {
	var doc struct{ Code string }
	_ = json.Unmarshal(r.body, &doc)
	return doc.Code
}

func (h *harness) send(r request) (reply, error) {
	if r.method == "" {
		r.method = http.MethodPost
	}
	if r.path == "" {
		r.path = "/v1/things/1"
	}
	if r.user == "" && !r.noUser {
		r.user = "alice"
	}
	if r.ctx == nil {
		r.ctx = context.Background()
	}
	req, err := http.NewRequestWithContext(r.ctx, r.method, h.srv.URL+r.path, strings.NewReader(r.body))
	if err != nil {
		return reply{}, err
	}
	req.Header.Set(echo.HeaderContentType, echo.MIMEApplicationJSON)
	if r.key != "" {
		req.Header.Set(HeaderKey, r.key)
	}
	if r.user != "" {
		req.Header.Set(headerUser, r.user)
	}
	if r.act != "" {
		req.Header.Set(headerAct, r.act)
	}
	return do(h.srv.Client(), req)
}

func do(client *http.Client, req *http.Request) (reply, error) {
	res, err := client.Do(req)
	if err != nil {
		return reply{}, err
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		return reply{}, err
	}
	return reply{status: res.StatusCode, header: res.Header, body: body}, nil
}

func (h *harness) mustSend(t *testing.T, r request) reply {
	t.Helper()
	rep, err := h.send(r)
	if err != nil {
		t.Fatalf("%s %s: %v", r.method, r.path, err)
	}
	return rep
}

// wait receives from ch or fails the test after testDeadline.
func wait(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(testDeadline):
		t.Fatalf("timed out waiting for %s", what)
	}
}

// keyRow is a row of idempotency_keys.
type keyRow struct {
	status    *int
	body      []byte
	completed bool
}

func (h *harness) rows(t *testing.T) map[string]keyRow {
	t.Helper()
	rows, err := h.db.Query(context.Background(),
		`SELECT principal, key, status_code, body, completed_at IS NOT NULL FROM idempotency_keys`)
	if err != nil {
		t.Fatalf("select keys: %v", err)
	}
	defer rows.Close()
	out := map[string]keyRow{}
	for rows.Next() {
		var principal, key string
		var r keyRow
		if err := rows.Scan(&principal, &key, &r.status, &r.body, &r.completed); err != nil {
			t.Fatalf("scan key: %v", err)
		}
		out[principal+"/"+key] = r
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("select keys: %v", err)
	}
	return out
}

// counter reads a counter's value; labels are name, value pairs.
func counter(t *testing.T, h *harness, name string, labels ...string) float64 {
	t.Helper()
	families, err := h.metrics.Registry.Gather()
	if err != nil {
		t.Fatalf("gather metrics: %v", err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if hasLabels(m, labels) {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

func hasLabels(m *dto.Metric, labels []string) bool {
	for i := 0; i+1 < len(labels); i += 2 {
		found := false
		for _, l := range m.GetLabel() {
			if l.GetName() == labels[i] && l.GetValue() == labels[i+1] {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}

func nonce() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
