package likes

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shop-example/shop/internal/platform/ids"
	"github.com/shop-example/shop/internal/platform/layers"
	"github.com/shop-example/shop/internal/platform/metrics"
	"github.com/shop-example/shop/internal/platform/postgres"
	"github.com/shop-example/shop/internal/platform/problem"
)

// The layers of the like flow (like and unlike are one flow, Set), where
// each one is:
//
//	layer           where                                        backed by
//	0 idempotency   none: PUT and DELETE are idempotent by        —
//	                meaning (the state is the request)
//	2 state, first  the like as the database shows it: already    SetTo: Store.Look
//	                where it is asked to be, it is answered at
//	                once, with no lock and no write
//	1 lock          one user's clicks on one post, never the      Store.QueueLock: sqlLockLike
//	                post: pg_advisory_xact_lock on (user, post)
//	                in the round trip that begins the like's
//	                transaction (the default), or                 Service.redisKeys
//	                like:{user}:{post} in Redis around it
//	                (SHOP_LIKE_LOCK=redsync)
//	2 state         unliked ⇄ liked, asked again of the like      SetTo (Like.Set): Store.QueueMove
//	                read under the lock; a move to where the
//	                like already is changes nothing
//	3 version       the like row written WHERE version = $read,   Store.QueueMove: sqlUpdateLike
//	                with its counter row in the same statement
//	4 constraint    one like row per (post, user), ever; no       likes_pkey,
//	                counter row below zero                        post_like_shards_n_nonnegative
//	count           moves by what the write changed in the row    Delta, countAfter
//	                (not by what was asked), in a counter row
//	                picked at random; the reconciler checks
//	                sum(counter rows) = liked rows                Reconcile
//
// What the client is answered when a layer refuses (the codes' statuses
// are httpx/errors.go's one table):
//
//	2  the like already where it is asked to be: 200, the like and its
//	   count as they are, nothing written
//	1  the lock not had within LockWait: 409 resource_busy, Retry-After
//	3  the like moved since read: read again (3 tries, then 409
//	   resource_busy)
//	4  a second like row, a counter below zero: read again, and 2 answers
//
// What each layer runs (the SQL is in postgres.go):
//
//	2  SELECT the like and the post's count (Store.Look), before any lock;
//	   Like.Set, a pure function of the like as read
//	1  set_config('lock_timeout', LockWait, true), then SELECT
//	   pg_advisory_xact_lock(hashtextextended('like:' || user || ':' ||
//	   post, 0)), with BEGIN (55P03 past LockWait: ErrLockBusy, 409
//	   resource_busy); with
//	   redsync, SET like:{user}:{post} NX PX on a majority of the Redis
//	   nodes around the transaction
//	3  UPDATE likes SET liked, shard, version = version + 1 … WHERE
//	   post_id AND user_id AND version = the version read, and the
//	   counter row moved by what it changed, in one statement: no row is
//	   ErrVersionConflict, read again
//	4  the first like's INSERT INTO likes under likes_pkey
//	   (ErrDuplicateLike), the counter row's UPDATE under
//	   post_like_shards_n_nonnegative (ErrCountBelowZero): read again

// LockStrategy is where layer 1 serialises one user's clicks on one post
// (SHOP_LIKE_LOCK).
type LockStrategy string

// The lock strategies.
const (
	// LockAdvisory takes pg_advisory_xact_lock on (user, post) inside the
	// like's transaction, in the round trip that begins it (the default):
	// no Redis, no round trip of its own. A waiter waits in PostgreSQL,
	// on a connection of its own, for at most LockWait.
	LockAdvisory LockStrategy = "advisory"
	// LockRedsync takes a redsync lock on like:{user}:{post} over the
	// Redis nodes, waiting at most LockWait, around the like's
	// transaction (the same one, without the advisory lock's statements):
	// two round trips to a quorum of nodes more, and waiters that hold no
	// connection.
	LockRedsync LockStrategy = "redsync"
)

// ParseLockStrategy reads SHOP_LIKE_LOCK.
func ParseLockStrategy(s string) (LockStrategy, error) {
	switch l := LockStrategy(s); l {
	case LockAdvisory, LockRedsync:
		return l, nil
	}
	return "", fmt.Errorf("want advisory or redsync, got %q", s)
}

// LockWait bounds a like's wait for the lock on its (user, post), in
// PostgreSQL or in Redis, before 409 resource_busy: only that user's own
// earlier click on that post holds it, for a few milliseconds; a like is
// worth less than a long wait.
const LockWait = 500 * time.Millisecond

// FlowLike names the like flow (like and unlike) in the conflict counter
// and in docs/ABLATION.md.
const FlowLike = "like_post"

// DefaultShards is how many counter rows a new post's count is spread
// over. Chosen from the shard sweep of `shop bench likes`
// (docs/BENCHMARKS.md, "Likes"; the runs it was chosen from are in that
// file's history): with 64 clients liking one post, the counter alone
// had most of what more rows gave by 16, and the whole flow, CPU-bound
// on two shared cores, showed no difference between 16 and 64 beyond the
// noise. A viral post is read far more often than it is liked, and each
// read sums all its rows: 16 takes most of the gain for a quarter of the
// rows.
const DefaultShards = 16

// LikeRows are the steps the like flow takes on its rows: *Store
// (postgres.go). It is an interface so that a layer test can take one
// layer off by handing in a variant of the production step
// (harness/variants); production leaves it nil in Config, and gets the
// store.
type LikeRows interface {
	Look(ctx context.Context, postID, userID string, change Change) (l Like, count int64, moves bool, err error)
	QueueLock(b *pgx.Batch, postID, userID string)
	QueueRead(b *pgx.Batch, postID, userID string) *LikeRead
	QueueMove(b *pgx.Batch, r *LikeRead, now time.Time, change Change) (*LikeMove, error)
}

// Config holds what the service is built from.
type Config struct {
	DB *pgxpool.Pool // the like's transactions, and the store's reads
	// Locker is the Redis lock of LockRedsync; the other strategy needs
	// none.
	Locker  layers.Locker
	Metrics *metrics.Metrics
	Logger  *slog.Logger
	Now     func() time.Time
	// Shards is how many counter rows a new post gets; 0 means
	// DefaultShards. The bench sets 1 for the single-row baseline.
	Shards int
	// Lock is the strategy of layer 1; "" means LockAdvisory.
	Lock LockStrategy

	// The step; nil is production's (NewStore(DB)).
	Likes LikeRows
}

// Service runs posts, likes and the count's reconciliation.
type Service struct {
	db      *pgxpool.Pool
	store   *Store
	likes   LikeRows
	like    layers.Flow
	metrics *metrics.Metrics
	counts  *counters
	logger  *slog.Logger
	now     func() time.Time
	shards  int
	lock    LockStrategy
}

// NewService returns the likes service.
func NewService(cfg Config) (*Service, error) {
	if cfg.Lock == "" {
		cfg.Lock = LockAdvisory
	}
	if _, err := ParseLockStrategy(string(cfg.Lock)); err != nil {
		return nil, fmt.Errorf("likes: lock: %w", err)
	}
	if cfg.DB == nil || (cfg.Locker == nil && cfg.Lock == LockRedsync) {
		return nil, errors.New("likes: a pool is required, and a locker for the redsync lock")
	}
	if cfg.Shards == 0 {
		cfg.Shards = DefaultShards
	}
	if cfg.Shards < 1 || cfg.Shards > MaxShards {
		return nil, fmt.Errorf("likes: %d counter rows per post, want 1–%d", cfg.Shards, MaxShards)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	store := NewStore(cfg.DB)
	if cfg.Likes == nil {
		cfg.Likes = store
	}
	counts, err := newCounters(cfg.Metrics)
	if err != nil {
		return nil, err
	}
	flow := layers.Flows("like", cfg.Locker, cfg.Metrics)
	return &Service{db: cfg.DB, store: store, likes: cfg.Likes, like: flow(FlowLike), metrics: cfg.Metrics,
		counts: counts, logger: cfg.Logger, now: cfg.Now, shards: cfg.Shards, lock: cfg.Lock}, nil
}

// Set makes userID's like of postID what want says, and returns the like
// as it is then with its post's count. Liking a liked post, or unliking
// one that is not liked, changes nothing and answers the current state.
func (s *Service) Set(ctx context.Context, userID, postID string, want State) (Result, error) {
	if !ids.Valid(postID) {
		return Result{}, ErrNotFound
	}
	change := SetTo(want)
	// Layer 2, first on the like as the database shows it now (Look, one
	// statement that sums the count too): a like already where it is
	// asked to be (a double click whose twin is done, a PUT sent again
	// after a lost answer) is answered at once, in one round trip, with
	// no lock and no write. The answer is true as of this read, which is
	// all a later answer could say too.
	l, n, moves, err := s.likes.Look(ctx, postID, userID, change)
	if err != nil {
		return Result{}, err
	}
	if !moves {
		s.like.Stopped(ctx, layers.State)
		return Result{PostID: postID, State: l.State, LikeCount: n}, nil
	}
	var out Result
	// Layer 1 with SHOP_LIKE_LOCK=redsync: like:{user}:{post} in Redis,
	// around the transaction. A double click waits for the first (briefly:
	// LockWait) and then finds it done; other users never wait on this
	// key. The post itself is never locked: its counter rows serialise
	// what must be. With the advisory lock (the default) there is no key
	// here: the lock is the transaction's first statement.
	err = s.like.LockAll(ctx, s.redisKeys("like:"+userID+":"+postID), func(ctx context.Context) error {
		return s.like.Retry(ctx, func(attempt int) error {
			var read *LikeRead
			var move *LikeMove
			// One transaction, two round trips (postgres.InTxBatched):
			err := postgres.InTxBatched(ctx, s.db,
				func(first *pgx.Batch) {
					// Layer 1 with SHOP_LIKE_LOCK=advisory (the default):
					// pg_advisory_xact_lock on (user, post), sent with
					// BEGIN, waited for LockWait at most (then
					// ErrLockBusy), released by the COMMIT. A second click
					// waits here for the first's commit.
					if s.lock == LockAdvisory {
						s.likes.QueueLock(first, postID, userID)
					}
					// The like as it is under the lock: what the click
					// before wrote.
					read = s.likes.QueueRead(first, postID, userID)
				},
				func(pgx.Tx) (*pgx.Batch, error) {
					// Layer 2 again, on the like read under the lock: the
					// change says whether there is anything to write.
					// Layer 3: the write goes only at the version read;
					// layer 4: a first like is inserted under likes_pkey,
					// and the counter row, moved in the same statement,
					// never goes below zero. With COMMIT.
					last := &pgx.Batch{}
					var err error
					move, err = s.likes.QueueMove(last, read, s.stamp(), change)
					return last, err
				})
			l, n, moved, err := move.Result(err)
			switch {
			case errors.Is(err, ErrVersionConflict):
				return layers.Lost(layers.Version, err)
			case errors.Is(err, ErrCountBelowZero) && attempt == layers.MaxTries:
				// Still refused after re-reading: not a race but a
				// counter row that lost a like. A bug, for the log and
				// the reconciler, not for the client to retry.
				s.like.Stopped(ctx, layers.Constraint)
				return fmt.Errorf("like of %s by %s: %w", postID, userID, err)
			case errors.Is(err, ErrDuplicateLike), errors.Is(err, ErrCountBelowZero):
				return layers.Lost(layers.Constraint, err)
			case err != nil:
				return err
			case moved:
				s.counts.changes.WithLabelValues(l.State.String()).Inc()
			default:
				// The click before, waited for, made the like.
				s.like.Stopped(ctx, layers.State)
			}
			out = Result{PostID: postID, State: l.State, LikeCount: n}
			return nil
		})
	})
	if errors.Is(err, ErrLockBusy) {
		// The advisory lock, not had within LockWait.
		s.like.Stopped(ctx, layers.Lock)
		return Result{}, &problem.Error{Code: problem.ResourceBusy,
			Detail: "another request is working on this like; retry shortly", RetryAfter: time.Second}
	}
	return out, err
}

// redisKeys is key when layer 1's strategy takes its lock in Redis, and
// no key when the lock is in the transaction.
func (s *Service) redisKeys(key string) []string {
	if s.lock != LockRedsync {
		return nil
	}
	return []string{key}
}

// CreatePost creates a post by userID, its count spread over the
// service's number of counter rows.
func (s *Service) CreatePost(ctx context.Context, userID, title string) (Post, error) {
	if err := ValidateTitle(title); err != nil {
		return Post{}, err
	}
	id, err := uuid.NewV7()
	if err != nil {
		return Post{}, fmt.Errorf("new post id: %w", err)
	}
	p := Post{ID: id.String(), AuthorID: userID, Title: title, CreatedAt: s.stamp(), LikeShards: s.shards}
	if err := s.store.CreatePost(ctx, p); err != nil {
		return Post{}, err
	}
	return p, nil
}

// Post returns a post as viewerID sees it.
func (s *Service) Post(ctx context.Context, viewerID, id string) (Post, error) {
	if !ids.Valid(id) {
		return Post{}, ErrNotFound
	}
	return s.store.Post(ctx, viewerID, id)
}

// Posts returns a page of posts, newest first, as viewerID sees them.
func (s *Service) Posts(ctx context.Context, viewerID, cursor string, limit int) ([]Post, string, error) {
	return s.store.Posts(ctx, viewerID, cursor, limit)
}

// stamp is the time now as PostgreSQL keeps it.
func (s *Service) stamp() time.Time { return s.now().UTC().Truncate(time.Microsecond) }
