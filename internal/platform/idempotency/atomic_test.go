package idempotency

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/shop-example/shop/harness/testenv"
)

const atomicPath = "/v1/atomic/1"

// TestAtomic_Race sends one key 20 times at once; the first to claim holds
// its transaction open until every other copy has been refused (with
// QueueClaim: the first is held after its claim while the others go). The effect
// is written once, every other copy was told request_in_progress at once
// (none waited for the first's transaction), and the key replays the
// first answer.
func TestAtomic_Race(t *testing.T) {
	t.Parallel()
	const n = 20

	// Without the layer the same crowd writes the effect once per copy:
	// the invariant checked below is one Atomic must make true. Fewer
	// copies than the pool's connections, since each holds one while it
	// waits for the others.
	t.Run("WithoutTheLayer", func(t *testing.T) {
		t.Parallel()
		const copies = 8
		h := newHarness(t, Options{})
		for _, rep := range race(t, h, copies, request{path: "/v1/plain/1", key: "k1", act: "wait_for_crowd"}) {
			if rep.status != http.StatusCreated {
				t.Fatalf("got %d %s, want 201", rep.status, rep.body)
			}
		}
		if got := h.effects(t, "alice", "k1"); got != copies {
			t.Fatalf("%d effects with no idempotency layer, want %d: the race is not racing", got, copies)
		}
	})

	for _, act := range []string{"", "batched"} {
		t.Run("Act="+act, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, Options{})
			var replies []reply
			if act == "batched" {
				replies = raceBatched(t, h, n, request{path: atomicPath, key: "k1", act: act, body: `{"quantity":1}`})
			} else {
				replies = race(t, h, n, request{path: atomicPath, key: "k1", act: "wait_for_crowd", body: `{"quantity":1}`})
			}
			var fresh []byte
			inProgress := 0
			for _, rep := range replies {
				switch {
				case rep.status == http.StatusCreated && !rep.replayed():
					if fresh != nil {
						t.Fatalf("two fresh answers:\n%s\n%s", fresh, rep.body)
					}
					fresh = rep.body
				case rep.status == http.StatusConflict && rep.code() == "request_in_progress":
					if rep.header.Get("Retry-After") != "1" {
						t.Fatalf("409 with Retry-After %q, want 1", rep.header.Get("Retry-After"))
					}
					inProgress++
				case rep.status == http.StatusCreated && rep.replayed():
				default:
					t.Fatalf("unexpected %d %s", rep.status, rep.body)
				}
			}
			if fresh == nil || inProgress == 0 {
				t.Fatalf("fresh answer %q, %d told in progress: the race is not racing", fresh, inProgress)
			}
			if got := h.effects(t, "alice", "k1"); got != 1 {
				t.Fatalf("%d effects, want 1", got)
			}
			assertStored(t, h, "k1", fresh, request{path: atomicPath, body: `{"quantity":1}`})
			if got := counter(t, h, "shop_conflicts_stopped_total", "flow", atomicFlow, "layer", "idempotency"); got < float64(inProgress) {
				t.Fatalf("conflicts stopped = %v, want at least %d", got, inProgress)
			}
		})
	}
}

// raceBatched is race for the batched flow, which pauses at a gate: the
// first copy is sent alone and held after its claim, the others go at
// once, and the gate opens when they are all answered.
func raceBatched(t *testing.T, h *harness, n int, r request) []reply {
	t.Helper()
	first := r
	first.gate = "first"
	answered := start(t, h, first)
	rest := make([]reply, n-1)
	testenv.Together(n-1, func(i int) {
		rep, err := h.send(r)
		if err != nil {
			t.Errorf("send: %v", err)
		}
		rest[i] = rep
	})
	h.gate("first").release()
	return append(rest, <-answered)
}

// TestAtomic_OneTransaction: the claim, the effect and the completion
// commit together, and the replay is the first answer byte for byte.
func TestAtomic_OneTransaction(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Options{})
	for _, act := range []string{"", "batched"} {
		key := "k-" + act
		first := h.mustSend(t, request{path: atomicPath, key: key, act: act, body: `{"a":1}`})
		if first.status != http.StatusCreated || first.replayed() {
			t.Fatalf("%s: got %d replayed=%v %s", act, first.status, first.replayed(), first.body)
		}
		// The flow read the body the middleware had read before it.
		if !strings.Contains(string(first.body), `"body":"{\"a\":1}"`) {
			t.Fatalf("%s: the flow did not see the body: %s", act, first.body)
		}
		again := h.mustSend(t, request{path: atomicPath, key: key, act: act, body: `{ "a": 1 }`})
		if !again.replayed() || !bytes.Equal(again.body, first.body) || again.status != first.status {
			t.Fatalf("%s: replay got %d %s, want %s", act, again.status, again.body, first.body)
		}
		for _, name := range []string{"Content-Type", "Location", "ETag"} {
			if got, want := again.header.Get(name), first.header.Get(name); got != want || want == "" {
				t.Fatalf("%s: replayed %s = %q, want %q", act, name, got, want)
			}
		}
		if got := h.effects(t, "alice", key); got != 1 {
			t.Fatalf("%s: %d effects, want 1", act, got)
		}
	}
	if got := counter(t, h, "shop_idempotency_results_total", "result", resultStored); got != 2 {
		t.Fatalf("results{stored} = %v, want 2", got)
	}
}

// TestAtomic_RolledBack: a flow that fails after its claim, or answers
// "try again" (409 resource_busy, 429), rolls the claim back with its
// work; no record is left and nothing is stored, and a retry runs afresh.
func TestAtomic_RolledBack(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		act    string
		status int
	}{
		{"fail", http.StatusInternalServerError},
		{"panic", http.StatusInternalServerError},
		{"busy", http.StatusConflict},
		{"rate_limited", http.StatusTooManyRequests},
	} {
		t.Run(tt.act, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, Options{})
			failed := h.mustSend(t, request{path: atomicPath, key: "k1", act: tt.act})
			if failed.status != tt.status {
				t.Fatalf("got %d %s, want %d", failed.status, failed.body, tt.status)
			}
			if rows := h.rows(t); len(rows) != 0 {
				t.Fatalf("a %d answer left keys: %v", tt.status, rows)
			}
			retry := h.mustSend(t, request{path: atomicPath, key: "k1"})
			if retry.status != http.StatusCreated || retry.replayed() {
				t.Fatalf("retry: got %d replayed=%v %s, want a fresh 201", retry.status, retry.replayed(), retry.body)
			}
			if got := h.effects(t, "alice", "k1"); got != 1 {
				t.Fatalf("%d effects, want 1", got)
			}
		})
	}
}

// TestAtomic_StoresRefusal: a 4xx that answers the request is stored after
// the flow rolled back (out_of_stock) or before it began (invalid), and
// replayed, though a retry would now succeed.
func TestAtomic_StoresRefusal(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		act, code string
		status    int
	}{
		{"out_of_stock", "out_of_stock", http.StatusConflict},
		{"invalid", "invalid_request", http.StatusBadRequest},
	} {
		t.Run(tt.act, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, Options{})
			first := h.mustSend(t, request{path: atomicPath, key: "k1", act: tt.act})
			if first.status != tt.status || first.code() != tt.code || first.replayed() {
				t.Fatalf("got %d %s, want %d %s", first.status, first.body, tt.status, tt.code)
			}
			again := h.mustSend(t, request{path: atomicPath, key: "k1"})
			if again.status != tt.status || !again.replayed() || !bytes.Equal(again.body, first.body) {
				t.Fatalf("got %d replayed=%v %s, want the replay of %s", again.status, again.replayed(), again.body, first.body)
			}
			if got := h.effects(t, "alice", "k1"); got != 0 {
				t.Fatalf("%d effects, want 0", got)
			}
			if r := h.rows(t)["alice/k1"]; !r.completed || r.status == nil || *r.status != tt.status {
				t.Fatalf("key %+v, want it completed with %d", r, tt.status)
			}
		})
	}
}

// TestAtomic_KeyReused: the same key for another body, path or method is
// 422, whether the first was completed by its flow or stored afterwards,
// and whatever the second would have done.
func TestAtomic_KeyReused(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Options{})
	h.mustSend(t, request{path: atomicPath, key: "k1", body: `{"quantity":1}`})
	h.mustSend(t, request{path: atomicPath, key: "k2", act: "invalid", body: `{"quantity":1}`})
	for _, key := range []string{"k1", "k2"} {
		for _, r := range []request{
			{path: atomicPath, key: key, body: `{"quantity":2}`},
			{path: "/v1/atomic/2", key: key, body: `{"quantity":1}`},
			{method: http.MethodPut, path: atomicPath, key: key, body: `{"quantity":1}`},
			// A duplicated member does not pass for its last value.
			{path: atomicPath, key: key, body: `{"quantity":0,"quantity":1}`},
			{path: atomicPath, key: key, act: "invalid", body: `{"quantity":2}`},
		} {
			rep := h.mustSend(t, r)
			if rep.status != http.StatusUnprocessableEntity || rep.code() != "idempotency_key_reused" {
				t.Fatalf("%s %s %s: got %d %s, want 422 idempotency_key_reused", key, r.path, r.body, rep.status, rep.body)
			}
		}
	}
	if got := h.effects(t, "alice", "k1"); got != 1 {
		t.Fatalf("%d effects, want 1", got)
	}
}

// TestAtomic_LostCommit: the flow's COMMIT reaches PostgreSQL and its answer
// is lost (testenv.CommitCutter). The client gets a 503; its retry finds
// the completed key and replays the answer that was committed with the
// effect, which it never saw.
func TestAtomic_LostCommit(t *testing.T) {
	t.Parallel()
	for _, act := range []string{"", "batched"} {
		t.Run("Act="+act, func(t *testing.T) {
			t.Parallel()
			url := testenv.DatabaseURL(t)
			cutter := testenv.NewCommitCutter(t)
			h := newHarnessOn(t, testenv.PoolFor(t, url), testenv.PoolFor(t, cutter.URL(url)), Options{})
			cutter.LoseCommitOf("INSERT INTO effects")
			first := h.mustSend(t, request{path: atomicPath, key: "k1", act: act})
			if cutter.Lost() != 1 || first.status != http.StatusServiceUnavailable {
				t.Fatalf("lost %d commit answers; first got %d %s, want 503", cutter.Lost(), first.status, first.body)
			}
			retry := h.mustSend(t, request{path: atomicPath, key: "k1", act: act})
			if retry.status != http.StatusCreated || !retry.replayed() || !strings.Contains(string(retry.body), `"run":1}`) {
				t.Fatalf("retry: got %d replayed=%v %s, want the replay of run 1", retry.status, retry.replayed(), retry.body)
			}
			if got := h.effects(t, "alice", "k1"); got != 1 {
				t.Fatalf("%d effects, want 1", got)
			}
		})
	}
}

// TestAtomic_TwoPhaseTakeover: a two-phase flow committed its claim and
// its effect, then stalled before its second phase. Within the lease the
// key is in progress; after it, the same request takes the key over and
// runs. The stale owner's second phase is fenced by the owner token: its
// second claim is refused, or (without one) its completion stores
// nothing; and its client is answered with the key's one answer, the new
// owner's.
func TestAtomic_TwoPhaseTakeover(t *testing.T) {
	t.Parallel()
	for _, act := range []string{"two_phase", "two_phase_complete_only"} {
		t.Run(act, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, Options{})
			stale := start(t, h, request{path: atomicPath, key: "k1", act: act, gate: "stale"})

			if rep := h.mustSend(t, request{path: atomicPath, key: "k1", act: act}); rep.status != http.StatusConflict || rep.code() != "request_in_progress" {
				t.Fatalf("within the lease: got %d %s, want 409 request_in_progress", rep.status, rep.body)
			}
			h.clock.Advance(DefaultLease + time.Second)
			if rep := h.mustSend(t, request{path: atomicPath, key: "k1", act: act, body: `{"other":1}`}); rep.status != http.StatusUnprocessableEntity {
				t.Fatalf("another request after the lease: got %d %s, want 422", rep.status, rep.body)
			}
			newOwner := h.mustSend(t, request{path: atomicPath, key: "k1", act: act})
			if newOwner.status != http.StatusCreated || newOwner.replayed() {
				t.Fatalf("after the lease: got %d replayed=%v %s, want a fresh 201", newOwner.status, newOwner.replayed(), newOwner.body)
			}

			h.gate("stale").release()
			if rep := <-stale; rep.status != http.StatusCreated || !rep.replayed() || !bytes.Equal(rep.body, newOwner.body) {
				t.Fatalf("stale owner: got %d replayed=%v %s; want the new owner's answer %s", rep.status, rep.replayed(), rep.body, newOwner.body)
			}
			wait(t, h.gate("stale").done, "the stale owner to finish")
			if got := h.stale.Load(); got != 1 {
				t.Fatalf("%d second phases found the key taken over, want 1", got)
			}
			assertStored(t, h, "k1", newOwner.body, request{path: atomicPath, act: act})
			if got := counter(t, h, "shop_idempotency_requests_total", "outcome", outcomeTakenOver); got != 1 {
				t.Fatalf("takeovers counted: %v, want 1", got)
			}
			// Both owners ran the first phase: in a real flow its recovery
			// point (the payment found by its request key) makes that one
			// effect. The new owner ran the second phase too; the stale
			// owner's second claim refuses its second phase before it acts,
			// where the completion's fence alone stops only its answer.
			want := 3
			if act == "two_phase_complete_only" {
				want = 4
			}
			if got := h.effects(t, "alice", "k1"); got != want {
				t.Fatalf("%d effects, want %d (one per owner's first phase, and the second phases that ran)", got, want)
			}
		})
	}
}

// TestAtomic_StaleOwnerFenced: the stale owner of a two-phase flow
// begins its second phase while the request that took its key over is
// still in its transaction. Its second claim waits for the key's advisory
// lock, which is the new owner's, and is then refused: it changes
// nothing, and its client gets the key's answer, the new owner's.
func TestAtomic_StaleOwnerFenced(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Options{})
	stale := start(t, h, request{path: atomicPath, key: "k1", act: "two_phase", gate: "stale"})
	h.clock.Advance(DefaultLease + time.Second)
	fresh := start(t, h, request{path: atomicPath, key: "k1", gate: "new"})

	h.gate("stale").release()
	h.awaitLockWait(t, stale, "the stale owner's second claim, while the new owner runs")
	h.gate("new").release()
	newOwner := <-fresh
	if newOwner.status != http.StatusCreated || newOwner.replayed() {
		t.Fatalf("new owner: got %d %s", newOwner.status, newOwner.body)
	}
	if rep := <-stale; rep.status != http.StatusCreated || !rep.replayed() || !bytes.Equal(rep.body, newOwner.body) {
		t.Fatalf("stale owner after the new one: got %d replayed=%v %s, want the new owner's answer replayed", rep.status, rep.replayed(), rep.body)
	}
	wait(t, h.gate("new").done, "the new owner to finish")
	if got := h.stale.Load(); got != 1 {
		t.Fatalf("%d completions reported the key taken over, want 1", got)
	}
	assertStored(t, h, "k1", newOwner.body, request{path: atomicPath})
}

// TestAtomic_StoreWaitsForTheKeysLock: a two-phase flow's request whose
// answer the middleware stores (a 202, its claim committed by the first
// phase) finishes while another request of the key holds the key's
// advisory lock for its claim, as a retry of the same key does. The
// store waits for the lock instead of taking the other for the key's
// owner: the request answers its 202, and the key replays it.
func TestAtomic_StoreWaitsForTheKeysLock(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Options{})
	ctx := context.Background()
	answered := start(t, h, request{path: atomicPath, key: "k1", act: "two_phase_unknown", gate: "first"})

	retry := h.holdKeyLock(t, "alice", "k1")
	h.gate("first").release()
	h.awaitLockWait(t, answered, "the store, while the key's lock is another request's")
	if err := retry.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	rep := <-answered
	if rep.status != http.StatusAccepted || rep.replayed() {
		t.Fatalf("got %d replayed=%v %s, want the flow's 202", rep.status, rep.replayed(), rep.body)
	}
	assertStored(t, h, "k1", rep.body, request{path: atomicPath, act: "two_phase_unknown"})
}

// TestAtomic_SecondPhaseWaitsForTheKeysLock: between a two-phase
// request's phases, another transaction holds the key's advisory lock, as
// a copy of the request being refused does for a moment. The second
// phase's claim waits for the lock and the request completes with its
// own answer. With a try-lock there (as the claim took it before) the
// second phase was refused, "another request with it is running", and a
// refund's settle left its outcome to the reconciler.
func TestAtomic_SecondPhaseWaitsForTheKeysLock(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Options{})
	ctx := context.Background()
	answered := start(t, h, request{path: atomicPath, key: "k1", act: "two_phase", gate: "between"})

	copyOf := h.holdKeyLock(t, "alice", "k1")
	h.gate("between").release()
	h.awaitLockWait(t, answered, "the second phase, while another transaction holds the key's lock a moment")
	if err := copyOf.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	rep := <-answered
	if rep.status != http.StatusCreated || rep.replayed() || h.stale.Load() != 0 {
		t.Fatalf("got %d replayed=%v %s (stale second phases %d), want the request's own 201", rep.status, rep.replayed(), rep.body, h.stale.Load())
	}
	assertStored(t, h, "k1", rep.body, request{path: atomicPath, act: "two_phase"})
}

// holdKeyLock opens a transaction that holds the advisory lock of
// principal's key, as a request claiming it does, until the caller rolls
// it back or the test ends.
func (h *harness) holdKeyLock(t *testing.T, principal, key string) pgx.Tx {
	t.Helper()
	ctx := context.Background()
	tx, err := h.db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(ctx) })
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext($1), hashtext($2))`, principal, key); err != nil {
		t.Fatal(err)
	}
	return tx
}

// awaitLockWait returns once a statement waits for an advisory lock in
// the harness's database, and fails the test if the request answers
// first, or nothing waits within testDeadline: who names what should be
// waiting.
func (h *harness) awaitLockWait(t *testing.T, answered <-chan reply, who string) {
	t.Helper()
	deadline := time.Now().Add(testDeadline)
	for !h.waitingForAdvisoryLock(t) {
		select {
		case rep := <-answered:
			t.Fatalf("%s: answered %d %s; want it to wait for the key's lock", who, rep.status, rep.body)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: did not wait for the key's lock", who)
		}
		time.Sleep(time.Millisecond)
	}
}

// waitingForAdvisoryLock reports whether a statement waits for an
// advisory lock in the harness's database.
func (h *harness) waitingForAdvisoryLock(t *testing.T) bool {
	t.Helper()
	var n int
	if err := h.db.QueryRow(context.Background(),
		`SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`).Scan(&n); err != nil {
		t.Fatalf("read pg_locks: %v", err)
	}
	return n > 0
}

// TestAtomic_NoDatabaseBeforeTheFlow: a request refused before the flow
// runs (no key, a body too large) touches no database, and a route
// without a principal is a wiring error.
func TestAtomic_NoDatabaseBeforeTheFlow(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Options{})
	if rep := h.mustSend(t, request{path: atomicPath}); rep.status != http.StatusBadRequest || rep.code() != "idempotency_key_required" {
		t.Fatalf("no key: got %d %s", rep.status, rep.body)
	}
	if rep := h.mustSend(t, request{path: atomicPath, key: "k1", noUser: true}); rep.status != http.StatusInternalServerError {
		t.Fatalf("no principal: got %d %s, want 500", rep.status, rep.body)
	}
	// No Content-Length, so the limit is found while reading.
	body := io.MultiReader(strings.NewReader(`{"pad":"`), strings.NewReader(strings.Repeat("x", 70<<10)), strings.NewReader(`"}`))
	req, err := http.NewRequest(http.MethodPost, h.srv.URL+atomicPath, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(headerUser, "alice")
	req.Header.Set(HeaderKey, "k1")
	if rep, err := do(h.srv.Client(), req); err != nil || rep.status != http.StatusRequestEntityTooLarge || rep.code() != "payload_too_large" {
		t.Fatalf("body too large: got %d %s (%v), want 413 payload_too_large", rep.status, rep.body, err)
	}
	if n := h.runs.Load(); n != 0 {
		t.Fatalf("handler ran %d times", n)
	}
	if rows := h.rows(t); len(rows) != 0 {
		t.Fatalf("keys left: %v", rows)
	}
}

// TestRecord_Nil: without layer 0 every method of the record is a no-op,
// and Send renders the answer itself.
func TestRecord_Nil(t *testing.T) {
	t.Parallel()
	var r *Record
	if r = RecordFrom(context.Background()); r != nil {
		t.Fatal("a context that never passed the middleware has a record")
	}
	if err := r.Claim(context.Background(), nil); err != nil {
		t.Fatalf("Claim: %v", err)
	}
	b := &pgx.Batch{}
	r.QueueClaim(b)
	if err := r.QueueComplete(b, Answer{Status: http.StatusCreated}); err != nil || b.Len() != 0 {
		t.Fatalf("QueueComplete: %v; %d statements queued", err, b.Len())
	}
	if stored, err := r.Complete(context.Background(), nil, Answer{}); stored || err != nil {
		t.Fatalf("Complete = %v, %v", stored, err)
	}
	var refusal *Refusal
	if errors.As(r.Claim(context.Background(), nil), &refusal) {
		t.Fatal("a nil record refused")
	}
}
