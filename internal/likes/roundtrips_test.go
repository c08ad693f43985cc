package likes_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shop-example/shop/harness/testenv"
	"github.com/shop-example/shop/internal/likes"
	"github.com/shop-example/shop/internal/platform/lock"
	"github.com/shop-example/shop/internal/platform/metrics"
)

// TestSet_ThreeRoundTrips: a like or an unlike that changes something
// costs three round trips to PostgreSQL, under either lock: the first
// look, then BEGIN with the advisory lock (by default) and the read under
// it, then the write with COMMIT. A like already where it is asked to be
// costs the first look alone.
func TestSet_ThreeRoundTrips(t *testing.T) {
	for _, strategy := range []likes.LockStrategy{likes.LockAdvisory, likes.LockRedsync} {
		t.Run(string(strategy), func(t *testing.T) {
			ctx := context.Background()
			f := newFixture(t)
			trips := &testenv.RoundTrips{}
			cfg, err := pgxpool.ParseConfig(f.pool.Config().ConnString())
			if err != nil {
				t.Fatal(err)
			}
			// One connection: the warm-up prepares the statements the
			// count sees.
			cfg.MaxConns, cfg.ConnConfig.Tracer = 1, trips
			traced, err := pgxpool.NewWithConfig(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(traced.Close)
			svc, err := likes.NewService(likes.Config{DB: traced, Locker: lock.None{}, Metrics: metrics.New(),
				Now: f.clock.Now, Shards: 4, Lock: strategy})
			if err != nil {
				t.Fatal(err)
			}
			users := f.users(t, 2)
			p := f.mustPost(t, svc, users[0])
			if _, err := svc.Set(ctx, users[0], p.ID, likes.Liked); err != nil {
				t.Fatalf("warm-up: %v", err)
			}
			for _, step := range []struct {
				name  string
				user  string
				want  likes.State
				trips int64
			}{
				{"FirstLike", users[1], likes.Liked, 3},
				{"LikeOfALikedPost", users[1], likes.Liked, 1},
				{"Unlike", users[1], likes.Unliked, 3},
				{"LikeAgain", users[1], likes.Liked, 3},
			} {
				trips.Reset()
				if _, err := svc.Set(ctx, step.user, p.ID, step.want); err != nil {
					t.Fatalf("%s: %v", step.name, err)
				}
				if n := trips.N(); n != step.trips {
					t.Errorf("%s: %d round trips, want %d", step.name, n, step.trips)
				}
			}
			f.checkCounts(t, p.ID)
		})
	}
}
