package seats_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/shop-example/shop/harness/apptest"
	"github.com/shop-example/shop/harness/variants"
	"github.com/shop-example/shop/internal/app"
	"github.com/shop-example/shop/internal/platform/layers"
)

// TestSeats_TakenSeatsFailFast: while another transaction holds the seat
// locks of A1 and A2 (as a hold in flight would), a hold of A1, which the
// database shows taken, is refused 409 seat_unavailable from the one read
// before any lock: it does not wait for A1's lock. A hold of the free A2
// waits for its lock in PostgreSQL (the lock is held) and is granted once
// it is released. With the state rule off the read refuses nothing, and
// the hold of A1 waits for the lock too, until its wait budget runs out.
func TestSeats_TakenSeatsFailFast(t *testing.T) {
	t.Run("StateOn", func(t *testing.T) {
		e := apptest.New(t, 1, nil)
		r := e.R(0)
		ev, bob, unlock := takenUnderLock(t, e)
		defer unlock()

		apptest.WantProblem(t, apptest.HoldSeats(t, r, bob.Token, ev.ID, apptest.NewKey(), "A1"), http.StatusConflict, "seat_unavailable")

		done := make(chan apptest.Response, 1)
		go func() { done <- apptest.HoldSeats(t, r, bob.Token, ev.ID, apptest.NewKey(), "A2") }()
		waitFor(t, "the hold of A2 waiting on its seat's lock", func() bool {
			return e.Count(t, `SELECT count(*)::int FROM pg_stat_activity
				WHERE datname = current_database() AND wait_event_type = 'Lock' AND wait_event = 'advisory'`) >= 1
		})
		unlock()
		apptest.WantStatus(t, <-done, http.StatusCreated)
	})
	t.Run("StateOff", func(t *testing.T) {
		e := apptest.NewWith(t, 1, nil, app.Deps{Variants: variants.For(layers.Off(layers.State), "", nil)})
		ev, bob, unlock := takenUnderLock(t, e)
		defer unlock()
		apptest.WantProblem(t, apptest.HoldSeats(t, e.R(0), bob.Token, ev.ID, apptest.NewKey(), "A1"), http.StatusConflict, "resource_busy")
	})
}

// takenUnderLock makes an event whose A1 alice holds, and bob, and takes
// the seat locks of A1 and A2 in a transaction of its own, as
// seats.Store.QueueLocks takes them (sqlAdvisoryLocks), until unlock.
func takenUnderLock(t *testing.T, e *apptest.Env) (apptest.Event, apptest.User, func()) {
	t.Helper()
	ctx := context.Background()
	r := e.R(0)
	alice, bob := apptest.MustCreateUser(t, r, "alice"), apptest.MustCreateUser(t, r, "bob")
	ev := apptest.MustCreateEvent(t, r, "fail fast", 1, 5)
	apptest.WantStatus(t, apptest.HoldSeats(t, r, alice.Token, ev.ID, apptest.NewKey(), "A1"), http.StatusCreated)
	blocker, err := e.DB.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := blocker.Exec(ctx, `SELECT count(pg_advisory_xact_lock(hashtextextended($1 || ':' || s, 0)))
		FROM unnest($2::text[]) AS s`, ev.ID, []string{"A1", "A2"}); err != nil {
		t.Fatal(err)
	}
	return ev, bob, func() { _ = blocker.Rollback(ctx) }
}
