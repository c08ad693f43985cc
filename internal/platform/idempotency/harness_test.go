package idempotency

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"

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
	headerGate   = "X-Test-Gate"    // the gate the handler waits at first
	testDeadline = 10 * time.Second
)

// harness is an echo server with the middleware in front of a handler that
// counts its runs and answers with a fresh random nonce, so a replay is
// told apart from a second run by its bytes.
type harness struct {
	db      *pgxpool.Pool
	clock   *testenv.Clock
	metrics *metrics.Metrics
	store   *Store
	srv     *httptest.Server
	runs    atomic.Int64

	// crowd is how many copies of a request race (race sets it). A
	// handler told to "wait_for_crowd" runs until the crowd is in: every
	// copy running too (no idempotency layer), or every other copy told
	// the key is in progress.
	crowd    atomic.Int64
	crowding atomic.Int64 // handlers waiting for the crowd
	refused  atomic.Int64 // answers 409 request_in_progress

	mu    sync.Mutex
	gates map[string]*gate
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	return newHarnessWith(t, Options{})
}

// newHarnessWith is newHarness with the store's options set from opts
// (its logger, metrics and clock are the harness's own).
func newHarnessWith(t *testing.T, opts Options) *harness {
	t.Helper()
	return newHarnessOn(t, testenv.Pool(t), opts)
}

// newHarnessOn is newHarnessWith on the pool db.
func newHarnessOn(t *testing.T, db *pgxpool.Pool, opts Options) *harness {
	t.Helper()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	h := &harness{
		db:      db,
		clock:   testenv.NewFrozenClock(),
		metrics: metrics.New(),
		gates:   map[string]*gate{},
	}
	opts.Logger, opts.Metrics, opts.Now = logger, h.metrics, h.clock.Now
	h.store = NewStore(h.db, opts)
	e := httpx.New(h.metrics, httpx.Options{Logger: logger})
	e.POST(route, h.handle, h.principal, h.store.Middleware)
	e.PUT(route, h.handle, h.principal, h.store.Middleware)
	e.POST(plainRoute, h.handle, h.principal)
	h.srv = httptest.NewServer(e)
	t.Cleanup(h.srv.Close)
	// Cleanups run last-in first-out: a test that failed while a handler
	// waited at a gate lets it go before Close waits for it.
	t.Cleanup(func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		for _, g := range h.gates {
			g.release()
		}
	})
	return h
}

// gate holds one request's handler until the test lets it through, so a
// test can order what two requests with one key do.
type gate struct {
	started  chan struct{} // closed when the handler reaches the gate
	open     chan struct{} // closed to let it through
	done     chan struct{} // closed when the request has left the middleware
	openOnce sync.Once
}

func (g *gate) release() { g.openOnce.Do(func() { close(g.open) }) }

// gate returns the gate called name, made on first use.
func (h *harness) gate(name string) *gate {
	h.mu.Lock()
	defer h.mu.Unlock()
	g, ok := h.gates[name]
	if !ok {
		g = &gate{started: make(chan struct{}), open: make(chan struct{}), done: make(chan struct{})}
		h.gates[name] = g
	}
	return g
}

// principal stands in for the auth middleware: the caller is whoever
// X-Test-User names.
func (h *harness) principal(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if name := c.Request().Header.Get(headerGate); name != "" {
			defer close(h.gate(name).done)
		}
		if user := c.Request().Header.Get(headerUser); user != "" {
			ctx := auth.WithPrincipal(c.Request().Context(), auth.Principal{UserID: user, Name: user})
			c.SetRequest(c.Request().WithContext(ctx))
		}
		err := next(c)
		if problem.CodeOf(err) == problem.RequestInProgress {
			h.refused.Add(1)
		}
		return err
	}
}

func (h *harness) handle(c echo.Context) error {
	run := h.runs.Add(1)
	body, err := io.ReadAll(c.Request().Body)
	if err != nil {
		return err
	}
	act := c.Request().Header.Get(headerAct)
	if name := c.Request().Header.Get(headerGate); name != "" {
		g := h.gate(name)
		close(g.started)
		if act == "wait_for_hangup" {
			<-c.Request().Context().Done()
			return c.Request().Context().Err()
		}
		<-g.open
	}
	switch act {
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
	case "wait_for_crowd":
		// The other copies arrive while it runs, however loaded the
		// machine: it waits for them, not for a time that might be too
		// short. The deadline only ends a test that is failing anyway.
		h.crowding.Add(1)
		deadline := time.Now().Add(testDeadline)
		for h.crowding.Load() < h.crowd.Load() && h.refused.Load() < h.crowd.Load()-1 && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
	}
	c.Response().Header().Set(echo.HeaderLocation, "/v1/things/"+c.Param("id"))
	c.Response().Header().Set("ETag", fmt.Sprintf(`"%d"`, run))
	return httpx.JSON(c, http.StatusCreated, map[string]any{"run": run, "nonce": nonce(), "body": string(body)})
}

func nonce() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
