package idempotency

import (
	"bytes"
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

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"

	"github.com/shop-example/shop/harness/testenv"
	"github.com/shop-example/shop/internal/platform/auth"
	"github.com/shop-example/shop/internal/platform/httpx"
	"github.com/shop-example/shop/internal/platform/metrics"
	"github.com/shop-example/shop/internal/platform/postgres"
	"github.com/shop-example/shop/internal/platform/problem"
)

func TestMain(m *testing.M) { testenv.Main(m) }

const (
	atomicRoute  = "/v1/atomic/:id" // guarded by Atomic
	plainRoute   = "/v1/plain/:id"  // the same flow without it
	otherRoute   = "/v1/other/:id"  // another operation under Atomic
	atomicFlow   = "atomic_thing"   // its flow name in the conflict counter
	headerUser   = "X-Test-User"    // becomes the principal
	headerAct    = "X-Test-Act"     // what the flow does; not part of the fingerprint
	headerGate   = "X-Test-Gate"    // the gate the flow waits at
	testDeadline = 10 * time.Second

	// sqlEffect is the flow's side effect: one row per run that committed.
	sqlEffect       = `INSERT INTO effects (principal, key, run) VALUES ($1, $2, $3)`
	sqlEffectsTable = `CREATE TABLE effects (principal text NOT NULL, key text NOT NULL, run bigint NOT NULL)`
)

// harness is an echo server with a route under Atomic, whose handler
// runs a flow in the atomic phases: in its transaction it claims the key,
// writes a row of effects and completes the key. It counts its runs and
// answers with a fresh random nonce, so a replay is told apart from a
// second run by its bytes. flowDB is the pool of the flow's transactions;
// the store's own statements go to db.
type harness struct {
	// claimWaits takes the try-lock out of the flows' claim
	// (claimWithoutTryLock).
	claimWaits bool
	db         *pgxpool.Pool
	flowDB     *pgxpool.Pool
	clock      *testenv.Clock
	metrics    *metrics.Metrics
	store      *Store
	srv        *httptest.Server
	runs       atomic.Int64
	stale      atomic.Int64 // second phases that found the key taken over
	logs       *logBuffer   // the store's and the edge's log, as JSON lines

	// crowd is how many copies of a request race (race sets it). A flow
	// told to "wait_for_crowd" waits after its claim until the crowd is
	// in: every copy waiting too (no idempotency layer), or every other
	// copy told the key is in progress.
	crowd    atomic.Int64
	crowding atomic.Int64 // flows waiting for the crowd
	refused  atomic.Int64 // answers 409 request_in_progress

	mu    sync.Mutex
	gates map[string]*gate
}

// newHarness builds it on one fresh database, whose pool is both the
// store's and the flow's, with the store's options set from opts (its
// logger, metrics and clock are the harness's own).
func newHarness(t *testing.T, opts Options) *harness {
	t.Helper()
	db := testenv.Pool(t)
	return newHarnessOn(t, db, db, opts)
}

// newHarnessOn builds it with the store on db and the flow on flowDB,
// two pools of one database.
func newHarnessOn(t *testing.T, db, flowDB *pgxpool.Pool, opts Options) *harness {
	t.Helper()
	if _, err := db.Exec(context.Background(), sqlEffectsTable); err != nil {
		t.Fatalf("create effects: %v", err)
	}
	return harnessOn(t, db, flowDB, opts)
}

// beside builds another harness on h's database, with its own store
// (opts), metrics and clock: a second replica.
func (h *harness) beside(t *testing.T, opts Options) *harness {
	t.Helper()
	return harnessOn(t, h.db, h.flowDB, opts)
}

func harnessOn(t *testing.T, db, flowDB *pgxpool.Pool, opts Options) *harness {
	t.Helper()
	logs := &logBuffer{}
	logger := slog.New(slog.NewJSONHandler(logs, nil))
	h := &harness{
		logs:    logs,
		db:      db,
		flowDB:  flowDB,
		clock:   testenv.NewFrozenClock(),
		metrics: metrics.New(),
		gates:   map[string]*gate{},
	}
	opts.Logger, opts.Metrics, opts.Now = logger, h.metrics, h.clock.Now
	h.store = NewStore(db, opts)
	e := httpx.New(h.metrics, httpx.Options{Logger: logger})
	e.POST(atomicRoute, h.handle, h.principal, h.store.Atomic(atomicFlow))
	e.PUT(atomicRoute, h.handle, h.principal, h.store.Atomic(atomicFlow))
	e.POST(plainRoute, h.handle, h.principal)
	e.POST(otherRoute, h.handle, h.principal, h.store.Atomic("other_thing"))
	h.srv = httptest.NewServer(e)
	t.Cleanup(h.srv.Close)
	// Cleanups run last-in first-out: a test that failed while a flow
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

// gate holds one request's flow until the test lets it through, so a
// test can order what two requests with one key do.
type gate struct {
	started  chan struct{}   // closed when the flow reaches the gate
	ctx      context.Context // the request's context on the server, set before started is closed
	open     chan struct{}   // closed to let it through
	done     chan struct{}   // closed when the request has left the middleware
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

// handle is the flow. What it does is X-Test-Act:
//
//	""             claim, effect, complete, in one transaction (Claim, Complete)
//	"batched"      the same with the claim sent with BEGIN and the
//	               completion with the effect and COMMIT (QueueClaim,
//	               QueueComplete, postgres.InTxBatched)
//	"two_phase"    claim and effect committed; the pause; then claim
//	               again, a second effect, and complete
//	"two_phase_complete_only"  the same, with no second claim
//	"two_phase_unknown"  claim and effect committed; the pause; then 202
//	               with nothing completed, as a flow whose outcome is not
//	               known yet answers
//	"two_phase_fail"  claim and effect committed; the pause; then a 500,
//	               as when the call between the phases fails
//	"two_phase_hangup"  claim and effect committed; then it waits for the
//	               client to hang up (at its gate, without being let through)
//	"invalid"      400 before any transaction
//	"out_of_stock" 409 out_of_stock after the claim: rolled back
//	"busy", "rate_limited"  409 resource_busy, 429, after the claim: rolled back
//	"fail"         500 after the claim: rolled back
//	"panic"        a panic after the claim
//
// A request with a gate (or "wait_for_crowd") pauses after its claim,
// inside its transaction, or between the two phases of "two_phase". The
// answer carries the body the flow read.
func (h *harness) handle(c echo.Context) error {
	run := h.runs.Add(1)
	ctx := c.Request().Context()
	rec := RecordFrom(ctx)
	act := c.Request().Header.Get(headerAct)
	p, _ := auth.PrincipalFrom(ctx)
	key := c.Request().Header.Get(HeaderKey)
	body, err := io.ReadAll(c.Request().Body)
	if err != nil {
		return err
	}
	answer := Answer{Status: http.StatusCreated, Location: "/v1/atomic/" + c.Param("id"), ETag: fmt.Sprintf(`"%d"`, run),
		Body: map[string]any{"run": run, "nonce": nonce(), "body": string(body)}}
	effect := func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, sqlEffect, p.Scope(), key, run)
		return err
	}

	switch act {
	case "invalid":
		return problem.New(problem.Invalid, "quantity: required")
	case "batched":
		claim := rec.QueueClaim
		if h.claimWaits {
			claim = func(b *pgx.Batch) { claimWithoutTryLock(b, rec) }
		}
		err = postgres.InTxBatched(ctx, h.flowDB, claim, func(pgx.Tx) (*pgx.Batch, error) {
			h.pause(c)
			last := &pgx.Batch{}
			last.Queue(sqlEffect, p.Scope(), key, run)
			return last, rec.QueueComplete(last, answer)
		})
	case "two_phase", "two_phase_complete_only", "two_phase_fail", "two_phase_hangup", "two_phase_unknown":
		err = postgres.InTx(ctx, h.flowDB, func(tx pgx.Tx) error {
			if err := rec.Claim(ctx, tx); err != nil {
				return err
			}
			return effect(tx)
		})
		if err != nil {
			return err
		}
		// Between the phases, in no transaction.
		switch act {
		case "two_phase_unknown":
			h.pause(c)
			return httpx.JSON(c, http.StatusAccepted, map[string]any{"run": run, "status": "processing"})
		case "two_phase_hangup":
			g := h.gate(c.Request().Header.Get(headerGate))
			g.ctx = ctx
			close(g.started)
			<-ctx.Done()
			return ctx.Err()
		case "two_phase_fail":
			h.pause(c)
			return errors.New("boom: the call between the phases failed")
		}
		h.pause(c)
		err = postgres.InTx(ctx, h.flowDB, func(tx pgx.Tx) error {
			if act == "two_phase" {
				// The loser of a takeover asks its own key first.
				if err := rec.Claim(ctx, tx); err != nil {
					h.stale.Add(1)
					return err
				}
			}
			if err := effect(tx); err != nil {
				return err
			}
			stored, err := rec.Complete(ctx, tx, answer)
			if err == nil && !stored {
				h.stale.Add(1)
			}
			return err
		})
	default:
		err = postgres.InTx(ctx, h.flowDB, func(tx pgx.Tx) error {
			if err := h.claim(ctx, tx, rec); err != nil {
				return err
			}
			h.pause(c)
			switch act {
			case "out_of_stock":
				return problem.New(problem.OutOfStock, "SKU-1: 0 available, 2 requested")
			case "busy":
				return &problem.Error{Code: problem.ResourceBusy, Detail: "thing:1 is locked", RetryAfter: 2 * time.Second}
			case "rate_limited":
				return &problem.Error{Code: problem.RateLimited, RetryAfter: time.Second}
			case "fail":
				return errors.New("boom")
			case "panic":
				panic("boom")
			}
			if err := effect(tx); err != nil {
				return err
			}
			_, err := rec.Complete(ctx, tx, answer)
			return err
		})
	}
	if err != nil {
		return err
	}
	return Send(c, answer)
}

// pause holds the flow at the request's gate, or until the crowd is in.
// The deadline only ends a test that is failing anyway.
func (h *harness) pause(c echo.Context) {
	if name := c.Request().Header.Get(headerGate); name != "" {
		g := h.gate(name)
		g.ctx = c.Request().Context()
		close(g.started)
		<-g.open
	}
	if c.Request().Header.Get(headerAct) == "wait_for_crowd" {
		h.crowding.Add(1)
		deadline := time.Now().Add(testDeadline)
		for h.crowding.Load() < h.crowd.Load() && h.refused.Load() < h.crowd.Load()-1 && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
	}
}

// effects counts the committed effects of principal's key.
func (h *harness) effects(t *testing.T, principal, key string) int {
	t.Helper()
	var n int
	if err := h.db.QueryRow(context.Background(),
		`SELECT count(*) FROM effects WHERE principal = $1 AND key = $2`, principal, key).Scan(&n); err != nil {
		t.Fatalf("count effects: %v", err)
	}
	return n
}

// logBuffer is a log that handlers of several requests write at once.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// lines returns the lines logged so far, each decoded.
func (b *logBuffer) lines(t *testing.T) []map[string]any {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []map[string]any
	for _, l := range bytes.Split(bytes.TrimSpace(b.buf.Bytes()), []byte("\n")) {
		if len(l) == 0 {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal(l, &m); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		out = append(out, m)
	}
	return out
}

func nonce() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// claim is rec.Claim, or, when the harness takes the try-lock out, the
// same claim sent without it.
func (h *harness) claim(ctx context.Context, tx pgx.Tx, rec *Record) error {
	if !h.claimWaits || rec == nil {
		return rec.Claim(ctx, tx)
	}
	b := &pgx.Batch{}
	claimWithoutTryLock(b, rec)
	return tx.SendBatch(ctx, b).Close()
}

// claimWithoutTryLock queues rec's claim with its try-lock taken out, as
// a naive claim in the transaction would be: a copy of the request then
// waits inside PostgreSQL on the unique index, holding its connection.
// The client's key stays a parameter the statement uses.
func claimWithoutTryLock(b *pgx.Batch, rec *Record) {
	from := len(b.QueuedQueries)
	rec.QueueClaim(b)
	for _, q := range b.QueuedQueries[from:] {
		q.SQL = strings.Replace(q.SQL, claimLock, "$2::text IS NOT NULL", 1)
	}
}
