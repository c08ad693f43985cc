package idempotency

import (
	"bytes"
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shop-example/shop/internal/platform/testenv"
)

// TestMiddleware_Race sends one key 20 times at once to a handler that
// runs until the other copies are in: the handler runs once, every 2xx is
// the same bytes, the rest are told to come back later; and the database
// holds one completed key.
func TestMiddleware_Race(t *testing.T) {
	t.Parallel()
	const n = 20

	// Without the layer, the same race runs the side effect many times: the
	// invariant checked below is one the middleware must make true.
	t.Run("WithoutTheLayer", func(t *testing.T) {
		h := newHarness(t)
		replies := race(t, h, n, request{path: "/v1/plain/1", key: "k1", act: "wait_for_crowd"})
		if runs := h.runs.Load(); runs != n {
			t.Fatalf("handler ran %d times with no idempotency layer, want %d: the race is not racing", runs, n)
		}
		for _, r := range replies {
			if r.status != http.StatusCreated {
				t.Fatalf("got %d, want 201", r.status)
			}
		}
	})

	t.Run("WithTheLayer", func(t *testing.T) {
		h := newHarness(t)
		replies := race(t, h, n, request{key: "k1", act: "wait_for_crowd", body: `{"quantity":1}`})
		if runs := h.runs.Load(); runs != 1 {
			t.Fatalf("handler ran %d times, want 1", runs)
		}
		var first []byte
		fresh, inProgress := 0, 0
		for _, r := range replies {
			switch {
			case r.status == http.StatusCreated:
				if first == nil {
					first = r.body
				}
				if !bytes.Equal(r.body, first) {
					t.Fatalf("two different 2xx bodies:\n%s\n%s", first, r.body)
				}
				if !r.replayed() {
					fresh++
				}
			case r.status == http.StatusConflict && r.code() == "request_in_progress":
				if r.header.Get("Retry-After") != "1" {
					t.Fatalf("409 with Retry-After %q, want 1", r.header.Get("Retry-After"))
				}
				inProgress++
			default:
				t.Fatalf("unexpected %d %s", r.status, r.body)
			}
		}
		if fresh != 1 {
			t.Fatalf("%d answers were not replays, want 1", fresh)
		}
		if inProgress == 0 {
			t.Fatal("no request found the key in progress; the race is not racing")
		}
		stopped := counter(t, h, "shop_conflicts_stopped_total", "flow", route, "layer", "idempotency")
		if stopped != n-1 {
			t.Fatalf("conflicts stopped = %v, want %d", stopped, n-1)
		}

		// The invariant, in SQL: one key, completed, holding that answer.
		var (
			count     int
			status    int
			body      []byte
			completed bool
		)
		err := h.db.QueryRow(t.Context(), `
			SELECT count(*) OVER (), status_code, body, completed_at IS NOT NULL
			  FROM idempotency_keys WHERE principal = 'alice' AND key = 'k1'`).Scan(&count, &status, &body, &completed)
		if err != nil {
			t.Fatalf("read key: %v", err)
		}
		var total int
		if err := h.db.QueryRow(t.Context(), `SELECT count(*) FROM idempotency_keys`).Scan(&total); err != nil {
			t.Fatalf("count keys: %v", err)
		}
		if total != 1 || count != 1 || !completed || status < 200 || status > 299 || !bytes.Equal(body, first) {
			t.Fatalf("keys: total %d, this key %d completed=%v status %d; body matches answer: %v",
				total, count, completed, status, bytes.Equal(body, first))
		}
	})
}

// race sends n copies of r at once and returns the replies.
func race(t *testing.T, h *harness, n int, r request) []reply {
	t.Helper()
	var (
		wg      sync.WaitGroup
		start   = make(chan struct{})
		replies = make([]reply, n)
		errs    = make([]error, n)
	)
	h.crowd.Store(int64(n))
	for i := range n {
		wg.Go(func() {
			<-start
			replies[i], errs[i] = h.send(r)
		})
	}
	close(start)
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatalf("send: %v", err)
		}
	}
	return replies
}

// TestMiddleware_Takeover: a claim whose lease ran out (its owner crashed
// or stalled) is taken over, and the request runs again.
func TestMiddleware_Takeover(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	stale := start(t, h, request{key: "k1", gate: "stale"})

	if rep := h.mustSend(t, request{key: "k1"}); rep.status != http.StatusConflict || rep.code() != "request_in_progress" {
		t.Fatalf("within the lease: got %d %s, want 409 request_in_progress", rep.status, rep.body)
	}
	h.clock.Advance(DefaultLease + time.Second)
	if rep := h.mustSend(t, request{key: "k1", body: `{"quantity":2}`}); rep.status != http.StatusUnprocessableEntity {
		t.Fatalf("another request after the lease: got %d %s, want 422", rep.status, rep.body)
	}
	newOwner := h.mustSend(t, request{key: "k1"})
	if newOwner.status != http.StatusCreated || newOwner.replayed() {
		t.Fatalf("after the lease: got %d replayed=%v %s, want a fresh 201", newOwner.status, newOwner.replayed(), newOwner.body)
	}
	if runs := h.runs.Load(); runs != 2 {
		t.Fatalf("handler ran %d times, want 2", runs)
	}

	// The stale owner finishes last: the key is completed already.
	h.gate("stale").release()
	if rep := <-stale; rep.status != http.StatusCreated || bytes.Equal(rep.body, newOwner.body) {
		t.Fatalf("stale owner: got %d %s; want its own 201", rep.status, rep.body)
	}
	wait(t, h.gate("stale").done, "the stale owner to finish")
	assertStored(t, h, "k1", newOwner.body)
	if got := counter(t, h, "shop_idempotency_requests_total", "outcome", outcomeTakenOver); got != 1 {
		t.Fatalf("takeovers counted: %v, want 1", got)
	}
	if got := counter(t, h, "shop_idempotency_results_total", "result", resultStaleOwner); got != 1 {
		t.Fatalf("stale owners counted: %v, want 1", got)
	}
}

// TestMiddleware_StaleOwnerFenced: an owner whose key was taken over
// finishes while the new owner still runs. The owner token fences it: its
// answer is not stored and its release does not free the new owner's key.
func TestMiddleware_StaleOwnerFenced(t *testing.T) {
	t.Parallel()
	for _, act := range []string{"", "fail"} {
		t.Run("Act="+act, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			stale := start(t, h, request{key: "k1", act: act, gate: "stale"})
			h.clock.Advance(DefaultLease + time.Second)
			fresh := start(t, h, request{key: "k1", gate: "new"})

			h.gate("stale").release()
			<-stale
			wait(t, h.gate("stale").done, "the stale owner to finish")
			if rep := h.mustSend(t, request{key: "k1"}); rep.status != http.StatusConflict || rep.code() != "request_in_progress" {
				t.Fatalf("while the new owner runs: got %d %s, want 409 request_in_progress", rep.status, rep.body)
			}

			h.gate("new").release()
			newOwner := <-fresh
			wait(t, h.gate("new").done, "the new owner to finish")
			if newOwner.status != http.StatusCreated {
				t.Fatalf("new owner: got %d %s", newOwner.status, newOwner.body)
			}
			assertStored(t, h, "k1", newOwner.body)
			if runs := h.runs.Load(); runs != 2 {
				t.Fatalf("handler ran %d times, want 2", runs)
			}
		})
	}
}

// start sends r, which must name a gate, and returns once its handler is
// waiting there; the reply arrives on the channel when the gate opens.
func start(t *testing.T, h *harness, r request) <-chan reply {
	t.Helper()
	replies := make(chan reply, 1)
	go func() {
		rep, err := h.send(r)
		if err != nil {
			t.Errorf("send through gate %s: %v", r.gate, err)
		}
		replies <- rep
	}()
	wait(t, h.gate(r.gate).started, "the handler behind gate "+r.gate)
	return replies
}

// assertStored checks that key is the only key, completed, and that it
// replays body to the request like (by default a POST to /v1/things/1).
func assertStored(t *testing.T, h *harness, key string, body []byte, like ...request) {
	t.Helper()
	rows := h.rows(t)
	if r, ok := rows["alice/"+key]; len(rows) != 1 || !ok || !r.completed || !bytes.Equal(r.body, body) {
		t.Fatalf("stored keys %v, want %s completed with %s", rows, key, body)
	}
	var r request
	if len(like) > 0 {
		r = like[0]
	}
	r.key = key
	again := h.mustSend(t, r)
	if !again.replayed() || !bytes.Equal(again.body, body) {
		t.Fatalf("replay: got %d %s, want %s", again.status, again.body, body)
	}
}

// TestMiddleware_KeyChurning: a key other requests keep claiming and
// giving up again. Each time this request's claim is refused, the row that
// refused it is gone before it can be read (a request whose answer was not
// storable, 409 resource_busy say, freed it). After three such rounds the
// answer is 409 request_in_progress with Retry-After, as for a key in
// progress, never a 500; the handler does not run and nothing is left.
func TestMiddleware_KeyChurning(t *testing.T) {
	t.Parallel()
	url := testenv.DatabaseURL(t)
	other := testenv.PoolFor(t, url)
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.Tracer = &churn{t: t, other: other}
	db, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	h := newHarnessOn(t, db, Options{})

	rep := h.mustSend(t, request{key: "k1"})
	if rep.status != http.StatusConflict || rep.code() != "request_in_progress" || rep.header.Get("Retry-After") == "" {
		t.Fatalf("got %d %s (Retry-After %q), want 409 request_in_progress with Retry-After",
			rep.status, rep.body, rep.header.Get("Retry-After"))
	}
	if runs := h.runs.Load(); runs != 0 {
		t.Errorf("handler ran %d times, want 0", runs)
	}
	if rows := h.rows(t); len(rows) != 0 {
		t.Errorf("keys left: %v, want none", rows)
	}
	if got := counter(t, h, "shop_idempotency_requests_total", "outcome", outcomeInProgress); got != 1 {
		t.Errorf("requests{in_progress} = %v, want 1", got)
	}
}

// churn plays the other requests of TestMiddleware_KeyChurning: before
// each claim of a key it claims the key itself, on the other pool, and
// after the claim it gives the key up again.
type churn struct {
	t     *testing.T
	other *pgxpool.Pool
}

type churnKey struct{}

func (c *churn) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if d.SQL != sqlClaim {
		return ctx
	}
	principal, key, fp := d.Args[0], d.Args[1], d.Args[2]
	if _, err := c.other.Exec(ctx, `
INSERT INTO idempotency_keys (principal, key, fingerprint, owner, locked_until, created_at)
VALUES ($1, $2, $3, gen_random_uuid(), 'infinity', now())`, principal, key, fp); err != nil {
		c.t.Errorf("the other request's claim: %v", err)
	}
	return context.WithValue(ctx, churnKey{}, [2]any{principal, key})
}

func (c *churn) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryEndData) {
	k, ok := ctx.Value(churnKey{}).([2]any)
	if !ok {
		return
	}
	if _, err := c.other.Exec(context.WithoutCancel(ctx),
		`DELETE FROM idempotency_keys WHERE principal = $1 AND key = $2`, k[0], k[1]); err != nil {
		c.t.Errorf("the other request's release: %v", err)
	}
}
