package seats_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shop-example/shop/harness/testenv"
	"github.com/shop-example/shop/internal/platform/lock"
	"github.com/shop-example/shop/internal/platform/metrics"
	"github.com/shop-example/shop/internal/seats"
)

// TestSeats_RoundTrips: what each use case costs in round trips to
// PostgreSQL, called without a key's record (through HTTP, the claim
// adds one to a hold, alone with BEGIN, and travels with a confirm's
// first): a hold three (the read before any lock; BEGIN with the locks,
// the reads and the hold's row; the writes with COMMIT), a confirm two,
// a release two, a batch of the expiry one. A seat that moves between a
// hold's read and its write fails the write on the server (the
// statement's own check, before COMMIT), and the hold tries again and is
// made.
func TestSeats_RoundTrips(t *testing.T) {
	if testing.Short() {
		t.Skip("needs PostgreSQL")
	}
	db := testenv.Pool(t)
	users := testenv.Users(t, db, 1)
	trips := &testenv.RoundTrips{}
	cfg, err := pgxpool.ParseConfig(db.Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	// One connection: the warm-up prepares the statements the count sees.
	cfg.MaxConns, cfg.ConnConfig.Tracer = 1, trips
	traced, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(traced.Close)
	clock := testenv.NewClock()
	svc, err := seats.NewService(seats.Config{DB: traced, Locker: lock.None{}, Metrics: metrics.New(), Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ev, err := svc.CreateEvent(ctx, "round trips", 1, 10)
	if err != nil {
		t.Fatal(err)
	}
	u := users[0].ID
	count := func(what string, want int64, fn func() error) {
		t.Helper()
		trips.Reset()
		if err := fn(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if n := trips.N(); n != want {
			t.Errorf("%s: %d round trips, want %d", what, n, want)
		}
	}
	// The warm-up: every statement of a hold, a confirm and a release.
	warm, err := svc.Hold(ctx, u, "warm", ev.ID, []string{"A9"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Confirm(ctx, u, warm.ID); err != nil {
		t.Fatal(err)
	}
	if warm, err = svc.Hold(ctx, u, "warm-2", ev.ID, []string{"A10"}); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Release(ctx, u, warm.ID); err != nil {
		t.Fatal(err)
	}

	var h seats.Hold
	count("hold", 3, func() (err error) { h, err = svc.Hold(ctx, u, "k1", ev.ID, []string{"A1", "A2"}); return err })
	count("confirm", 2, func() error { _, err := svc.Confirm(ctx, u, h.ID); return err })
	count("hold", 3, func() (err error) { h, err = svc.Hold(ctx, u, "k2", ev.ID, []string{"A3"}); return err })
	count("release", 2, func() error { _, err := svc.Release(ctx, u, h.ID); return err })
	count("hold", 3, func() (err error) { h, err = svc.Hold(ctx, u, "k3", ev.ID, []string{"A4"}); return err })
	clock.Advance(seats.DefaultHoldTTL + time.Second)
	count("expiry", 1, func() error {
		n, err := svc.ExpireDue(ctx)
		if err == nil && n != 1 {
			err = errors.New("expired no hold")
		}
		return err
	})

	// A5 moves (a version bump) after the hold's second round trip read
	// it: the write reaches fewer seats than asked and fails before
	// COMMIT; the first try rolls back (a round trip of its own), and the
	// second reads again and is made.
	trips.Before(3, func() {
		if _, err := db.Exec(ctx, `UPDATE seats SET version = version + 1 WHERE event_id = $1 AND seat = 'A5'`, ev.ID); err != nil {
			t.Error(err)
		}
	})
	h, err = svc.Hold(ctx, u, "k4", ev.ID, []string{"A5"})
	if err != nil {
		t.Fatalf("hold of a seat that moved: %v", err)
	}
	if n := trips.N(); n != 6 {
		t.Errorf("%d round trips for a hold whose seat moved, want 6 (a rollback and a second try)", n)
	}
	if h.Status != seats.Active {
		t.Errorf("the hold of a seat that moved: %+v", h)
	}
}
