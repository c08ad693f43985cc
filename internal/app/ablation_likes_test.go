package app_test

import (
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/shop-example/shop/internal/platform/layers"
	"github.com/shop-example/shop/internal/platform/testenv"
)

// TestAblation_Like is the like flow's ablation matrix (docs/ABLATION.md):
// users click like three times at once over two replicas, half of them on
// a like row that exists (liked once, then unliked), half on none; then
// half of the users click unlike three times at once. Invariant: the
// post's count is the number of users who like it, and each user has one
// like row.
func TestAblation_Like(t *testing.T) {
	const users, clicks = 60, 3
	rows := []testenv.Row{
		{Why: "every layer"},
		{Layers: off(idem), Why: "likes take no Idempotency-Key: PUT and DELETE are idempotent by meaning, so the layer does not apply"},
		{Layers: off(lck), Why: "the version check refuses a click that read the like before its twin wrote it, and likes_pkey a second first like; the loser re-reads and finds the like made"},
		{Layers: off(state), Why: "the counter moves by what the write changed in the row, not by what was asked: a click that likes a liked post writes it again but counts nothing"},
		{Layers: off(version), Why: "the lock serialises one user's clicks: each reads what the one before wrote"},
		{Layers: off(constraint), Why: "the lock serialises one user's clicks, so no two of them insert the first like row"},
		{Layers: off(layers.Database...), Why: "the lock alone: each click reads the last one's write, and the counter moves by what that write changed"},
		{Layers: off(lck, version), Breaks: true,
			Why: "the race the version check exists for: clicks read the unliked row before any of them writes, and each writes liked and counts one"},
		{Layers: off(lck, constraint), Breaks: true,
			Why: "two first likes find no row and each inserts one: without likes_pkey the duplicate is inserted and counted"},
	}
	testenv.Matrix(t, "like_post",
		fmt.Sprintf("%d users like one post over two replicas, each clicking %d times at once, half of them on a like row that exists (liked, then unliked) and half on none; then half of them unlike it the same way. Invariant: the count is the number of users who like the post, and each user has one like row.", users, clicks),
		rows, func(t *testing.T, row testenv.Row) testenv.Outcome {
			e := ablationEnv(t, row, 0,
				`ALTER TABLE likes DROP CONSTRAINT likes_pkey`,
				`ALTER TABLE post_like_shards DROP CONSTRAINT post_like_shards_n_nonnegative`)
			us := testenv.Users(t, e.db, users)
			p := mustCreatePost(t, e.r(0), us[0].Token, "ablation")
			for i := 0; i < users; i += 2 {
				for _, liked := range []bool{true, false} {
					wantStatus(t, setLike(t, e.r(i), us[i].Token, p.ID, liked), http.StatusOK)
				}
			}
			e.warm(t, 32)
			violations := 0
			phase := func(who func(i int) bool, liked bool, want int) {
				var refused atomic.Int64 // see countRefused
				testenv.Together(users*clicks, func(i int) {
					u := i / clicks
					if !who(u) {
						return
					}
					res := untilNotBusy(t, func(attempt int) response { return setLike(t, e.r(i+attempt), us[u].Token, p.ID, liked) })
					switch {
					case res.Status == http.StatusOK:
					case row.Breaks && countRefused(res):
						refused.Add(1)
					default:
						t.Errorf("%s: %s", us[u].Name, res)
					}
				})
				c := e.countLikes(t, us[0].Token, p.ID)
				violations += abs(c.counted-want) + abs(c.users-want) + c.dupes + int(refused.Load())
				t.Logf("liked=%v: want %d, got %+v", liked, want, c)
			}
			phase(func(int) bool { return true }, true, users)
			phase(func(i int) bool { return i%2 == 1 }, false, users/2)
			return testenv.Outcome{Violations: violations, Unit: "likes miscounted or duplicate rows",
				Of: users, OfUnit: "users"}
		})
}
