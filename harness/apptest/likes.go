package apptest

import (
	"net/http"
	"testing"
)

// The JSON shapes of API.md, "Likes".
type (
	Post struct {
		ID        string `json:"id"`
		Title     string `json:"title"`
		LikeCount int64  `json:"like_count"`
		LikedByMe bool   `json:"liked_by_me"`
		AuthorID  string `json:"author_id"`
		CreatedAt string `json:"created_at"`
	}
	LikeAnswer struct {
		PostID    string `json:"post_id"`
		Liked     bool   `json:"liked"`
		LikeCount int64  `json:"like_count"`
	}
)

func LikePath(postID string) string { return "/v1/posts/" + postID + "/like" }

func MustCreatePost(t testing.TB, r *Replica, token, title string) Post {
	t.Helper()
	res := r.Do(t, http.MethodPost, "/v1/posts", token, map[string]string{"title": title})
	WantStatus(t, res, http.StatusCreated)
	return Decode[Post](t, res)
}

func MustGetPost(t testing.TB, r *Replica, token, id string) Post {
	t.Helper()
	res := r.Do(t, http.MethodGet, "/v1/posts/"+id, token, nil)
	WantStatus(t, res, http.StatusOK)
	return Decode[Post](t, res)
}

// SetLike sends PUT (liked) or DELETE (not liked) of the post's like.
func SetLike(t testing.TB, r *Replica, token, postID string, liked bool) Response {
	t.Helper()
	method := http.MethodDelete
	if liked {
		method = http.MethodPut
	}
	return r.Do(t, method, LikePath(postID), token, nil)
}

// LikeCounts are the count's invariants on the database for one post.
type LikeCounts struct {
	Liked      int // like rows that are liked
	Counted    int // the sum of the post's counter rows
	Users      int // distinct users with a liked row
	Dupes      int // like rows beyond one per (post, user)
	BadShards  int // counter rows that differ from the liked rows naming them
	BelowZero  int // counter rows below zero
	LikeAnswer int // what GET /v1/posts/{id} says
}

// CountLikes reads them; the GET goes to replica 0 with token.
func CountLikes(t testing.TB, e *Env, token, postID string) LikeCounts {
	t.Helper()
	var c LikeCounts
	c.Liked = e.Count(t, `SELECT count(*)::int FROM likes WHERE post_id = $1 AND liked`, postID)
	c.Counted = e.Count(t, `SELECT coalesce(sum(n), 0)::int FROM post_like_shards WHERE post_id = $1`, postID)
	c.Users = e.Count(t, `SELECT count(DISTINCT user_id)::int FROM likes WHERE post_id = $1 AND liked`, postID)
	c.Dupes = e.Count(t, `SELECT (count(*) - count(DISTINCT user_id))::int FROM likes WHERE post_id = $1`, postID)
	c.BadShards = e.Count(t, `SELECT count(*)::int FROM post_like_shards s WHERE s.post_id = $1
		AND s.n <> (SELECT count(*) FROM likes l WHERE l.post_id = s.post_id AND l.shard = s.shard AND l.liked)`, postID)
	c.BelowZero = e.Count(t, `SELECT count(*)::int FROM post_like_shards WHERE post_id = $1 AND n < 0`, postID)
	c.LikeAnswer = int(MustGetPost(t, e.R(0), token, postID).LikeCount)
	return c
}

// Check fails the test unless the count is exactly want users, as every
// reading agrees.
func (c LikeCounts) Check(t testing.TB, want int) {
	t.Helper()
	if c != (LikeCounts{Liked: want, Counted: want, Users: want, LikeAnswer: want}) {
		t.Errorf("want %d likes everywhere, got %+v", want, c)
	}
}
