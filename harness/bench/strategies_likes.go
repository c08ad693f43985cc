package bench

// Likes in the shoot-out: each client is a user flipping its like of one
// post (hot) or of a post picked from -posts (spread). The baselines keep
// the count in one row per post (posts.like_count, the column bench likes
// adds for its single-row baseline); the layered flow keeps it in counter
// rows (post_like_shards). Lost likes and lost unlikes cancel out in the
// final count, so the audit counts in flight too: triggers the bench adds
// to both kinds of counter row add up, as they happen, every step up and
// every step down of the count, and the audit compares them, per post,
// with the likes and unlikes the clients were told were done. After, it
// compares each post's count with its liked rows.

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
	// The count written back as read plus one (or minus one).
	sqlLikeWriteCount = `UPDATE posts SET like_count = $2 WHERE id = $1`
	// The in-flight audit's counters: each counter row (posts.like_count
	// for the baselines, post_like_shards.n for the service) adds up the
	// steps up and the steps down of its count, whoever writes it. A
	// lost update shows as a like told done that moved no count up, or
	// an unlike that moved it down by two.
	sqlLikesAddAuditColumns = `
		ALTER TABLE posts ADD COLUMN counted_up bigint NOT NULL DEFAULT 0, ADD COLUMN counted_down bigint NOT NULL DEFAULT 0;
		ALTER TABLE post_like_shards ADD COLUMN counted_up bigint NOT NULL DEFAULT 0, ADD COLUMN counted_down bigint NOT NULL DEFAULT 0;
		CREATE FUNCTION bench_count_post_steps() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
			NEW.counted_up := OLD.counted_up + greatest(NEW.like_count - OLD.like_count, 0);
			NEW.counted_down := OLD.counted_down + greatest(OLD.like_count - NEW.like_count, 0);
			RETURN NEW;
		END $$;
		CREATE TRIGGER bench_count_post_steps BEFORE UPDATE OF like_count ON posts
			FOR EACH ROW EXECUTE FUNCTION bench_count_post_steps();
		CREATE FUNCTION bench_count_shard_steps() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
			NEW.counted_up := OLD.counted_up + greatest(NEW.n - OLD.n, 0);
			NEW.counted_down := OLD.counted_down + greatest(OLD.n - NEW.n, 0);
			RETURN NEW;
		END $$;
		CREATE TRIGGER bench_count_shard_steps BEFORE UPDATE OF n ON post_like_shards
			FOR EACH ROW EXECUTE FUNCTION bench_count_shard_steps();`
	sqlLikesCountedSingle  = `SELECT id, counted_up, counted_down FROM posts WHERE id = ANY($1::uuid[])`
	sqlLikesCountedSharded = `SELECT post_id, sum(counted_up)::bigint, sum(counted_down)::bigint
		FROM post_like_shards WHERE post_id = ANY($1::uuid[]) GROUP BY post_id`
	// optimistic: the count itself is the version checked.
	sqlLikeWriteCountChecked = `UPDATE posts SET like_count = $2 WHERE id = $1 AND like_count = $3`

	sqlLikesAuditSingle = `SELECT coalesce(sum(abs(p.like_count - (SELECT count(*) FROM likes l WHERE l.post_id = p.id AND l.liked))), 0)::int
		FROM posts p WHERE p.id = ANY($1::uuid[])`
	sqlLikesAuditSharded = `SELECT coalesce(sum(abs((SELECT coalesce(sum(n), 0) FROM post_like_shards s WHERE s.post_id = p.id)
			- (SELECT count(*) FROM likes l WHERE l.post_id = p.id AND l.liked))), 0)::int
		FROM posts p WHERE p.id = ANY($1::uuid[])`
)

func likesFlow() flowSpec {
	single := func(op func(a *arena) orderFunc) func(ctx context.Context, a *arena, shape string) (cell, error) {
		return likeCell(op, likeAudit{counted: sqlLikesCountedSingle, after: sqlLikesAuditSingle}, 1)
	}
	naive := func(a *arena) orderFunc { return a.toggleLike(sqlLikeRead, "", false) }
	return flowSpec{
		name:     "likes",
		title:    "Like (toggle)",
		unit:     "likes/s",
		done:     "like flipped",
		tables:   []string{"posts", "post_like_shards", "likes"},
		anomaly:  "lost updates of the like count: the sum over the posts of |count − liked rows|, or, if more, those seen in flight",
		inFlight: "likes and unlikes the clients were told were done that the count's steps up and down did not match (|told − counted|, each way, per post)",
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
				cell: likeCell(func(a *arena) orderFunc { return newLayeredLikeFlow(a.svc, a.o.clients).toggle },
					likeAudit{counted: sqlLikesCountedSharded, after: sqlLikesAuditSharded}, 0)},
		},
	}
}

// likeAudit is how a like cell is audited: the statement reading the
// steps its counter rows counted, per post, and the end state's count of
// lost updates.
type likeAudit struct {
	counted, after string
}

// likeCell seeds the posts of one cell, with shards counter rows each (0:
// the service's default), and audits them afterwards.
func likeCell(op func(a *arena) orderFunc, how likeAudit, shards int) func(ctx context.Context, a *arena, shape string) (cell, error) {
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
		t := newTold()
		audit := func(ctx context.Context) (audit, error) { return auditLikes(ctx, a, posts, how, t) }
		return cell{op: op(a), keys: posts, told: t, audit: audit}, nil
	}
}

// auditLikes compares, per post, the likes and unlikes the clients were
// told were done with the steps up and down its counter rows counted,
// then counts the end state's lost updates.
func auditLikes(ctx context.Context, a *arena, posts []string, how likeAudit, t *told) (audit, error) {
	// Every client starts unliked and each flip told done flips it, so a
	// client told n flips of a post liked it (n+1)/2 times, unliked it n/2.
	up, down := map[string]int{}, map[string]int{}
	t.mu.Lock()
	for k, n := range t.n {
		up[k.key] += (n + 1) / 2
		down[k.key] += n / 2
	}
	t.mu.Unlock()
	rows, err := a.pool.Query(ctx, how.counted, posts)
	if err != nil {
		return audit{}, err
	}
	var found audit
	var post string
	var countedUp, countedDown int
	_, err = pgx.ForEachRow(rows, []any{&post, &countedUp, &countedDown}, func() error {
		found.inFlight += abs(up[post]-countedUp) + abs(down[post]-countedDown)
		return nil
	})
	if err != nil {
		return audit{}, err
	}
	err = a.pool.QueryRow(ctx, how.after, posts).Scan(&found.after)
	return found, err
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
		_, err := tx.Exec(ctx, sqlLikeWriteCount, post, count+delta)
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
