package likes_test

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shop-example/shop/harness/apptest"
	"github.com/shop-example/shop/harness/testenv"
)

// The HTTP contract of API.md, "Likes": every status code of the post and
// like routes, and that a refused request changes nothing.

func TestPosts_Create(t *testing.T) {
	e := apptest.New(t, 1, nil)
	r := e.R(0)
	u := testenv.Users(t, e.DB, 1)[0]

	t.Run("Created", func(t *testing.T) {
		res := r.Do(t, http.MethodPost, "/v1/posts", u.Token, map[string]string{"title": "Hello, world"})
		apptest.WantStatus(t, res, http.StatusCreated)
		p := apptest.Decode[apptest.Post](t, res)
		if p.ID == "" || p.Title != "Hello, world" || p.LikeCount != 0 || p.LikedByMe || p.AuthorID != u.ID {
			t.Errorf("created %+v", p)
		}
		if loc := res.Header.Get("Location"); loc != "/v1/posts/"+p.ID {
			t.Errorf("Location %q, want /v1/posts/%s", loc, p.ID)
		}
		if _, err := time.Parse(time.RFC3339Nano, p.CreatedAt); err != nil {
			t.Errorf("created_at %q: %v", p.CreatedAt, err)
		}
		if got := apptest.MustGetPost(t, r, u.Token, p.ID); got != p {
			t.Errorf("GET answers %+v, want what POST answered, %+v", got, p)
		}
		if n := e.Count(t, `SELECT count(*)::int FROM post_like_shards WHERE post_id = $1 AND n = 0`, p.ID); n < 1 {
			t.Errorf("the post has no counter rows")
		}
	})
	before := e.Count(t, `SELECT count(*)::int FROM posts`)
	for name, body := range map[string]any{
		"EmptyTitle":     map[string]string{"title": ""},
		"BlankTitle":     map[string]string{"title": "  \u00a0 "},
		"TitleTooLong":   map[string]string{"title": strings.Repeat("x", 201)},
		"NoTitle":        map[string]string{},
		"NoBody":         nil,
		"TitleNotString": map[string]int{"title": 1},
		"UnknownField":   map[string]string{"title": "t", "like_count": "1000"},
		"ControlChar":    `{"title": "a\u0007b"}`,
		"NotJSON":        "title=x",
	} {
		t.Run("Bad/"+name, func(t *testing.T) {
			// A blank title is the one the document admits: no schema says "not all blank".
			breach := "body breaks the schema"
			if name == "BlankTitle" {
				breach = ""
			}
			res := r.OffContract(breach).Do(t, http.MethodPost, "/v1/posts", u.Token, body)
			apptest.WantProblem(t, res, http.StatusBadRequest, "invalid_request")
		})
	}
	if after := e.Count(t, `SELECT count(*)::int FROM posts`); after != before {
		t.Errorf("refused requests created %d posts", after-before)
	}
	t.Run("LongestTitle", func(t *testing.T) {
		apptest.WantStatus(t, r.Do(t, http.MethodPost, "/v1/posts", u.Token, map[string]string{"title": strings.Repeat("é", 200)}), http.StatusCreated)
	})
	t.Run("NoToken", func(t *testing.T) {
		apptest.WantProblem(t, r.Do(t, http.MethodPost, "/v1/posts", "", map[string]string{"title": "x"}), http.StatusUnauthorized, "unauthenticated")
	})
}

func TestPosts_Get(t *testing.T) {
	e := apptest.New(t, 1, nil)
	r := e.R(0)
	u := testenv.Users(t, e.DB, 1)[0]
	p := apptest.MustCreatePost(t, r, u.Token, "get me")
	for name, path := range map[string]string{
		"Unknown":   "/v1/posts/0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b",
		"UpperCase": "/v1/posts/" + strings.ToUpper(p.ID),
		"NoDashes":  "/v1/posts/" + strings.ReplaceAll(p.ID, "-", ""),
		"NotAnID":   "/v1/posts/latest",
	} {
		t.Run(name, func(t *testing.T) {
			apptest.WantProblem(t, r.Do(t, http.MethodGet, path, u.Token, nil), http.StatusNotFound, "not_found")
		})
	}
	t.Run("NoToken", func(t *testing.T) {
		apptest.WantProblem(t, r.Do(t, http.MethodGet, "/v1/posts/"+p.ID, "", nil), http.StatusUnauthorized, "unauthenticated")
	})
}

func TestPosts_List(t *testing.T) {
	e := apptest.New(t, 1, nil)
	r := e.R(0)
	us := testenv.Users(t, e.DB, 2)
	var ids []string
	for i := range 5 {
		ids = append(ids, apptest.MustCreatePost(t, r, us[i%2].Token, fmt.Sprintf("post %d", i)).ID)
	}
	slices.Reverse(ids) // newest first
	apptest.WantStatus(t, apptest.SetLike(t, r, us[1].Token, ids[0], true), http.StatusOK)

	var got []apptest.Post
	var sizes []int
	cursor := ""
	for range 10 {
		res := r.Do(t, http.MethodGet, "/v1/posts?limit=2&cursor="+url.QueryEscape(cursor), us[1].Token, nil)
		apptest.WantStatus(t, res, http.StatusOK)
		pg := apptest.Decode[apptest.Page[apptest.Post]](t, res)
		got, sizes = append(got, pg.Items...), append(sizes, len(pg.Items))
		if pg.NextCursor == nil {
			break
		}
		cursor = *pg.NextCursor
	}
	var gotIDs []string
	for _, p := range got {
		gotIDs = append(gotIDs, p.ID)
	}
	if !slices.Equal(gotIDs, ids) || !slices.Equal(sizes, []int{2, 2, 1}) {
		t.Fatalf("listed %v in pages %v, want %v in pages 2,2,1", gotIDs, sizes, ids)
	}
	if !got[0].LikedByMe || got[0].LikeCount != 1 || got[1].LikedByMe || got[1].LikeCount != 0 {
		t.Errorf("list says %+v and %+v; want the newest liked by me with count 1, the next not", got[0], got[1])
	}
	res := r.Do(t, http.MethodGet, "/v1/posts?limit=1", us[0].Token, nil)
	if first := apptest.Decode[apptest.Page[apptest.Post]](t, res).Items[0]; first.LikedByMe || first.LikeCount != 1 {
		t.Errorf("another viewer sees %+v, want count 1, not liked by them", first)
	}
	for _, q := range []string{"limit=0", "limit=101", "limit=x", "cursor=" + url.QueryEscape("%%%"),
		"cursor=" + base64.RawURLEncoding.EncodeToString([]byte("2026-01-01T00:00:00Z|not-a-uuid"))} {
		t.Run("Bad/"+q, func(t *testing.T) {
			apptest.WantProblem(t, r.OffContract(apptest.LimitBreach(q)).Do(t, http.MethodGet, "/v1/posts?"+q, us[0].Token, nil), http.StatusBadRequest, "invalid_request")
		})
	}
}

func TestLikes_PutDelete(t *testing.T) {
	e := apptest.New(t, 1, nil)
	r := e.R(0)
	us := testenv.Users(t, e.DB, 2)
	p := apptest.MustCreatePost(t, r, us[0].Token, "like me")
	wantLike := func(t *testing.T, res apptest.Response, liked bool, count int64) {
		t.Helper()
		apptest.WantStatus(t, res, http.StatusOK)
		if a := apptest.Decode[apptest.LikeAnswer](t, res); a != (apptest.LikeAnswer{PostID: p.ID, Liked: liked, LikeCount: count}) {
			t.Errorf("answered %+v, want liked %v, count %d", a, liked, count)
		}
	}
	version := func() int {
		return e.Count(t, `SELECT coalesce(max(version), 0)::int FROM likes WHERE post_id = $1 AND user_id = $2`, p.ID, us[1].ID)
	}

	t.Run("UnlikeNeverLiked", func(t *testing.T) {
		wantLike(t, apptest.SetLike(t, r, us[1].Token, p.ID, false), false, 0)
		if v := version(); v != 0 {
			t.Errorf("an unlike of what was never liked wrote a row (version %d)", v)
		}
	})
	t.Run("LikeTwice", func(t *testing.T) {
		wantLike(t, apptest.SetLike(t, r, us[1].Token, p.ID, true), true, 1)
		wantLike(t, apptest.SetLike(t, r, us[1].Token, p.ID, true), true, 1)
		if v := version(); v != 1 {
			t.Errorf("version %d after two likes, want 1: the second changed nothing", v)
		}
		if got := apptest.MustGetPost(t, r, us[1].Token, p.ID); !got.LikedByMe || got.LikeCount != 1 {
			t.Errorf("liker sees %+v", got)
		}
		if got := apptest.MustGetPost(t, r, us[0].Token, p.ID); got.LikedByMe || got.LikeCount != 1 {
			t.Errorf("another user sees %+v", got)
		}
	})
	t.Run("EmptyObjectBody", func(t *testing.T) {
		wantLike(t, r.Do(t, http.MethodPut, apptest.LikePath(p.ID), us[1].Token, "{}"), true, 1)
	})
	t.Run("UnlikeTwice", func(t *testing.T) {
		wantLike(t, apptest.SetLike(t, r, us[1].Token, p.ID, false), false, 0)
		wantLike(t, apptest.SetLike(t, r, us[1].Token, p.ID, false), false, 0)
		if v := version(); v != 2 {
			t.Errorf("version %d after like, unlike, unlike; want 2", v)
		}
		if got := apptest.MustGetPost(t, r, us[1].Token, p.ID); got.LikedByMe || got.LikeCount != 0 {
			t.Errorf("after unliking: %+v", got)
		}
	})
	t.Run("LikeAgain", func(t *testing.T) {
		wantLike(t, apptest.SetLike(t, r, us[1].Token, p.ID, true), true, 1)
		if n := e.Count(t, `SELECT count(*)::int FROM likes WHERE post_id = $1`, p.ID); n != 1 {
			t.Errorf("%d like rows, want 1: the row is reused", n)
		}
	})

	rowsBefore := e.Count(t, `SELECT count(*)::int FROM likes`)
	for _, method := range []string{http.MethodPut, http.MethodDelete} {
		t.Run(method+"/UnknownPost", func(t *testing.T) {
			apptest.WantProblem(t, r.Do(t, method, apptest.LikePath("0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"), us[1].Token, nil), http.StatusNotFound, "not_found")
		})
		t.Run(method+"/OtherSpelling", func(t *testing.T) {
			apptest.WantProblem(t, r.Do(t, method, apptest.LikePath(strings.ToUpper(p.ID)), us[0].Token, nil), http.StatusNotFound, "not_found")
		})
		t.Run(method+"/Body", func(t *testing.T) {
			apptest.WantProblem(t, r.OffContract("a body other than {}").Do(t, method, apptest.LikePath(p.ID), us[0].Token, map[string]bool{"liked": true}), http.StatusBadRequest, "invalid_request")
		})
		t.Run(method+"/NoToken", func(t *testing.T) {
			apptest.WantProblem(t, r.Do(t, method, apptest.LikePath(p.ID), "", nil), http.StatusUnauthorized, "unauthenticated")
		})
	}
	if after := e.Count(t, `SELECT count(*)::int FROM likes`); after != rowsBefore {
		t.Errorf("refused requests wrote %d like rows", after-rowsBefore)
	}
	if got := apptest.MustGetPost(t, r, us[0].Token, p.ID); got.LikeCount != 1 || got.LikedByMe {
		t.Errorf("refused requests changed the post: %+v", got)
	}
	t.Run("MethodNotAllowed", func(t *testing.T) {
		res := r.OffContract("no such method").Do(t, http.MethodPost, apptest.LikePath(p.ID), us[0].Token, nil)
		apptest.WantProblem(t, res, http.StatusMethodNotAllowed, "method_not_allowed")
		if allow := res.Header.Get("Allow"); !strings.Contains(allow, "PUT") || !strings.Contains(allow, "DELETE") {
			t.Errorf("Allow %q, want PUT and DELETE", allow)
		}
	})
	t.Run("Metrics", func(t *testing.T) {
		m := apptest.Scrape(t, r)
		for _, want := range []string{
			`shop_like_changes_total{state="liked"} 2`,
			`shop_like_changes_total{state="unliked"} 1`,
			`shop_conflicts_stopped_total{flow="like_post",layer="state"} 4`, // the four requests that changed nothing
		} {
			if !strings.Contains(m, want) {
				t.Errorf("metrics lack %q:\n%s", want, apptest.GrepLines(m, "like"))
			}
		}
	})
}

// The admin's reconciliation: users may not run it; it reports agreement,
// and a counter row changed by hand as drift, in its answer and in the
// metrics, without changing it back.
func TestLikes_Reconciliation(t *testing.T) {
	e := apptest.New(t, 1, nil)
	r := e.R(0)
	us := testenv.Users(t, e.DB, 3)
	p := apptest.MustCreatePost(t, r, us[0].Token, "counted")
	apptest.MustCreatePost(t, r, us[0].Token, "never liked")
	for _, u := range us {
		apptest.WantStatus(t, apptest.SetLike(t, r, u.Token, p.ID, true), http.StatusOK)
	}
	type report struct {
		Checked int   `json:"posts_checked"`
		Drifted int   `json:"drifted_posts"`
		Drift   int64 `json:"drift"`
		Posts   []struct {
			PostID    string `json:"post_id"`
			LikeCount int64  `json:"like_count"`
			LikedRows int64  `json:"liked_rows"`
		} `json:"drifted"`
	}
	const path = "/v1/likes/reconciliation"
	apptest.WantProblem(t, r.Do(t, http.MethodGet, path, us[0].Token, nil), http.StatusForbidden, "forbidden")
	apptest.WantProblem(t, r.Do(t, http.MethodGet, path, "", nil), http.StatusUnauthorized, "unauthenticated")

	res := r.Do(t, http.MethodGet, path, apptest.AdminToken, nil)
	apptest.WantStatus(t, res, http.StatusOK)
	if got := apptest.Decode[report](t, res); got.Checked != 2 || got.Drifted != 0 || len(got.Posts) != 0 {
		t.Errorf("reconciliation %s, want 2 posts checked, none drifted", res.Body)
	}
	if _, err := e.DB.Exec(t.Context(), `UPDATE post_like_shards SET n = n + 4 WHERE post_id = $1 AND shard = 0`, p.ID); err != nil {
		t.Fatal(err)
	}
	res = r.Do(t, http.MethodGet, path, apptest.AdminToken, nil)
	apptest.WantStatus(t, res, http.StatusOK)
	got := apptest.Decode[report](t, res)
	if got.Drifted != 1 || got.Drift != 4 || len(got.Posts) != 1 || got.Posts[0].PostID != p.ID ||
		got.Posts[0].LikeCount != 7 || got.Posts[0].LikedRows != 3 {
		t.Errorf("reconciliation %s, want post %s drifted: count 7, liked rows 3", res.Body, p.ID)
	}
	m := apptest.Scrape(t, r)
	for _, want := range []string{"shop_like_count_drift 4", "shop_like_drifted_posts 1",
		`shop_like_reconciliations_total{outcome="drift"} 1`, `shop_like_reconciliations_total{outcome="agree"} 1`} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %q:\n%s", want, apptest.GrepLines(m, "shop_like"))
		}
	}
}
