package app_test

import (
	"net/http"
	"testing"

	"github.com/shop-example/shop/harness/apptest"
	"github.com/shop-example/shop/harness/testenv"
)

// TestRateLimit_Likes: likes and unlikes count against a per-user bucket
// of their own ("likes"). Past it the answer is 429 and nothing is
// written; the user's other writes ("writes": creating a post, cancel,
// pay) are not used up by a liking spree; reads carry no limit.
func TestRateLimit_Likes(t *testing.T) {
	e := apptest.NewLimited(t, 1, map[string]string{"SHOP_RATE_LIMIT_LIKES": "3/m"})
	r := e.R(0)
	addr := testenv.ClientAddr()
	u := testenv.Users(t, e.DB, 1)[0]
	res := r.Do(t, http.MethodPost, "/v1/posts", u.Token, map[string]string{"title": "limited"}, apptest.From(addr)...)
	apptest.WantStatus(t, res, http.StatusCreated)
	if policy, _, _ := apptest.RateLimitOf(res); policy != "writes" {
		t.Errorf("POST /v1/posts counted against %q, want writes", policy)
	}
	p := apptest.Decode[apptest.Post](t, res)

	for i, liked := range []bool{true, false, true} {
		res := r.Do(t, map[bool]string{true: http.MethodPut, false: http.MethodDelete}[liked], apptest.LikePath(p.ID), u.Token, nil, apptest.From(addr)...)
		apptest.WantStatus(t, res, http.StatusOK)
		if policy, left, ok := apptest.RateLimitOf(res); !ok || policy != "likes" || left != 2-i {
			t.Errorf("like %d: RateLimit %q, want likes with %d left", i+1, res.Header.Get("RateLimit"), 2-i)
		}
	}
	version := e.Count(t, `SELECT version::int FROM likes WHERE post_id = $1`, p.ID)
	res = r.Do(t, http.MethodDelete, apptest.LikePath(p.ID), u.Token, nil, apptest.From(addr)...)
	apptest.WantProblem(t, res, http.StatusTooManyRequests, "rate_limited")
	if v := e.Count(t, `SELECT version::int FROM likes WHERE post_id = $1`, p.ID); v != version {
		t.Errorf("a refused unlike wrote the like (version %d → %d)", version, v)
	}
	if got := apptest.MustGetPost(t, r, u.Token, p.ID); !got.LikedByMe || got.LikeCount != 1 {
		t.Errorf("after the refused unlike: %+v, want still liked", got)
	}

	res = r.Do(t, http.MethodPost, "/v1/posts", u.Token, map[string]string{"title": "still allowed"}, apptest.From(addr)...)
	apptest.WantStatus(t, res, http.StatusCreated)
	for _, path := range []string{"/v1/posts", "/v1/posts/" + p.ID} {
		res := r.Do(t, http.MethodGet, path, u.Token, nil, apptest.From(addr)...)
		apptest.WantStatus(t, res, http.StatusOK)
		if h := res.Header.Get("RateLimit-Policy"); h != "" {
			t.Errorf("GET %s carries RateLimit-Policy %q, want none", path, h)
		}
	}
}
