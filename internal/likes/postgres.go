package likes

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shop-example/shop/internal/platform/keyset"
	"github.com/shop-example/shop/internal/platform/postgres"
)

// The constraints that back the like flow's rules (migrations/000006_likes.up.sql).
const (
	ConstraintOneLike        = "likes_pkey"                     // one like row per (post, user), ever
	ConstraintCountNotBelow0 = "post_like_shards_n_nonnegative" // no counter row below zero
)

// Constraints is the catalogue of layer 4 of the like flow, as the race
// lab and the ablation tests take it off.
var Constraints = []postgres.Constraint{
	{Table: "likes", Name: ConstraintOneLike},
	{Table: "post_like_shards", Name: ConstraintCountNotBelow0},
}

const (
	// A post and its counter rows, in one statement: a post never exists
	// without the rows its count is kept in.
	sqlInsertPost = `WITH p AS (
			INSERT INTO posts (id, author_id, title, like_shards, created_at)
			VALUES ($1, $2, $3, $4, $5)
			RETURNING id)
		INSERT INTO post_like_shards (post_id, shard, n)
		SELECT p.id, g, 0 FROM p, generate_series(0, $4 - 1) AS g`

	// A post as viewer $1 sees it: the count is the sum of its counter
	// rows, read in the same statement (one snapshot).
	postSelect = `SELECT p.id, p.author_id, p.title, p.like_shards, p.created_at,
			(SELECT coalesce(sum(s.n), 0)::bigint FROM post_like_shards s WHERE s.post_id = p.id),
			EXISTS (SELECT 1 FROM likes l WHERE l.post_id = p.id AND l.user_id = $1 AND l.liked)
		FROM posts p `
	sqlGetPost   = postSelect + `WHERE p.id = $2`
	sqlListPosts = postSelect + `WHERE (p.created_at, p.id) < ($2, $3)
		ORDER BY p.created_at DESC, p.id DESC LIMIT $4`

	sqlCount = `SELECT coalesce(sum(n), 0)::bigint FROM post_like_shards WHERE post_id = $1`

	// The like as it is now, and how many counter rows its post has. No
	// row for the post: no such post. No like row: never liked.
	sqlReadLike = `SELECT p.like_shards, l.liked, l.shard, l.version
		FROM posts p LEFT JOIN likes l ON l.post_id = p.id AND l.user_id = $2
		WHERE p.id = $1`

	// The same with the post's count, read in the same statement (one
	// snapshot): the flow's first look, which answers a like that is
	// already where it is asked to be.
	sqlReadLikeCounted = `SELECT p.like_shards, l.liked, l.shard, l.version,
			(SELECT coalesce(sum(s.n), 0)::bigint FROM post_like_shards s WHERE s.post_id = p.id)
		FROM posts p LEFT JOIN likes l ON l.post_id = p.id AND l.user_id = $2
		WHERE p.id = $1`

	// Layer 1 in PostgreSQL (SHOP_LIKE_LOCK=advisory): the lock on one
	// user's like of one post, named as the Redis lock is, taken inside
	// the like's transaction and released at its commit or rollback. The
	// wait for it is bounded by LockWait (lock_timeout, in milliseconds);
	// the bound is lifted again at once, so that the write's wait for a
	// hot counter row is not mistaken for a busy lock.
	sqlLockWait     = `SELECT set_config('lock_timeout', $1, true)`
	sqlLockLike     = `SELECT pg_advisory_xact_lock(hashtextextended('like:' || $1::text || ':' || $2::text, 0))`
	sqlLockWaitDone = `SET LOCAL lock_timeout TO DEFAULT`

	// countAfter ends each like write: the counter row the like names
	// moves by the delta ($6), in the same statement as the like row and
	// only if that row was written (FROM l), and the post's count is read
	// back: the row just moved plus the others (a statement does not see
	// its own CTE's update, so it adds them up itself).
	countAfter = `, counted AS (
			UPDATE post_like_shards s SET n = s.n + $6
			FROM (SELECT DISTINCT post_id FROM l) AS w
			WHERE s.post_id = w.post_id AND s.shard = $4 AND $6 <> 0
			RETURNING s.n)
		SELECT (SELECT count(*) FROM l)::int,
			coalesce((SELECT n FROM counted), (SELECT n FROM post_like_shards WHERE post_id = $1 AND shard = $4))
			+ (SELECT coalesce(sum(n), 0) FROM post_like_shards WHERE post_id = $1 AND shard <> $4)`

	// The first write of a like: layer 4 behind it, likes_pkey refuses a
	// second first like of the same (post, user).
	sqlInsertLike = `WITH l AS (
			INSERT INTO likes (post_id, user_id, liked, shard, version, created_at, updated_at)
			VALUES ($1, $2, $3, $4, 1, $5, $5)
			RETURNING post_id)` + countAfter

	// Layer 3: the version check. No row written means someone else moved
	// the like since it was read; then the counter does not move either.
	sqlUpdateLike = `WITH l AS (
			UPDATE likes SET liked = $3, shard = $4, version = version + 1, updated_at = $5
			WHERE post_id = $1 AND user_id = $2 AND version = $7
			RETURNING post_id)` + countAfter

	// The reconciliation of a page of posts, in one statement (one
	// snapshot, so a like committing meanwhile is seen in both sums or in
	// neither): what the counter rows say against the liked rows.
	sqlTally = `WITH p AS (SELECT id FROM posts WHERE id > $1 ORDER BY id LIMIT $2)
		SELECT p.id::text,
			(SELECT coalesce(sum(s.n), 0) FROM post_like_shards s WHERE s.post_id = p.id)::bigint,
			(SELECT count(*) FROM likes l WHERE l.post_id = p.id AND l.liked)::bigint
		FROM p ORDER BY p.id`
)

// Store keeps posts, likes and their counts in PostgreSQL.
type Store struct {
	db *pgxpool.Pool
}

// NewStore returns a store over db.
func NewStore(db *pgxpool.Pool) *Store { return &Store{db: db} }

// CreatePost inserts a post and its p.LikeShards counter rows, at zero.
func (s *Store) CreatePost(ctx context.Context, p Post) error {
	if p.LikeShards < 1 || p.LikeShards > MaxShards {
		return fmt.Errorf("create post: %d counter rows, want 1–%d", p.LikeShards, MaxShards)
	}
	if _, err := s.db.Exec(ctx, sqlInsertPost, p.ID, p.AuthorID, p.Title, p.LikeShards, p.CreatedAt); err != nil {
		return fmt.Errorf("create post: %w", err)
	}
	return nil
}

// Post returns a post as viewerID sees it.
func (s *Store) Post(ctx context.Context, viewerID, id string) (Post, error) {
	p, err := scanPost(s.db.QueryRow(ctx, sqlGetPost, viewerID, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return Post{}, ErrNotFound
	}
	if err != nil {
		return Post{}, fmt.Errorf("get post %s: %w", id, err)
	}
	return p, nil
}

// Posts returns up to limit posts, newest first, after the cursor, as
// viewerID sees them, and the cursor of the next page ("" on the last).
func (s *Store) Posts(ctx context.Context, viewerID, cursor string, limit int) ([]Post, string, error) {
	beforeAt, beforeID, err := keyset.Decode(cursor)
	if err != nil {
		return nil, "", err
	}
	rows, err := s.db.Query(ctx, sqlListPosts, viewerID, beforeAt, beforeID, limit+1)
	if err != nil {
		return nil, "", fmt.Errorf("list posts: %w", err)
	}
	items, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Post, error) { return scanPost(r) })
	if err != nil {
		return nil, "", fmt.Errorf("list posts: %w", err)
	}
	page, next := keyset.Page(items, limit, func(x Post) (time.Time, string) { return x.CreatedAt, x.ID })
	return page, next, nil
}

// Look reads userID's like of postID as it is now (Version 0 if there is
// no row) with its post's count, in one statement, and reports whether
// change would move it: the flow's first look, which answers a like that
// is already where it is asked to be. change is asked of a copy; nothing
// is written. No post is ErrNotFound.
func (s *Store) Look(ctx context.Context, postID, userID string, change Change) (Like, int64, bool, error) {
	var r likeRow
	err := s.db.QueryRow(ctx, sqlReadLikeCounted, postID, userID).Scan(&r.shards, &r.liked, &r.shard, &r.version, &r.count)
	if err := r.check(postID, err); err != nil {
		return Like{}, 0, false, err
	}
	l := r.like(postID, userID)
	try := l
	return l, r.count, change(&try), nil
}

// QueueLock queues in b layer 1's lock in PostgreSQL on userID's like of
// postID (SHOP_LIKE_LOCK=advisory): pg_advisory_xact_lock, waiting at most
// LockWait, taken in the transaction that b begins and released at its
// commit or rollback. A second click of the same user on the same post
// waits there for the first's commit. A lock still taken after LockWait
// fails b (55P03, which Result answers as ErrLockBusy), and nothing is
// written.
func (s *Store) QueueLock(b *pgx.Batch, postID, userID string) {
	b.Queue(sqlLockWait, strconv.FormatInt(LockWait.Milliseconds(), 10))
	b.Queue(sqlLockLike, userID, postID)
	b.Queue(sqlLockWaitDone)
}

// A LikeRead is a like as a batch read it (QueueRead): once the batch is
// sent, the like as it was then and its post's number of counter rows, or
// ErrNotFound.
type LikeRead struct {
	postID, userID string
	row            likeRow
	err            error
}

// QueueRead queues in b the read of userID's like of postID. Once b is
// sent, the read holds what it found, for QueueMove.
func (s *Store) QueueRead(b *pgx.Batch, postID, userID string) *LikeRead {
	r := &LikeRead{postID: postID, userID: userID}
	b.Queue(sqlReadLike, postID, userID).QueryRow(func(row pgx.Row) error {
		// Kept out of the batch's error: pgx drops a failed batch's
		// statements from its cache, and a like of no post is only a 404.
		r.err = r.row.check(postID, row.Scan(&r.row.shards, &r.row.liked, &r.row.shard, &r.row.version))
		return nil
	})
	return r
}

// A LikeMove is what QueueMove queued for a like: its write, or the read
// of its post's count; once the batch is sent, what that statement
// answered (Result).
type LikeMove struct {
	postID        string
	before, after Like
	moved         bool   // the statement writes the like (else it reads the count)
	rows          int    // like rows written: 0 means the version moved
	count         *int64 // the post's count then; nil: no counter row
}

// QueueMove applies change to the like r read (layer 2), and queues in b
// what it decided. A like that moved is written at the version read
// ("WHERE version = $read", layer 3), or, when there was no row, inserted
// under likes_pkey (layer 4); its counter row moves in the same statement
// (countAfter). A like that did not move is not written; the statement
// reads its post's count. No post is ErrNotFound, and nothing is queued.
//
// The counter moves by what the write changes in the row (Delta of the
// state read and the state written), never by what the request asked
// for: a write that changes nothing counts nothing. A like is counted in
// a counter row picked at random, so that concurrent likes of one post
// spread over its rows; an unlike takes it back from the row it was
// counted in.
//
// The write is one statement: when it matches no row (the version moved)
// it writes nothing and moves no counter, so it may travel with COMMIT;
// Result tells the caller, which reads again.
func (s *Store) QueueMove(b *pgx.Batch, r *LikeRead, now time.Time, change Change) (*LikeMove, error) {
	if r.err != nil {
		return nil, r.err
	}
	before := r.row.like(r.postID, r.userID)
	m := &LikeMove{postID: r.postID, before: before, after: before}
	if !change(&m.after) {
		m.after = before
		b.Queue(sqlCount, r.postID).QueryRow(func(row pgx.Row) error { return row.Scan(&m.count) })
		return m, nil
	}
	m.moved = true
	delta := Delta(before.State, m.after.State)
	if delta > 0 {
		m.after.Shard = rand.IntN(int(r.row.shards))
	}
	sql, args := sqlInsertLike, []any{r.postID, r.userID, m.after.State == Liked, m.after.Shard, now, delta}
	if before.Exists() {
		sql, args = sqlUpdateLike, append(args, before.Version)
	}
	b.Queue(sql, args...).QueryRow(func(row pgx.Row) error { return row.Scan(&m.rows, &m.count) })
	return m, nil
}

// Result is the like and its post's count after the transaction that
// carried m, given the error it ended with (postgres.InTxBatched's), and
// whether the like was written. What PostgreSQL answered is translated:
// the lock not had within LockWait is ErrLockBusy, a write that matched
// no row ErrVersionConflict, and the constraints ErrDuplicateLike and
// ErrCountBelowZero (the database's error stays wrapped, so that what is
// logged names the constraint). m is nil when the transaction ended
// before QueueMove queued it; then err is all there is.
func (m *LikeMove) Result(err error) (Like, int64, bool, error) {
	switch postgres.ConstraintViolated(err) {
	case ConstraintOneLike:
		return Like{}, 0, false, fmt.Errorf("%w: %w", ErrDuplicateLike, err)
	case ConstraintCountNotBelow0:
		return Like{}, 0, false, fmt.Errorf("%w: %w", ErrCountBelowZero, err)
	}
	switch {
	case postgres.SQLState(err) == "55P03": // lock_not_available: LockWait ran out
		return Like{}, 0, false, ErrLockBusy
	case errors.Is(err, ErrNotFound):
		return Like{}, 0, false, err
	case err != nil && m == nil:
		return Like{}, 0, false, fmt.Errorf("lock and read like: %w", err)
	case err != nil && !m.moved:
		return Like{}, 0, false, fmt.Errorf("count likes of %s: %w", m.postID, err)
	case err != nil:
		return Like{}, 0, false, fmt.Errorf("write like of %s: %w", m.postID, err)
	case !m.moved:
		return m.before, *m.count, false, nil
	case m.rows == 0:
		return Like{}, 0, false, ErrVersionConflict
	case m.count == nil:
		return Like{}, 0, false, fmt.Errorf("write like of %s: the post has no counter row %d", m.postID, m.after.Shard)
	}
	m.after.Version = m.before.Version + 1
	return m.after, *m.count, true, nil
}

// likeRow is a like as sqlReadLike reads it: its post's number of
// counter rows, and the like row's columns (nil when there is none).
type likeRow struct {
	shards  int16
	liked   *bool
	shard   *int16
	version *int64
	count   int64 // the post's count, from sqlReadLikeCounted only
}

// check turns the read's error into the store's: no row is no post.
func (r likeRow) check(postID string, err error) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return ErrNotFound
	}
	if err != nil {
		return fmt.Errorf("read like of %s: %w", postID, err)
	}
	return nil
}

// like is the like r read (Version 0 if there is no row).
func (r likeRow) like(postID, userID string) Like {
	l := Like{PostID: postID, UserID: userID}
	if r.version != nil {
		l.Version, l.Shard = *r.version, int(*r.shard)
		if *r.liked {
			l.State = Liked
		}
	}
	return l
}

// Tally is what one post's count says against its likes.
type Tally struct {
	PostID    string
	Counted   int64 // the sum of its counter rows
	LikedRows int64 // its like rows that are liked
}

// Drift is how far the count is from the likes: 0 when they agree.
func (t Tally) Drift() int64 { return t.Counted - t.LikedRows }

// Tallies returns the tallies of up to limit posts whose ids follow
// after ("" for the first page), in id order, each page read in one
// snapshot.
func (s *Store) Tallies(ctx context.Context, after string, limit int) ([]Tally, error) {
	if after == "" {
		after = "00000000-0000-0000-0000-000000000000"
	}
	rows, err := s.db.Query(ctx, sqlTally, after, limit)
	if err != nil {
		return nil, fmt.Errorf("tally likes: %w", err)
	}
	var out []Tally
	var t Tally
	if _, err := pgx.ForEachRow(rows, []any{&t.PostID, &t.Counted, &t.LikedRows}, func() error {
		out = append(out, t)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("tally likes: %w", err)
	}
	return out, nil
}

func scanPost(row pgx.Row) (Post, error) {
	var p Post
	var shards int16
	err := row.Scan(&p.ID, &p.AuthorID, &p.Title, &shards, &p.CreatedAt, &p.LikeCount, &p.LikedByMe)
	p.LikeShards = int(shards)
	return p, err
}
