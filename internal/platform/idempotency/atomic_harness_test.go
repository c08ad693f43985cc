package idempotency

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"

	"github.com/shop-example/shop/internal/platform/auth"
	"github.com/shop-example/shop/internal/platform/httpx"
	"github.com/shop-example/shop/internal/platform/metrics"
	"github.com/shop-example/shop/internal/platform/postgres"
	"github.com/shop-example/shop/internal/platform/problem"
	"github.com/shop-example/shop/internal/platform/testenv"
)

const (
	atomicRoute = "/v1/atomic/:id" // guarded by Atomic
	atomicFlow  = "atomic_thing"   // its flow name in the conflict counter

	// sqlEffect is the flow's side effect: one row per run that committed.
	sqlEffect       = `INSERT INTO effects (principal, key, run) VALUES ($1, $2, $3)`
	sqlEffectsTable = `CREATE TABLE effects (principal text NOT NULL, key text NOT NULL, run bigint NOT NULL)`
)

// atomicHarness is the harness with a route under Atomic, whose handler
// runs a flow in the atomic phases: in its transaction it claims the key,
// writes a row of effects and completes the key. flowDB is the pool of
// the flow's transactions; the store's own statements go to h.db.
type atomicHarness struct {
	*harness
	flowDB *pgxpool.Pool
	stale  atomic.Int64 // second phases that found the key taken over
}

// newAtomicHarness builds it on one fresh database, whose pool is both the
// store's and the flow's.
func newAtomicHarness(t *testing.T, opts Options) *atomicHarness {
	t.Helper()
	db := testenv.Pool(t)
	return newAtomicHarnessOn(t, db, db, opts)
}

// newAtomicHarnessOn builds it with the store on db and the flow on flowDB,
// two pools of one database.
func newAtomicHarnessOn(t *testing.T, db, flowDB *pgxpool.Pool, opts Options) *atomicHarness {
	t.Helper()
	if _, err := db.Exec(context.Background(), sqlEffectsTable); err != nil {
		t.Fatalf("create effects: %v", err)
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	h := &atomicHarness{harness: &harness{
		db:      db,
		clock:   testenv.NewFrozenClock(),
		metrics: metrics.New(),
		gates:   map[string]*gate{},
	}, flowDB: flowDB}
	opts.Logger, opts.Metrics, opts.Now = logger, h.metrics, h.clock.Now
	h.store = NewStore(db, opts)
	e := httpx.New(h.metrics, httpx.Options{Logger: logger})
	e.POST(atomicRoute, h.handleAtomic, h.principal, h.store.Atomic(atomicFlow))
	h.srv = httptest.NewServer(e)
	t.Cleanup(h.srv.Close)
	t.Cleanup(func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		for _, g := range h.gates {
			g.release()
		}
	})
	return h
}

// handleAtomic is the flow. What it does is X-Test-Act:
//
//	""             claim, effect, complete, in one transaction (Claim, Complete)
//	"batched"      the same with the claim sent with BEGIN and the
//	               completion with the effect and COMMIT (QueueClaim,
//	               QueueComplete, postgres.InTxBatched)
//	"two_phase"    claim and effect committed; the pause; then claim
//	               again and complete
//	"two_phase_complete_only"  the same, with no second claim
//	"two_phase_unknown"  claim and effect committed; the pause; then 202
//	               with nothing completed, as a flow whose outcome is not
//	               known yet answers
//	"invalid"      400 before any transaction
//	"out_of_stock" 409 out_of_stock after the claim: rolled back
//	"fail"         500 after the claim: rolled back
//	"panic"        a panic after the claim
//
// A request with a gate (or "wait_for_crowd") pauses after its claim,
// inside its transaction, or between the two phases of "two_phase".
func (h *atomicHarness) handleAtomic(c echo.Context) error {
	run := h.runs.Add(1)
	ctx := c.Request().Context()
	rec := RecordFrom(ctx)
	act := c.Request().Header.Get(headerAct)
	p, _ := auth.PrincipalFrom(ctx)
	key := c.Request().Header.Get(HeaderKey)
	answer := Answer{Status: http.StatusCreated, Location: "/v1/atomic/" + c.Param("id"), ETag: fmt.Sprintf(`"%d"`, run),
		Body: map[string]any{"run": run, "nonce": nonce()}}
	effect := func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, sqlEffect, p.Scope(), key, run)
		return err
	}

	var err error
	switch act {
	case "invalid":
		return problem.New(problem.Invalid, "quantity: required")
	case "batched":
		err = postgres.InTxBatched(ctx, h.flowDB, rec.QueueClaim, func(pgx.Tx) (*pgx.Batch, error) {
			h.pause(c)
			last := &pgx.Batch{}
			last.Queue(sqlEffect, p.Scope(), key, run)
			return last, rec.QueueComplete(last, answer)
		})
	case "two_phase_unknown":
		err = postgres.InTx(ctx, h.flowDB, func(tx pgx.Tx) error {
			if err := rec.Claim(ctx, tx); err != nil {
				return err
			}
			return effect(tx)
		})
		if err != nil {
			return err
		}
		h.pause(c)
		return httpx.JSON(c, http.StatusAccepted, map[string]any{"run": run, "status": "processing"})
	case "two_phase", "two_phase_complete_only":
		err = postgres.InTx(ctx, h.flowDB, func(tx pgx.Tx) error {
			if err := rec.Claim(ctx, tx); err != nil {
				return err
			}
			return effect(tx)
		})
		if err != nil {
			return err
		}
		h.pause(c) // between the phases, in no transaction
		err = postgres.InTx(ctx, h.flowDB, func(tx pgx.Tx) error {
			if act == "two_phase" {
				// The loser of a takeover asks its own key first.
				if err := rec.Claim(ctx, tx); err != nil {
					h.stale.Add(1)
					return err
				}
			}
			stored, err := rec.Complete(ctx, tx, answer)
			if err == nil && !stored {
				h.stale.Add(1)
			}
			return err
		})
	default:
		err = postgres.InTx(ctx, h.flowDB, func(tx pgx.Tx) error {
			if err := rec.Claim(ctx, tx); err != nil {
				return err
			}
			h.pause(c)
			switch act {
			case "out_of_stock":
				return problem.New(problem.OutOfStock, "SKU-1: 0 available, 2 requested")
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

// pause holds the flow at the request's gate, or until the crowd is in
// (every other copy refused), as the harness's handler does.
func (h *atomicHarness) pause(c echo.Context) {
	if name := c.Request().Header.Get(headerGate); name != "" {
		g := h.gate(name)
		close(g.started)
		<-g.open
	}
	if c.Request().Header.Get(headerAct) == "wait_for_crowd" {
		h.crowding.Add(1)
		deadline := time.Now().Add(testDeadline)
		for h.refused.Load() < h.crowd.Load()-1 && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
	}
}

// effects counts the committed effects of principal's key.
func (h *atomicHarness) effects(t *testing.T, principal, key string) int {
	t.Helper()
	var n int
	if err := h.db.QueryRow(context.Background(),
		`SELECT count(*) FROM effects WHERE principal = $1 AND key = $2`, principal, key).Scan(&n); err != nil {
		t.Fatalf("count effects: %v", err)
	}
	return n
}
