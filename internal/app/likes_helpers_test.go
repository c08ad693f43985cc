package app_test

import (
	"net/http"
	"testing"

	"github.com/shop-example/shop/internal/app/apptest"
)

// The JSON shapes of API.md, "Likes".
type (
	post struct {
		ID        string `json:"id"`
		Title     string `json:"title"`
		LikeCount int64  `json:"like_count"`
		LikedByMe bool   `json:"liked_by_me"`
		AuthorID  string `json:"author_id"`
		CreatedAt string `json:"created_at"`
	}
	likeAnswer struct {
		PostID    string `json:"post_id"`
		Liked     bool   `json:"liked"`
		LikeCount int64  `json:"like_count"`
	}
)

func likePath(postID string) string { return "/v1/posts/" + postID + "/like" }

func mustCreatePost(t testing.TB, r *apptest.Replica, token, title string) post {
	t.Helper()
	res := r.Do(t, http.MethodPost, "/v1/posts", token, map[string]string{"title": title})
	apptest.WantStatus(t, res, http.StatusCreated)
	return apptest.Decode[post](t, res)
}

func mustGetPost(t testing.TB, r *apptest.Replica, token, id string) post {
	t.Helper()
	res := r.Do(t, http.MethodGet, "/v1/posts/"+id, token, nil)
	apptest.WantStatus(t, res, http.StatusOK)
	return apptest.Decode[post](t, res)
}

// setLike sends PUT (liked) or DELETE (not liked) of the post's like.
func setLike(t testing.TB, r *apptest.Replica, token, postID string, liked bool) apptest.Response {
	t.Helper()
	method := http.MethodDelete
	if liked {
		method = http.MethodPut
	}
	return r.Do(t, method, likePath(postID), token, nil)
}

// likeCounts are the count's invariants on the database for one post.
type likeCounts struct {
	liked      int // like rows that are liked
	counted    int // the sum of the post's counter rows
	users      int // distinct users with a liked row
	dupes      int // like rows beyond one per (post, user)
	badShards  int // counter rows that differ from the liked rows naming them
	belowZero  int // counter rows below zero
	likeAnswer int // what GET /v1/posts/{id} says
}

// countLikes reads them; the GET goes to replica 0 with token.
func countLikes(t testing.TB, e *apptest.Env, token, postID string) likeCounts {
	t.Helper()
	var c likeCounts
	c.liked = e.Count(t, `SELECT count(*)::int FROM likes WHERE post_id = $1 AND liked`, postID)
	c.counted = e.Count(t, `SELECT coalesce(sum(n), 0)::int FROM post_like_shards WHERE post_id = $1`, postID)
	c.users = e.Count(t, `SELECT count(DISTINCT user_id)::int FROM likes WHERE post_id = $1 AND liked`, postID)
	c.dupes = e.Count(t, `SELECT (count(*) - count(DISTINCT user_id))::int FROM likes WHERE post_id = $1`, postID)
	c.badShards = e.Count(t, `SELECT count(*)::int FROM post_like_shards s WHERE s.post_id = $1
		AND s.n <> (SELECT count(*) FROM likes l WHERE l.post_id = s.post_id AND l.shard = s.shard AND l.liked)`, postID)
	c.belowZero = e.Count(t, `SELECT count(*)::int FROM post_like_shards WHERE post_id = $1 AND n < 0`, postID)
	c.likeAnswer = int(mustGetPost(t, e.R(0), token, postID).LikeCount)
	return c
}

// check fails the test unless the count is exactly want users, as every
// reading agrees.
func (c likeCounts) check(t testing.TB, want int) {
	t.Helper()
	if c != (likeCounts{liked: want, counted: want, users: want, likeAnswer: want}) {
		t.Errorf("want %d likes everywhere, got %+v", want, c)
	}
}
