package bench

// Likes in the shoot-out: each client is a user flipping its like of one
// post (hot) or of a post picked from -posts (spread). The baselines keep
// the count in one row per post (posts.like_count, the column bench likes
// adds for its single-row baseline); the layered flow keeps it in counter
// rows (post_like_shards). The audit compares each post's count with its
// liked rows: every like or unlike the count missed is a lost update.

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/shop-example/shop/internal/likes"
)

const (
	// The naive read: the user's like row and the post's count.
	sqlLikeRead = `SELECT l.liked, p.like_count
		FROM posts p LEFT JOIN likes l ON l.post_id = p.id AND l.user_id = $2
		WHERE p.id = $1`
	sqlLikeReadForUpdate = sqlLikeRead + ` FOR UPDATE OF p`
	sqlLikeInsert        = `INSERT INTO likes (post_id, user_id, liked, shard, version, created_at, updated_at)
		VALUES ($1, $2, $3, 0, 1, $4, $4)`
	sqlLikeUpdate = `UPDATE likes SET liked = $3, version = version + 1, updated_at = $4
		WHERE post_id = $1 AND user_id = $2`
	// The count written back as read plus one (or minus one). lost_writes
	// is the audit's, not a guard: it counts the writes that overwrote a
	// count other than the one they read ($3), each a lost update. (Lost
	// likes and lost unlikes cancel out in the final count, so the count
	// alone would hide most of them.)
	sqlLikesAddAuditColumn = `ALTER TABLE posts ADD COLUMN lost_writes bigint NOT NULL DEFAULT 0`
	sqlLikeWriteCount      = `UPDATE posts SET like_count = $2, lost_writes = lost_writes + (like_count <> $3)::int WHERE id = $1`
	// optimistic: the count itself is the version checked.
	sqlLikeWriteCountChecked = `UPDATE posts SET like_count = $2 WHERE id = $1 AND like_count = $3`

	sqlLikesAuditSingle = `SELECT greatest(coalesce(sum(p.lost_writes), 0),
			coalesce(sum(abs(p.like_count - (SELECT count(*) FROM likes l WHERE l.post_id = p.id AND l.liked))), 0))::int
		FROM posts p WHERE p.id = ANY($1::uuid[])`
	sqlLikesAuditSharded = `SELECT coalesce(sum(abs((SELECT coalesce(sum(n), 0) FROM post_like_shards s WHERE s.post_id = p.id)
			- (SELECT count(*) FROM likes l WHERE l.post_id = p.id AND l.liked))), 0)::int
		FROM posts p WHERE p.id = ANY($1::uuid[])`
)

func likesFlow() flowSpec {
	single := func(op func(a *arena) orderFunc) func(ctx context.Context, a *arena, shape string) (cell, error) {
		return likeCell(op, sqlLikesAuditSingle, 1)
	}
	naive := func(a *arena) orderFunc { return a.toggleLike(sqlLikeRead, "", false) }
	return flowSpec{
		name:    "likes",
		title:   "Like (toggle)",
		unit:    "likes/s",
		anomaly: "lost updates of the like count: writes that overwrote a count other than the one they read (counted as they happen), or, if more, the sum over the posts of |count − liked rows|",
		strategies: map[string]strategy{
			"naive": {how: "read the like row and the count, flip the row, write the count read ± 1",
				cell: single(naive)},
			"unique only": {na: "the primary key (post, user) stops a second like row of one user, which this workload (a user per client) never sends; the count's lost updates are no constraint's to stop"},
			"optimistic": {how: "the naive flip, the count written only if still the one read; up to 5 attempts",
				cell: single(func(a *arena) orderFunc { return a.toggleLike(sqlLikeRead, "", true) })},
			"row lock": {how: "the naive flip, the post's row read FOR UPDATE",
				cell: single(func(a *arena) orderFunc { return a.toggleLike(sqlLikeReadForUpdate, "", false) })},
			"advisory": {how: "pg_advisory_xact_lock on the post, then the naive flip",
				cell: single(func(a *arena) orderFunc { return a.toggleLike(sqlLikeRead, "post:", false) })},
			"redsync only": {how: "the naive flip inside a Redlock on the post over the three nodes",
				cell: single(func(a *arena) orderFunc {
					flip := naive(a)
					return func(ctx context.Context, client int, post string) string {
						return underLock(ctx, a, "post:"+post, func(ctx context.Context) string { return flip(ctx, client, post) })
					}
				})},
			"conditional": {how: "atomic ADD: like_count = like_count ± 1 in the statement that flips the version-checked like row (bench likes' single-row baseline)",
				cell: single(func(a *arena) orderFunc { return newSQLLikeFlow(a.pool, a.users).toggleSingle })},
			"layered": {how: "PUT/DELETE /v1/posts/{id}/like through the service: auth, Redis lock, versioned flip, atomic add to one of 16 counter rows",
				cell: likeCell(func(a *arena) orderFunc { return newLayeredLikeFlow(a.svc, a.o.clients).toggle }, sqlLikesAuditSharded, 0)},
		},
	}
}

// likeCell seeds the posts of one cell, with shards counter rows each (0:
// the service's default), and audits them afterwards.
func likeCell(op func(a *arena) orderFunc, auditSQL string, shards int) func(ctx context.Context, a *arena, shape string) (cell, error) {
	return func(ctx context.Context, a *arena, shape string) (cell, error) {
		n := 1
		if shape == spread {
			n = a.o.posts
		}
		if shards == 0 {
			shards = likes.DefaultShards
		}
		posts, err := seedPosts(ctx, a.pool, a.users[0], n, shards)
		if err != nil {
			return cell{}, err
		}
		audit := func(ctx context.Context) (int, error) {
			var n int
			err := a.pool.QueryRow(ctx, auditSQL, posts).Scan(&n)
			return n, err
		}
		return cell{op: op(a), keys: posts, audit: audit}, nil
	}
}

var errCountChanged = errors.New("count changed on every attempt")

// toggleLike flips the client's like of post in one transaction: the read
// (readSQL, which may lock), the like row's write, and the count written
// back as the value read ± 1. With lockPrefix it first takes an advisory
// lock on the post; with checked the count is written only if unchanged,
// and the whole transaction retried otherwise.
func (a *arena) toggleLike(readSQL, lockPrefix string, checked bool) orderFunc {
	return func(ctx context.Context, client int, post string) string {
		attempts := 1
		if checked {
			attempts = optimisticAttempts
		}
		var err error
		for range attempts {
			err = pgx.BeginFunc(ctx, a.pool, func(tx pgx.Tx) error {
				return a.flipLike(ctx, tx, readSQL, lockPrefix, checked, client, post)
			})
			if !errors.Is(err, errCountChanged) {
				break
			}
		}
		if errors.Is(err, errCountChanged) {
			return "version conflict"
		}
		if err != nil {
			return failureOf(ctx, err)
		}
		return ""
	}
}

func (a *arena) flipLike(ctx context.Context, tx pgx.Tx, readSQL, lockPrefix string, checked bool, client int, post string) error {
	if lockPrefix != "" {
		if _, err := tx.Exec(ctx, sqlAdvisoryLock, lockPrefix+post); err != nil {
			return err
		}
	}
	user := a.users[client]
	var liked *bool
	var count int64
	if err := tx.QueryRow(ctx, readSQL, post, user).Scan(&liked, &count); err != nil {
		return err
	}
	want, delta := true, int64(1)
	if liked != nil && *liked {
		want, delta = false, -1
	}
	now := time.Now().UTC()
	write, args := sqlLikeUpdate, []any{post, user, want, now}
	if liked == nil {
		write = sqlLikeInsert
	}
	if _, err := tx.Exec(ctx, write, args...); err != nil {
		return err
	}
	if !checked {
		_, err := tx.Exec(ctx, sqlLikeWriteCount, post, count+delta, count)
		return err
	}
	tag, err := tx.Exec(ctx, sqlLikeWriteCountChecked, post, count+delta, count)
	if err != nil {
		return err
	}
	if tag.RowsAffected() != 1 {
		return errCountChanged
	}
	return nil
}
