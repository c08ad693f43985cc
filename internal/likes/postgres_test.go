package likes_test

import (
	"context"
	"errors"
	"testing"

	"github.com/shop-example/shop/harness/variants"
	"github.com/shop-example/shop/internal/likes"
	"github.com/shop-example/shop/internal/platform/layers"
)

// A like read as unliked, then liked by another request before its own
// write: the version check makes that write change nothing, so the like
// is counted once. Without the check (the second case, the store's write
// with its version condition cut out) the stale writer counts it again:
// the failure layer 3 prevents.
func TestStore_StaleWriteRefused(t *testing.T) {
	tests := []struct {
		name      string
		on        layers.Set
		wantErr   error
		wantCount int
	}{
		{"VersionChecked", layers.Set{}, likes.ErrVersionConflict, 1},
		{"VersionOff", layers.Off(layers.Version), nil, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			f := newFixture(t)
			svc, _ := f.service(t, layers.Set{}, 4)
			users := f.users(t, 1)
			p := f.mustPost(t, svc, users[0])
			// A row that exists, unliked: liked once, then unliked.
			for _, want := range []likes.State{likes.Liked, likes.Unliked} {
				if _, err := svc.Set(ctx, users[0], p.ID, want); err != nil {
					t.Fatal(err)
				}
			}
			var probe layers.Probe
			rows := variants.Likes(f.store, tt.on, &probe)
			_, _, _, err := f.move(t, rows, p.ID, users[0], likes.SetTo(likes.Liked), func() {
				// Between this read and its write, another request likes.
				if _, err := svc.Set(ctx, users[0], p.ID, likes.Liked); err != nil {
					t.Fatalf("the other request: %v", err)
				}
			})
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("stale write = %v, want %v", err, tt.wantErr)
			}
			if n := f.count(t, `SELECT sum(n)::int FROM post_like_shards WHERE post_id = $1`, p.ID); n != tt.wantCount {
				t.Errorf("count = %d, want %d (one liked row)", n, tt.wantCount)
			}
			if tt.on.Takes(layers.Version) != probe.Asked(layers.Version) {
				t.Errorf("the version check taken off: %v, want %v", probe.Asked(layers.Version), tt.on.Takes(layers.Version))
			}
			if tt.wantErr != nil {
				f.checkCounts(t, p.ID)
			}
		})
	}
}

// Two first likes of one post by one user, the second reading before
// the first inserts: likes_pkey refuses the second row, so the like is
// counted once. With the key dropped (the second case) the duplicate row
// is inserted and counted: the failure layer 4 prevents.
func TestStore_SecondFirstLikeRefused(t *testing.T) {
	tests := []struct {
		name      string
		dropKey   bool
		wantErr   error
		wantCount int
	}{
		{"PrimaryKey", false, likes.ErrDuplicateLike, 1},
		{"PrimaryKeyDropped", true, nil, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			f := newFixture(t)
			svc, _ := f.service(t, layers.Set{}, 4)
			users := f.users(t, 1)
			p := f.mustPost(t, svc, users[0])
			if tt.dropKey {
				f.mustDrop(t, likes.ConstraintOneLike)
			}
			_, _, _, err := f.move(t, f.store, p.ID, users[0], func(l *likes.Like) bool {
				if l.Exists() {
					t.Fatal("read a like row before any like")
				}
				return l.Set(likes.Liked)
			}, func() {
				if _, err := svc.Set(ctx, users[0], p.ID, likes.Liked); err != nil {
					t.Fatalf("the other request: %v", err)
				}
			})
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("second first like = %v, want %v", err, tt.wantErr)
			}
			if n := f.count(t, `SELECT sum(n)::int FROM post_like_shards WHERE post_id = $1`, p.ID); n != tt.wantCount {
				t.Errorf("count = %d, want %d", n, tt.wantCount)
			}
			if rows := f.count(t, `SELECT count(*)::int FROM likes WHERE post_id = $1`, p.ID); rows != tt.wantCount {
				t.Errorf("%d like rows, want %d", rows, tt.wantCount)
			}
		})
	}
}

// An unlike whose counter row would go below zero (a count that lost a
// like: corrupted by hand here) is refused by the CHECK, and the like row
// is not written either: both move in one statement or neither does.
func TestStore_CountBelowZeroRefused(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	svc, _ := f.service(t, layers.Set{}, 4)
	users := f.users(t, 1)
	p := f.mustPost(t, svc, users[0])
	if _, err := svc.Set(ctx, users[0], p.ID, likes.Liked); err != nil {
		t.Fatal(err)
	}
	f.mustExec(t, `UPDATE post_like_shards SET n = 0 WHERE post_id = $1`, p.ID)
	_, _, _, err := f.move(t, f.store, p.ID, users[0], likes.SetTo(likes.Unliked), nil)
	if !errors.Is(err, likes.ErrCountBelowZero) {
		t.Fatalf("unlike = %v, want %v", err, likes.ErrCountBelowZero)
	}
	if n := f.count(t, `SELECT count(*)::int FROM likes WHERE post_id = $1 AND liked AND version = 1`, p.ID); n != 1 {
		t.Errorf("the like row moved although its counter could not")
	}
}

// With the state rule off, a like of a liked post is written again (its
// version moves) but counts nothing: the counter moves by what the write
// changed in the row, not by what the request asked for.
func TestService_RelikeWithoutStateRuleCountsNothing(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	svc, _ := f.service(t, layers.Off(layers.State), 4)
	users := f.users(t, 1)
	p := f.mustPost(t, svc, users[0])
	for range 3 {
		r, err := svc.Set(ctx, users[0], p.ID, likes.Liked)
		if err != nil {
			t.Fatal(err)
		}
		if r.State != likes.Liked || r.LikeCount != 1 {
			t.Errorf("like = %+v, want liked with count 1", r)
		}
	}
	if v := f.count(t, `SELECT version::int FROM likes WHERE post_id = $1`, p.ID); v != 3 {
		t.Errorf("version %d, want 3: each like wrote the row", v)
	}
	if f.checkCounts(t, p.ID) != 1 {
		t.Error("want one liked row")
	}
}

// Many users liking and unliking a post of 4 counter rows: every counter
// row equals the liked rows that name it, and the count the flow answers
// last is the number of liked rows.
func TestService_CountIsSumOfCounterRows(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	svc, _ := f.service(t, layers.Set{}, 4)
	users := f.users(t, 40)
	p := f.mustPost(t, svc, users[0])
	for i, u := range users {
		if _, err := svc.Set(ctx, u, p.ID, likes.Liked); err != nil {
			t.Fatal(err)
		}
		if i%3 == 0 {
			if _, err := svc.Set(ctx, u, p.ID, likes.Unliked); err != nil {
				t.Fatal(err)
			}
		}
	}
	r, err := svc.Set(ctx, users[1], p.ID, likes.Liked) // a no-op: reads the count
	if err != nil {
		t.Fatal(err)
	}
	liked := f.checkCounts(t, p.ID)
	if liked != 26 || r.LikeCount != 26 {
		t.Errorf("liked rows %d, answered count %d, want 26", liked, r.LikeCount)
	}
	if used := f.count(t, `SELECT count(*)::int FROM post_like_shards WHERE post_id = $1 AND n > 0`, p.ID); used < 2 {
		t.Errorf("likes landed in %d of 4 counter rows: not spread", used)
	}
	got, err := svc.Post(ctx, users[1], p.ID)
	if err != nil || got.LikeCount != 26 || !got.LikedByMe {
		t.Errorf("post = %+v, %v; want count 26, liked by me", got, err)
	}
	got, err = svc.Post(ctx, users[0], p.ID)
	if err != nil || got.LikedByMe {
		t.Errorf("post as user 0 (who unliked) = %+v, %v; want not liked by me", got, err)
	}
}

// The reconciliation finds nothing when the counts are right, and finds
// and reports (in its answer and the metrics) a counter row changed by
// hand, without changing it back.
func TestReconcile_ReportsDrift(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	svc, m := f.service(t, layers.Set{}, 4)
	users := f.users(t, 5)
	hot := f.mustPost(t, svc, users[0])
	f.mustPost(t, svc, users[1])
	for _, u := range users {
		if _, err := svc.Set(ctx, u, hot.ID, likes.Liked); err != nil {
			t.Fatal(err)
		}
	}
	r, err := svc.Reconcile(ctx)
	if err != nil || !r.Agrees() || r.Posts != 2 {
		t.Fatalf("reconcile = %+v, %v; want 2 posts that agree", r, err)
	}
	f.mustExec(t, `UPDATE post_like_shards SET n = n + 2 WHERE post_id = $1 AND shard = 0`, hot.ID)
	r, err = svc.Reconcile(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if r.Agrees() || r.Drifted != 1 || r.Drift != 2 || len(r.Listed) != 1 ||
		r.Listed[0] != (likes.Tally{PostID: hot.ID, Counted: 7, LikedRows: 5}) {
		t.Errorf("reconcile = %+v, want the hot post listed: counted 7, liked rows 5", r)
	}
	if got := metricValue(t, m, "shop_like_count_drift"); got != 2 {
		t.Errorf("shop_like_count_drift = %v, want 2", got)
	}
	if n := f.count(t, `SELECT sum(n)::int FROM post_like_shards WHERE post_id = $1`, hot.ID); n != 7 {
		t.Errorf("the reconciliation changed the count to %d; it must only report", n)
	}
}
