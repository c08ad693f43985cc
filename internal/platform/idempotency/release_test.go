package idempotency

import (
	"context"
	"net/http"
	"testing"
	"time"
)

// TestAtomic_ReleasesCommittedClaim: a two-phase flow committed its claim
// with its first phase, then failed before its second (the call between
// them failed, or the client hung up). The middleware deletes the claim,
// on a context detached from the request, so a retry runs afresh at once
// instead of being told request_in_progress until the lease ends (never,
// on this frozen clock).
func TestAtomic_ReleasesCommittedClaim(t *testing.T) {
	t.Parallel()
	for _, act := range []string{"two_phase_fail", "two_phase_hangup"} {
		t.Run(act, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, Options{})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			answered := make(chan reply, 1)
			errc := make(chan error, 1)
			go func() {
				rep, err := h.send(request{key: "k1", act: act, gate: "a", ctx: ctx})
				answered <- rep
				errc <- err
			}()
			wait(t, h.gate("a").started, "the flow between its phases")
			if r, ok := h.rows(t)["alice/k1"]; !ok || r.completed {
				t.Fatalf("between the phases: key %+v (found %v), want it claimed", r, ok)
			}
			if act == "two_phase_hangup" {
				cancel()
			} else {
				h.gate("a").release()
			}
			first, err := <-answered, <-errc
			switch {
			case act == "two_phase_hangup" && err == nil:
				t.Fatal("the request whose client hung up got an answer")
			case act == "two_phase_fail" && (err != nil || first.status != http.StatusInternalServerError):
				t.Fatalf("first: got %d %s (%v), want 500", first.status, first.body, err)
			}
			wait(t, h.gate("a").done, "the middleware to finish")
			if rows := h.rows(t); len(rows) != 0 {
				t.Fatalf("the claim the first phase committed is still there: %v", rows)
			}
			retry := h.mustSend(t, request{key: "k1"})
			if retry.status != http.StatusCreated || retry.replayed() {
				t.Fatalf("retry: got %d replayed=%v %s, want a fresh 201", retry.status, retry.replayed(), retry.body)
			}
			if got := counter(t, h, "shop_idempotency_results_total", "result", resultReleased); got != 1 {
				t.Errorf("results{released} = %v, want 1", got)
			}
		})
	}
}

// TestAtomic_ReleaseRetried: a release that fails (here every first try
// does: its deadline is a nanosecond) lets the answer go out and leaves
// the key claimed. The store tries once more in the background, so a
// retry soon runs afresh instead of being told request_in_progress until
// the lease ends.
func TestAtomic_ReleaseRetried(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Options{finishTimeout: time.Nanosecond})
	answered := start(t, h, request{key: "k1", act: "two_phase_fail", gate: "a"})
	h.gate("a").release()
	if first := <-answered; first.status != http.StatusInternalServerError {
		t.Fatalf("first: got %d %s, want 500", first.status, first.body)
	}
	deadline := time.Now().Add(testDeadline)
	for {
		again := h.mustSend(t, request{key: "k1"})
		if again.status == http.StatusCreated && !again.replayed() {
			break
		}
		if again.code() != "request_in_progress" || time.Now().After(deadline) {
			t.Fatalf("retry: got %d replayed=%v %s; want the key released by the store's second try", again.status, again.replayed(), again.body)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := counter(t, h, "shop_idempotency_results_total", "result", resultError); got != 0 {
		t.Errorf("results{error} = %v, want 0: the second try made it", got)
	}
	if got := counter(t, h, "shop_idempotency_results_total", "result", resultReleased); got != 1 {
		t.Errorf("results{released} = %v, want 1", got)
	}
}

// TestStore_WaitAwaitsSecondTries: a stopping replica waits for the keys
// still being released in the background. The second try of a release is
// held up by a transaction that locks its key's row; Wait must not return
// until that try could finish, and then the key is gone.
func TestStore_WaitAwaitsSecondTries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := newHarness(t, Options{finishTimeout: time.Nanosecond})
	answered := start(t, h, request{key: "k1", act: "two_phase_fail", gate: "held"})
	tx, err := h.db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // committed below unless the test failed
	if _, err := tx.Exec(ctx, `SELECT 1 FROM idempotency_keys WHERE key = 'k1' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	h.gate("held").release()
	if first := <-answered; first.status != http.StatusInternalServerError {
		t.Fatalf("first: got %d %s, want 500", first.status, first.body)
	}

	waited := make(chan struct{})
	go func() { h.store.Wait(); close(waited) }()
	select {
	case <-waited:
		t.Fatal("Wait returned while a second try was still held up")
	case <-time.After(300 * time.Millisecond):
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	wait(t, waited, "Wait, once the second try could finish")
	if rows := h.rows(t); len(rows) != 0 {
		t.Fatalf("after Wait: keys %v, want k1 released", rows)
	}
}

// TestAtomic_UnstoredAnswerNotSent: an answer the store cannot record
// (here its statement's deadline is a nanosecond, as when the database
// is failing over) is not sent, since a retry with the key would not get
// it back: the client is told 503 with Retry-After, and nothing of the
// key is left to refuse that retry.
func TestAtomic_UnstoredAnswerNotSent(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Options{finishTimeout: time.Nanosecond})
	got := h.mustSend(t, request{key: "k1", act: "out_of_stock"})
	if got.status != http.StatusServiceUnavailable || got.code() != "unavailable" || got.header.Get("Retry-After") == "" {
		t.Fatalf("got %d %s (Retry-After %q), want 503 unavailable with Retry-After", got.status, got.body, got.header.Get("Retry-After"))
	}
	if rows := h.rows(t); len(rows) != 0 {
		t.Errorf("keys %v, want none: the refusal was not recorded, and its claim rolled back", rows)
	}
	if got := counter(t, h, "shop_idempotency_results_total", "result", resultError); got != 1 {
		t.Errorf("results{error} = %v, want 1", got)
	}
}
