package likes_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/shop-example/shop/harness/ablation"
	"github.com/shop-example/shop/harness/apptest"
	"github.com/shop-example/shop/harness/testenv"
	"github.com/shop-example/shop/internal/app"
	"github.com/shop-example/shop/internal/likes"
	"github.com/shop-example/shop/internal/platform/layers"
)

// TestAblation_Like is the like flow's ablation matrix (docs/ABLATION.md):
// users click like three times at once over two replicas, half of them on
// a like row that exists (liked once, then unliked), half on none; then
// half of the users click unlike three times at once. Invariant: the
// post's count is the number of users who like it, and each user has one
// like row. A click the counter's CHECK refuses (a 500 whose logged error
// names post_like_shards_n_nonnegative) is the count's drift caught by the
// database, and counts as a violation; any other 500 fails the row.
func TestAblation_Like(t *testing.T) {
	const users, clicks = 60, 3
	testenv.Matrix(t, ablation.LikePost(), ablation.Scenario{
		Text:         fmt.Sprintf("%d users like one post over two replicas, each clicking %d times at once, half of them on a like row that exists (liked, then unliked) and half on none; then half of them unlike it the same way. Invariant: the count is the number of users who like the post, and each user has one like row.", users, clicks),
		Counted:      fmt.Sprintf("likes miscounted, duplicate like rows, and clicks refused by %s, of %d users", likes.ConstraintCountNotBelow0, users),
		Progress:     fmt.Sprintf("users who like the post after the likes, of %d", users),
		ProgressWant: users,
	}, func(t *testing.T, row ablation.Row, probe *layers.Probe) testenv.Outcome {
		refusals := newConstraintLog(apptest.Logger(t).Handler(), likes.ConstraintCountNotBelow0)
		e := apptest.NewAblation(t, row, app.Deps{Logger: slog.New(refusals)},
			likes.ConstraintOneLike, likes.ConstraintCountNotBelow0)
		us := testenv.Users(t, e.DB, users)
		p := apptest.MustCreatePost(t, e.R(0), us[0].Token, "ablation")
		for i := 0; i < users; i += 2 {
			for _, liked := range []bool{true, false} {
				apptest.WantStatus(t, apptest.SetLike(t, e.R(i), us[i].Token, p.ID, liked), http.StatusOK)
			}
		}
		e.Warm(t, 32)
		probe.Reset()
		violations, progress := 0, 0
		phase := func(who func(i int) bool, liked bool, want int) {
			var failed atomic.Int64 // 500s: each must be a refusal the log names
			before := refusals.count.Load()
			testenv.Together(users*clicks, func(i int) {
				u := i / clicks
				if !who(u) {
					return
				}
				res := apptest.UntilNotBusy(t, func(attempt int) apptest.Response {
					return apptest.SetLike(t, e.R(i+attempt), us[u].Token, p.ID, liked)
				})
				switch {
				case res.Status == http.StatusOK:
				case res.Status == http.StatusInternalServerError && res.Code() == "internal":
					failed.Add(1)
				default:
					t.Errorf("%s: %s", us[u].Name, res)
				}
			})
			refused := int(refusals.count.Load() - before)
			if n := int(failed.Load()); n != refused {
				t.Errorf("liked=%v: %d answers 500, %d of them logged as refused by %s: the others broke something else", liked, n, refused, refusals.name)
			}
			c := apptest.CountLikes(t, e, us[0].Token, p.ID)
			violations += abs(c.Counted-want) + abs(c.Users-want) + c.Dupes + refused
			if liked {
				progress = min(c.Users, want)
			}
			t.Logf("liked=%v: want %d, got %+v, %d refused by %s", liked, want, c, refused, refusals.name)
		}
		phase(func(int) bool { return true }, true, users)
		phase(func(i int) bool { return i%2 == 1 }, false, users/2)
		return testenv.Outcome{Violations: violations, Progress: progress}
	})
}

// constraintLog passes records on to its Handler, counting those at
// error level whose attributes name the constraint: the requests a
// constraint refused, as the edge logs them.
type constraintLog struct {
	slog.Handler
	name  string
	count *atomic.Int64
}

func newConstraintLog(h slog.Handler, name string) constraintLog {
	return constraintLog{Handler: h, name: name, count: new(atomic.Int64)}
}

func (h constraintLog) Handle(ctx context.Context, r slog.Record) error {
	if r.Level >= slog.LevelError {
		r.Attrs(func(a slog.Attr) bool {
			if strings.Contains(a.Value.String(), `constraint "`+h.name+`"`) {
				h.count.Add(1)
				return false
			}
			return true
		})
	}
	return h.Handler.Handle(ctx, r)
}

func (h constraintLog) WithAttrs(as []slog.Attr) slog.Handler {
	h.Handler = h.Handler.WithAttrs(as)
	return h
}

func (h constraintLog) WithGroup(name string) slog.Handler {
	h.Handler = h.Handler.WithGroup(name)
	return h
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}
