package likes_test

import (
	"context"
	"testing"

	"github.com/shop-example/shop/harness/testenv"
	"github.com/shop-example/shop/internal/likes"
	"github.com/shop-example/shop/internal/platform/layers"
	"github.com/shop-example/shop/internal/platform/problem"
)

// The layers taken off one by one and together are raced over two
// replicas through HTTP in ablation_test.go (TestAblation_Like,
// docs/ABLATION.md), and so are the storms of many users
// (race_http_test.go); these are the flow's races on the service.

// Twenty clicks of one user liking one post at once, on two replicas,
// with each strategy of the lock: exactly one writes (the row is at
// version 1), the count is 1, and every click answers liked with count
// 1. With the lock off the database layers alone hold: the first like's
// insert wins, the others lose on likes_pkey, re-read, and find it
// liked.
func TestSet_OneUserManyClicks(t *testing.T) {
	for _, tt := range []struct {
		lock likes.LockStrategy
		on   layers.Set
	}{
		{likes.LockAdvisory, layers.Set{}},
		{likes.LockRedsync, layers.Set{}},
		{likes.LockAdvisory, layers.Off(layers.Lock)},
		{likes.LockRedsync, layers.Off(layers.Lock)},
	} {
		t.Run(string(tt.lock)+"/"+tt.on.String(), func(t *testing.T) {
			ctx := context.Background()
			f := newFixture(t)
			a, _ := f.serviceLocking(t, tt.lock, tt.on, 4)
			b, _ := f.serviceLocking(t, tt.lock, tt.on, 4)
			users := f.users(t, 1)
			p := f.mustPost(t, a, users[0])
			const clicks = 20
			testenv.Together(clicks, func(i int) {
				svc := []*likes.Service{a, b}[i%2]
				r, err := svc.Set(ctx, users[0], p.ID, likes.Liked)
				switch {
				case problem.CodeOf(err) == problem.ResourceBusy:
				case err != nil:
					t.Errorf("click %d: %v", i, err)
				case r.State != likes.Liked || r.LikeCount != 1:
					t.Errorf("click %d answered %+v, want liked with count 1", i, r)
				}
			})
			if v := f.count(t, `SELECT version::int FROM likes WHERE post_id = $1`, p.ID); v != 1 {
				t.Errorf("like row at version %d, want 1: one write", v)
			}
			if n := f.checkCounts(t, p.ID); n != 1 {
				t.Errorf("%d liked rows, want 1", n)
			}
		})
	}
}
