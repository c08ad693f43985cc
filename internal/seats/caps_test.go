package seats_test

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/shop-example/shop/harness/apptest"
	"github.com/shop-example/shop/harness/testenv"
	"github.com/shop-example/shop/harness/variants"
	"github.com/shop-example/shop/internal/app"
	"github.com/shop-example/shop/internal/platform/layers"
	"github.com/shop-example/shop/internal/seats"
)

// capProblem is a hold_limit_reached answer: the cap reached and what the
// user holds of the event.
type capProblem struct {
	Code      string `json:"code"`
	Limit     string `json:"limit"`
	Max       int    `json:"max"`
	Holds     int    `json:"holds"`
	HeldSeats int    `json:"held_seats"`
}

// wantCapped checks that res is 409 hold_limit_reached on limit.
func wantCapped(t testing.TB, res apptest.Response, limit string) capProblem {
	t.Helper()
	apptest.WantProblem(t, res, http.StatusConflict, "hold_limit_reached")
	p := apptest.Decode[capProblem](t, res)
	if p.Limit != limit {
		t.Fatalf("hold_limit_reached on %q, want %q: %s", p.Limit, limit, res)
	}
	return p
}

// holding is what the database says one user holds of one event.
func holding(t testing.TB, e *apptest.Env, userID, eventID string) (holds, seats int) {
	t.Helper()
	err := e.DB.QueryRow(context.Background(), `SELECT count(*)::int, coalesce(sum(cardinality(seats)), 0)::int
		FROM holds WHERE user_id = $1 AND event_id = $2 AND status = 'active'`, userID, eventID).Scan(&holds, &seats)
	if err != nil {
		t.Fatalf("holding: %v", err)
	}
	return holds, seats
}

// TestSeats_HoldCaps walks the caps with their defaults: four active
// holds and ten held seats per user per event. A hold past a cap is 409
// hold_limit_reached and holds nothing; a release, or a hold's time
// running out, makes room; another event or another user has caps of its
// own.
func TestSeats_HoldCaps(t *testing.T) {
	e := apptest.New(t, 1, nil)
	r := e.R(0)
	alice, bob := apptest.MustCreateUser(t, r, "alice"), apptest.MustCreateUser(t, r, "bob")
	ev := apptest.MustCreateEvent(t, r, "Caps", 2, 10)
	other := apptest.MustCreateEvent(t, r, "Other", 1, 10)

	var held []apptest.SeatHold
	for i := 1; i <= 4; i++ {
		res := apptest.HoldSeats(t, r, alice.Token, ev.ID, apptest.NewKey(), seats.Label(0, i))
		apptest.WantStatus(t, res, http.StatusCreated)
		held = append(held, apptest.Decode[apptest.SeatHold](t, res))
	}
	p := wantCapped(t, apptest.HoldSeats(t, r, alice.Token, ev.ID, apptest.NewKey(), "A5"), "holds_per_event")
	if p.Max != 4 || p.Holds != 4 || p.HeldSeats != 4 {
		t.Errorf("the refusal says %+v, want max 4, 4 holds of 4 seats", p)
	}
	if got := apptest.MustGetEvent(t, r, ev.ID); got.Held != 4 {
		t.Fatalf("a capped hold held seats: %+v", got)
	}
	// Another event, another user: caps of their own.
	apptest.WantStatus(t, apptest.HoldSeats(t, r, alice.Token, other.ID, apptest.NewKey(), "A1"), http.StatusCreated)
	apptest.WantStatus(t, apptest.HoldSeats(t, r, bob.Token, ev.ID, apptest.NewKey(), "A5"), http.StatusCreated)

	// A release makes room: three holds of one seat and one of seven are
	// ten seats, the cap; one seat more is past it.
	apptest.WantStatus(t, apptest.ReleaseHold(t, r, alice.Token, held[0].ID), http.StatusOK)
	res := apptest.HoldSeats(t, r, alice.Token, ev.ID, apptest.NewKey(), "B1", "B2", "B3", "B4", "B5", "B6", "B7")
	apptest.WantStatus(t, res, http.StatusCreated)
	apptest.WantStatus(t, apptest.ReleaseHold(t, r, alice.Token, held[1].ID), http.StatusOK)
	p = wantCapped(t, apptest.HoldSeats(t, r, alice.Token, ev.ID, apptest.NewKey(), "B8", "B9"), "seats_per_event")
	if p.Max != 10 || p.Holds != 3 || p.HeldSeats != 9 {
		t.Errorf("the refusal says %+v, want max 10, 3 holds of 9 seats", p)
	}
	if holds, n := holding(t, e, alice.ID, ev.ID); holds != 3 || n != 9 {
		t.Fatalf("alice holds %d holds of %d seats, want 3 of 9", holds, n)
	}

	// A hold whose time is up counts no more, before the expiry job runs.
	e.Clock.Advance(e.Cfg.SeatHoldTTL + time.Second)
	apptest.WantStatus(t, apptest.HoldSeats(t, r, alice.Token, ev.ID, apptest.NewKey(), "B8", "B9", "B10"), http.StatusCreated)

	apptest.WantMetric(t, r, `shop_seat_holds_total{outcome="capped"} 2`)
	if v := readSeatRows(t, e, ev.ID).violations(); v != 0 {
		t.Fatalf("seat rows disagree: %+v", readSeatRows(t, e, ev.ID))
	}
	if m := miscounted(t, e, ev.ID); m != 0 {
		t.Fatalf("%d users' counted rows disagree with their active holds", m)
	}
}

// SHOP_SEAT_CAP_PER_HOLD lowers the seats of one hold: more is 400
// invalid_request, as more than ten always is, and holds nothing.
func TestSeats_HoldCapPerHold(t *testing.T) {
	e := apptest.New(t, 1, map[string]string{"SHOP_SEAT_CAP_PER_HOLD": "2"})
	r := e.R(0)
	alice := apptest.MustCreateUser(t, r, "alice")
	ev := apptest.MustCreateEvent(t, r, "Pairs", 1, 10)
	apptest.WantProblem(t, apptest.HoldSeats(t, r, alice.Token, ev.ID, apptest.NewKey(), "A1", "A2", "A3"), http.StatusBadRequest, "invalid_request")
	apptest.WantStatus(t, apptest.HoldSeats(t, r, alice.Token, ev.ID, apptest.NewKey(), "A1", "A2"), http.StatusCreated)
	if got := apptest.MustGetEvent(t, r, ev.ID); got.Held != 2 {
		t.Fatalf("held %d seats, want 2", got.Held)
	}
}

// TestSeats_RaceHoldCaps: one user sends 8 holds of distinct seats at
// once over two replicas. Each hold's transaction, once it has read what
// the user holds, is made to wait on its seats' rows (locked by the test)
// until all 8 have started, so every count is read while the others are
// in flight. As many are granted as the cap admits, the others answer
// hold_limit_reached, and the database holds no more than the cap: with
// the lock on (user, event) because the holds take turns; without it
// (layer 1 off) because each hold counts itself in the user's row
// (holdings) at its commit, and holdings_within_caps refuses the count
// past a cap, so those holds roll back, read again and are refused. With
// neither, each hold counts the user's holds before any other has
// committed, and the user holds more than the cap.
func TestSeats_RaceHoldCaps(t *testing.T) {
	if testing.Short() {
		t.Skip("races real PostgreSQL and Redis")
	}
	const n = 8
	for _, tt := range []struct {
		name    string
		vars    map[string]string
		perHold int
		limit   string
		granted int // holds granted: the cap's room
		// The caps: active holds and held seats per user per event.
		maxHolds, maxSeats int
	}{
		// Four holds per event, of one seat each.
		{name: "Holds", perHold: 1, limit: "holds_per_event", granted: 4, maxHolds: 4, maxSeats: 10},
		// Ten seats per event, in holds of three: three holds.
		{name: "Seats", vars: map[string]string{"SHOP_SEAT_CAP_HOLDS": "100"}, perHold: 3, limit: "seats_per_event", granted: 3, maxHolds: 100, maxSeats: 10},
	} {
		for _, lockOff := range []bool{false, true} {
			name := tt.name
			var deps app.Deps
			if lockOff {
				name += "WithoutTheLock"
				deps.Variants = variants.For(layers.Off(layers.Lock), "", nil)
			}
			t.Run(name, func(t *testing.T) {
				e := apptest.NewWith(t, 2, tt.vars, deps)
				holds, heldSeats, capped := raceHoldCaps(t, e, n, tt.perHold, tt.limit)
				if holds > tt.maxHolds || heldSeats > tt.maxSeats {
					t.Errorf("the user holds %d holds of %d seats: past the caps (%d holds, %d seats)", holds, heldSeats, tt.maxHolds, tt.maxSeats)
				}
				if holds != tt.granted || capped != n-tt.granted {
					t.Errorf("%d holds granted and %d capped, want %d and %d", holds, capped, tt.granted, n-tt.granted)
				}
				// What refused the holds past the cap: with the lock, the
				// caps' rule, each hold reading what the one before
				// committed; without it, holdings_within_caps first, since
				// every hold read its count before any other committed.
				refused := stoppedByConstraint(t, e)
				switch {
				case !lockOff && refused != 0:
					t.Errorf("with the lock, holdings_within_caps refused %d holds: the lock did not serialise them", refused)
				case lockOff && refused < n-tt.granted:
					t.Errorf("without the lock, holdings_within_caps refused %d holds, want at least %d", refused, n-tt.granted)
				}
			})
		}
	}
	// The breaking case: the same race without the lock on (user, event)
	// and without holdings_within_caps. The count is still checked, but
	// from a snapshot the other holds have not committed to yet, and
	// nothing refuses the count they make together.
	t.Run("WithoutTheLockNorTheConstraint", func(t *testing.T) {
		e := apptest.NewWith(t, 2, nil, app.Deps{Variants: variants.For(layers.Off(layers.Lock), "", nil)})
		e.Drop(t, seats.ConstraintWithinCaps)
		holds, heldSeats, _ := raceHoldCaps(t, e, n, 1, "holds_per_event")
		t.Logf("without the lock and the constraint the user holds %d holds of %d seats", holds, heldSeats)
		if holds <= 4 {
			t.Errorf("without the lock on (user, event) and holdings_within_caps, %d holds granted: the race did not get past the count", holds)
		}
	})
}

// raceHoldCaps sends n holds of perHold distinct seats by one user at
// once, with the event's seat rows locked until all n wait on a lock in
// PostgreSQL, and returns what the database says the user holds and how
// many answers were hold_limit_reached on limit.
func raceHoldCaps(t *testing.T, e *apptest.Env, n, perHold int, limit string) (holds, heldSeats, capped int) {
	t.Helper()
	ctx := context.Background()
	ev := apptest.MustCreateEvent(t, e.R(0), "caps race", 1, n*perHold)
	u := testenv.Users(t, e.DB, 1)[0]
	e.Warm(t, 16)

	blocker, err := e.DB.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer blocker.Rollback(ctx) //nolint:errcheck // released below; a second rollback is a no-op
	if _, err := blocker.Exec(ctx, `SELECT 1 FROM seats WHERE event_id = $1 FOR UPDATE`, ev.ID); err != nil {
		t.Fatal(err)
	}
	answers := make([]apptest.Response, n)
	var wg sync.WaitGroup
	for i := range n {
		labels := make([]string, perHold)
		for j := range labels {
			labels[j] = seats.Label(0, i*perHold+j+1)
		}
		wg.Go(func() { answers[i] = apptest.HoldSeats(t, e.R(i), u.Token, ev.ID, apptest.NewKey(), labels...) })
	}
	// Every hold waits in PostgreSQL: on the seat rows the blocker holds,
	// or, with the lock on, on the lock on (user, event).
	waitFor(t, fmt.Sprintf("%d holds waiting on a lock", n), func() bool {
		return e.Count(t, `SELECT count(*)::int FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`) >= n
	})
	if err := blocker.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	for _, res := range answers {
		switch {
		case res.Status == http.StatusCreated:
		case res.Code() == "hold_limit_reached":
			wantCapped(t, res, limit)
			capped++
		default:
			t.Errorf("hold: %s", res)
		}
	}
	holds, heldSeats = holding(t, e, u.ID, ev.ID)
	t.Logf("%d holds of %d seats held, %d capped", holds, heldSeats, capped)
	if v := readSeatRows(t, e, ev.ID).violations(); v != 0 {
		t.Errorf("seat rows disagree: %+v", readSeatRows(t, e, ev.ID))
	}
	if m := miscounted(t, e, ev.ID); m != 0 {
		t.Errorf("the user's counted row disagrees with their active holds")
	}
	return holds, heldSeats, capped
}

// stoppedByConstraint sums, over the replicas, the holds whose count a
// constraint refused (shop_conflicts_stopped_total, layer constraint).
func stoppedByConstraint(t testing.TB, e *apptest.Env) int {
	t.Helper()
	sample := regexp.MustCompile(`(?m)^shop_conflicts_stopped_total\{flow="hold_seats",layer="constraint"\} (\d+)$`)
	n := 0
	for _, r := range e.Replicas {
		if m := sample.FindStringSubmatch(apptest.Scrape(t, r)); m != nil {
			v, err := strconv.Atoi(m[1])
			if err != nil {
				t.Fatal(err)
			}
			n += v
		}
	}
	return n
}

// waitFor polls cond until it holds, failing the test after a minute.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
