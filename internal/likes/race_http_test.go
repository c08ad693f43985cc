package likes_test

import (
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/shop-example/shop/harness/apptest"
	"github.com/shop-example/shop/harness/testenv"
	"github.com/shop-example/shop/harness/variants"
	"github.com/shop-example/shop/internal/app"
	"github.com/shop-example/shop/internal/platform/layers"
)

// TestLikes_Storm: 150 users like one post over two replicas, each
// clicking 3 times at once; then half of them unlike it the same way.
// The count must be exactly 150, then 75, by every reading: the sum of
// the counter rows, the liked rows, the distinct users, and the API; no
// user has two like rows; each counter row equals the liked rows naming
// it; liked_by_me is right for each user; the reconciler agrees.
func TestLikes_Storm(t *testing.T) {
	const users, clicks = 150, 3
	e := apptest.New(t, 2, nil)
	us := testenv.Users(t, e.DB, users)
	p := apptest.MustCreatePost(t, e.R(0), us[0].Token, "a viral post")
	e.Warm(t, 32)

	storm := func(who int, liked bool) {
		t.Helper()
		testenv.Together(who*clicks, func(i int) {
			u := us[i/clicks]
			res := apptest.UntilNotBusy(t, func(attempt int) apptest.Response { return apptest.SetLike(t, e.R(i+attempt), u.Token, p.ID, liked) })
			if res.Status != http.StatusOK {
				t.Errorf("%s: %s", u.Name, res)
				return
			}
			a := apptest.Decode[apptest.LikeAnswer](t, res)
			if a.Liked != liked || a.PostID != p.ID || a.LikeCount < 0 || a.LikeCount > users {
				t.Errorf("%s: answered %+v, want liked=%v and a count in [0, %d]", u.Name, a, liked, users)
			}
		})
	}
	checkLikedByMe := func(likes func(i int) bool) {
		t.Helper()
		apptest.InParallel(users, 16, func(i int) {
			got := apptest.MustGetPost(t, e.R(i), us[i].Token, p.ID)
			if got.LikedByMe != likes(i) {
				t.Errorf("%s: liked_by_me %v, want %v", us[i].Name, got.LikedByMe, likes(i))
			}
		})
	}

	storm(users, true)
	apptest.CountLikes(t, e, us[0].Token, p.ID).Check(t, users)
	checkLikedByMe(func(int) bool { return true })

	storm(users/2, false)
	apptest.CountLikes(t, e, us[0].Token, p.ID).Check(t, users/2)
	checkLikedByMe(func(i int) bool { return i >= users/2 })

	res := e.R(1).Do(t, http.MethodGet, "/v1/likes/reconciliation", apptest.AdminToken, nil)
	apptest.WantStatus(t, res, http.StatusOK)
	if r := apptest.Decode[struct {
		Checked int `json:"posts_checked"`
		Drifted int `json:"drifted_posts"`
	}](t, res); r.Checked != 1 || r.Drifted != 0 {
		t.Errorf("reconciliation: %s, want 1 post checked, none drifted", res.Body)
	}
	// The duplicate clicks were stopped by the state rule (a click that
	// found its twin's like made), never written twice.
	stopped := 0
	for _, r := range e.Replicas {
		stopped += len(apptest.GrepLines(apptest.Scrape(t, r), `shop_conflicts_stopped_total{flow="like_post",layer="state"}`))
	}
	if stopped == 0 {
		t.Error("no replica counted a duplicate click stopped by the state rule")
	}
}

// TestLikes_Spam: one user sends 30 likes and unlikes of one post at
// once over two replicas, five rounds. After each round the like is in
// one of the states the answers reported (the one the last write made),
// the count matches it (1 or 0) by every reading, and there is one like
// row, with the lock in PostgreSQL (the default) and in Redis
// (SHOP_LIKE_LOCK=redsync). With the lock off the database layers hold
// on their own; with the lock and the version check off, requests that
// read the same state each write and count their move: the count leaves
// 0 and 1 (the row asserts that it breaks).
func TestLikes_Spam(t *testing.T) {
	const rounds, requests = 5, 30
	for _, tt := range []struct {
		lock   string
		on     layers.Set
		breaks bool
	}{
		{"advisory", layers.Set{}, false},
		{"redsync", layers.Set{}, false},
		{"advisory", layers.Off(layers.Lock), false},
		{"advisory", layers.Off(layers.Lock, layers.Version), true},
	} {
		t.Run(tt.lock+"/"+strings.ReplaceAll(tt.on.String(), ", ", "+"), func(t *testing.T) {
			e := apptest.NewWith(t, 2, map[string]string{"SHOP_LIKE_LOCK": tt.lock},
				app.Deps{Variants: variants.For(tt.on, "", nil)})
			u := testenv.Users(t, e.DB, 1)[0]
			p := apptest.MustCreatePost(t, e.R(0), u.Token, "spammed")
			e.Warm(t, 16)
			broken := 0
			for round := range rounds {
				var mu sync.Mutex
				answered := map[bool]bool{}
				refused := 0 // see countRefused
				testenv.Together(requests, func(i int) {
					liked := (i+round)%2 == 0
					res := apptest.SetLike(t, e.R(i), u.Token, p.ID, liked)
					switch {
					case res.Status == http.StatusOK:
						mu.Lock()
						answered[apptest.Decode[apptest.LikeAnswer](t, res).Liked] = true
						mu.Unlock()
					case res.Code() == "resource_busy":
					case tt.breaks && countRefused(res):
						// With the lock and the version check off, two
						// requests that read the same state both move the
						// count.
						mu.Lock()
						refused++
						mu.Unlock()
					default:
						t.Errorf("round %d: %s", round, res)
					}
				})
				final := apptest.MustGetPost(t, e.R(round), u.Token, p.ID)
				want := 0
				if final.LikedByMe {
					want = 1
				}
				c := apptest.CountLikes(t, e, u.Token, p.ID)
				// No row until the first like is made; then one, ever.
				rows := e.Count(t, `SELECT count(*)::int FROM likes WHERE post_id = $1`, p.ID)
				ok := refused == 0 && answered[final.LikedByMe] && rows <= 1 &&
					c == (apptest.LikeCounts{Liked: want, Counted: want, Users: want, LikeAnswer: want})
				if !ok {
					broken++
					if !tt.breaks {
						t.Errorf("round %d: liked_by_me %v (answered: %v), %d like rows, counts %+v",
							round, final.LikedByMe, answered, rows, c)
					}
				}
			}
			if tt.breaks && broken == 0 {
				t.Errorf("with %s the count held in all %d rounds: this case cannot show what the layers prevent", tt.on, rounds)
			}
			t.Logf("%s: %d of %d rounds broke", tt.on, broken, rounds)
		})
	}
}

// countRefused reports whether res is the 500 a like or unlike gets when
// a counter row's CHECK (n >= 0) still refuses it after re-reading: the
// count has drifted from the like rows. With the layers that keep the
// count right taken off, that refusal is the breakage, counted as such;
// with them on it never happens.
func countRefused(res apptest.Response) bool {
	return res.Status == http.StatusInternalServerError && res.Code() == "internal"
}
