package bench

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shop-example/shop/internal/likes"
	"github.com/shop-example/shop/internal/platform/postgres"
)

// liked remembers, for each client, which posts it likes now: each client
// runs on one goroutine, so its map is its own.
type liked []map[string]bool

func newLiked(clients int) liked {
	l := make(liked, clients)
	for i := range l {
		l[i] = map[string]bool{}
	}
	return l
}

// sqlLikeFlow is the counter design alone: the like's read and its
// one-statement write, with no lock and no HTTP in front.
type sqlLikeFlow struct {
	pool  *pgxpool.Pool
	store *likes.Store
	users []string // user id of each client
	liked liked
}

func newSQLLikeFlow(pool *pgxpool.Pool, users []string) *sqlLikeFlow {
	return &sqlLikeFlow{pool: pool, store: likes.NewStore(pool), users: users, liked: newLiked(len(users))}
}

// toggle flips the client's like of post with the store's read and write
// (likes.Store.QueueRead, QueueMove), the statements the service runs in
// its transaction, each sent on its own: the counter rows.
func (f *sqlLikeFlow) toggle(ctx context.Context, client int, post string) string {
	want := likes.Unliked
	if !f.liked[client][post] {
		want = likes.Liked
	}
	first := &pgx.Batch{}
	read := f.store.QueueRead(first, post, f.users[client])
	err := f.pool.SendBatch(ctx, first).Close()
	var move *likes.LikeMove
	if err == nil {
		last := &pgx.Batch{}
		if move, err = f.store.QueueMove(last, read, time.Now().UTC(), likes.SetTo(want)); err == nil {
			err = f.pool.SendBatch(ctx, last).Close()
		}
	}
	if _, _, _, err := move.Result(err); err != nil {
		return failureOf(ctx, err)
	}
	f.liked[client][post] = want == likes.Liked
	return ""
}

// read gets the post as the client sees it, as the store reads it for
// GET /v1/posts/{id}: its count summed from its counter rows.
func (f *sqlLikeFlow) read(ctx context.Context, client int, post string) string {
	if _, err := f.store.Post(ctx, f.users[client], post); err != nil {
		return failureOf(ctx, err)
	}
	return ""
}

// The single-row baseline: the same read and the same one-statement write
// as the store's (likes.Store.QueueRead, QueueMove), with the count kept in one row per post,
// posts.like_count (a column the bench adds to its scratch database),
// instead of counter rows.
const (
	sqlSingleAddColumn = `ALTER TABLE posts ADD COLUMN like_count bigint NOT NULL DEFAULT 0`
	sqlSingleRead      = `SELECT l.liked, l.version
		FROM posts p LEFT JOIN likes l ON l.post_id = p.id AND l.user_id = $2
		WHERE p.id = $1`
	singleCountAfter = `, counted AS (
			UPDATE posts p SET like_count = p.like_count + $5
			FROM (SELECT DISTINCT post_id FROM l) AS w
			WHERE p.id = w.post_id
			RETURNING p.like_count)
		SELECT (SELECT count(*) FROM l)::int, (SELECT like_count FROM counted)`
	sqlSingleInsert = `WITH l AS (
			INSERT INTO likes (post_id, user_id, liked, shard, version, created_at, updated_at)
			VALUES ($1, $2, $3, 0, 1, $4, $4)
			RETURNING post_id)` + singleCountAfter
	sqlSingleUpdate = `WITH l AS (
			UPDATE likes SET liked = $3, version = version + 1, updated_at = $4
			WHERE post_id = $1 AND user_id = $2 AND version = $6
			RETURNING post_id)` + singleCountAfter
)

var errSingleConflict = errors.New("like changed since it was read")

// toggleSingle flips the client's like of post with the single-row
// baseline's statements.
func (f *sqlLikeFlow) toggleSingle(ctx context.Context, client int, post string) string {
	var isLiked *bool
	var version *int64
	if err := f.pool.QueryRow(ctx, sqlSingleRead, post, f.users[client]).Scan(&isLiked, &version); err != nil {
		return failureOf(ctx, err)
	}
	want := version == nil || !*isLiked
	delta := 1
	if !want {
		delta = -1
	}
	now := time.Now().UTC()
	var row pgx.Row
	if version == nil {
		row = f.pool.QueryRow(ctx, sqlSingleInsert, post, f.users[client], want, now, delta)
	} else {
		row = f.pool.QueryRow(ctx, sqlSingleUpdate, post, f.users[client], want, now, delta, *version)
	}
	var written int
	var count *int64
	if err := row.Scan(&written, &count); err != nil {
		return failureOf(ctx, err)
	}
	if written == 0 || count == nil {
		return failureOf(ctx, errSingleConflict)
	}
	f.liked[client][post] = want
	return ""
}

// failureOf names what went wrong, for the errors column.
func failureOf(ctx context.Context, err error) string {
	switch {
	case ctx.Err() != nil:
		return "cancelled"
	case errors.Is(err, likes.ErrVersionConflict), errors.Is(err, errSingleConflict):
		return "version conflict"
	case errors.Is(err, likes.ErrDuplicateLike):
		return "duplicate like"
	case postgres.SQLState(err) != "":
		return "sqlstate " + postgres.SQLState(err)
	}
	return "error"
}

// layeredLikeFlow flips likes through the service, as the clients' users.
type layeredLikeFlow struct {
	svc   *service
	liked liked
}

func newLayeredLikeFlow(svc *service, clients int) *layeredLikeFlow {
	return &layeredLikeFlow{svc: svc, liked: newLiked(clients)}
}

// toggle sends PUT or DELETE /v1/posts/{id}/like with the client's token.
// Only a 200 answering the state asked for is a like.
func (f *layeredLikeFlow) toggle(ctx context.Context, client int, post string) string {
	want := !f.liked[client][post]
	method := http.MethodDelete
	if want {
		method = http.MethodPut
	}
	a := f.svc.send(ctx, method, f.svc.tokens[client], "/v1/posts/"+post+"/like")
	switch {
	case a.transport != "":
		return a.transport
	case a.status != http.StatusOK:
		return "http " + strconv.Itoa(a.status)
	}
	var body struct {
		Liked bool `json:"liked"`
	}
	if err := json.Unmarshal(a.body, &body); err != nil || body.Liked != want {
		return "wrong answer"
	}
	f.liked[client][post] = want
	return ""
}

// send makes a request with no body to path, with token.
func (s *service) send(ctx context.Context, method, token, path string) answer {
	req, err := http.NewRequestWithContext(ctx, method, s.base+path, nil)
	if err != nil {
		return answer{transport: "request"}
	}
	req.Header.Set("Authorization", "Bearer "+token)
	return s.do(ctx, req)
}
