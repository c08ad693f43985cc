package likes

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"

	"github.com/shop-example/shop/internal/platform/ids"
	"github.com/shop-example/shop/internal/platform/layers"
	"github.com/shop-example/shop/internal/platform/lock"
	"github.com/shop-example/shop/internal/platform/metrics"
	"github.com/shop-example/shop/internal/platform/problem"
)

// The layers of the like flow (like and unlike are one flow, Set), where
// each one is:
//
//	layer           where                                        backed by
//	0 idempotency   none: PUT and DELETE are idempotent by        —
//	                meaning (the state is the request)
//	1 lock          like:{user}:{post}: one user's clicks on one  Set
//	                post, never the post (a hot post would queue
//	                every user behind one key)
//	2 state         unliked ⇄ liked; a move to where the like is  Like.Set
//	                already changes nothing
//	3 version       the like row written WHERE version = $read,   Store.Update: sqlUpdateLike
//	                with its counter row in the same statement
//	4 constraint    one like row per (post, user), ever; no       likes_pkey,
//	                counter row below zero                        post_like_shards_n_nonnegative
//	count           moves by what the write changed in the row    Delta, countAfter
//	                (not by what was asked), in a counter row
//	                picked at random; the reconciler checks
//	                sum(counter rows) = liked rows                Reconcile

// Locker runs work under a distributed lock (platform/lock.Locker).
type Locker interface {
	Do(ctx context.Context, key string, fn func(ctx context.Context) error) error
}

// FlowLike names the like flow (like and unlike) in the conflict counter
// and in docs/ABLATION.md.
const FlowLike = "like_post"

// maxConflictRetries bounds how often a like re-reads after losing a race
// at layer 3 or 4, so contention never becomes an unbounded loop.
const maxConflictRetries = 3

// DefaultShards is how many counter rows a new post's count is spread
// over. Chosen from `shop bench likes` (docs/BENCHMARKS.md): with 64
// clients liking one post, the counter alone went from one row's ~200
// likes/s to ~1,100 at 16 rows and ~1,400 at 64, and the whole flow,
// CPU-bound on two shared cores from 4 rows on, showed no difference
// between 16 and 64 beyond the noise. A viral post is read far more often
// than it is liked, and each read sums all its rows: 16 takes most of the
// gain for a quarter of the rows.
const DefaultShards = 16

// Config holds what the service is built from.
type Config struct {
	Store   *Store
	Locker  Locker
	Metrics *metrics.Metrics
	Logger  *slog.Logger
	Now     func() time.Time
	// Shards is how many counter rows a new post gets; 0 means
	// DefaultShards. The bench sets 1 for the single-row baseline.
	Shards int
	// Layers are the defences on. The zero value is all of them; only the
	// layer tests take some off.
	Layers layers.Set
}

// Service runs posts, likes and the count's reconciliation.
type Service struct {
	store   *Store
	locker  Locker
	metrics *metrics.Metrics
	counts  *counters
	logger  *slog.Logger
	now     func() time.Time
	shards  int
	layers  layers.Set
}

// NewService returns the likes service.
func NewService(cfg Config) (*Service, error) {
	if cfg.Store == nil || cfg.Locker == nil {
		return nil, errors.New("likes: a store and a locker are required")
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
	counts, err := newCounters(cfg.Metrics)
	if err != nil {
		return nil, err
	}
	return &Service{store: cfg.Store, locker: cfg.Locker, metrics: cfg.Metrics, counts: counts,
		logger: cfg.Logger, now: cfg.Now, shards: cfg.Shards, layers: cfg.Layers}, nil
}

// Set makes userID's like of postID what want says, and returns the like
// as it is then with its post's count. Liking a liked post, or unliking
// one that is not liked, changes nothing and answers the current state.
func (s *Service) Set(ctx context.Context, userID, postID string, want State) (Result, error) {
	if !ids.Valid(postID) {
		return Result{}, ErrNotFound
	}
	var out Result
	ran := false // whether the lock let the work run
	// Layer 1: lock this user's like of this post, across replicas. A
	// double click waits for the first (briefly: the locker's budget) and
	// then finds it done; other users never wait on this key. The post
	// itself is not locked: its counter rows serialise what must be.
	err := s.lock(ctx, "like:"+userID+":"+postID, func(ctx context.Context) error {
		ran = true
		for attempt := 1; ; attempt++ {
			var wrote bool
			// Layers 3 and 4: Update writes the like only at the version
			// read, or inserts the first one under likes_pkey, and moves
			// the counter in the same statement.
			l, n, err := s.store.Update(ctx, postID, userID, s.layers, s.stamp(), func(l *Like) (bool, error) {
				// Layer 2: the state machine says whether there is
				// anything to write.
				if !s.layers.On(layers.State) {
					l.State, wrote = want, true
					return true, nil
				}
				wrote = l.Set(want)
				if !wrote {
					s.metrics.Stopped(FlowLike, metrics.LayerState)
				}
				return wrote, nil
			})
			retry := attempt < maxConflictRetries
			switch {
			case errors.Is(err, ErrVersionConflict):
				s.metrics.Stopped(FlowLike, metrics.LayerVersion)
			case errors.Is(err, ErrDuplicateLike), errors.Is(err, ErrCountBelowZero):
				s.metrics.Stopped(FlowLike, metrics.LayerConstraint)
			case err != nil:
				return err
			default:
				if wrote {
					s.counts.changes.WithLabelValues(l.State.String()).Inc()
				}
				out = Result{PostID: postID, State: l.State, LikeCount: n}
				return nil
			}
			switch {
			case retry:
			case errors.Is(err, ErrCountBelowZero):
				// Still refused after re-reading: not a race but a
				// counter row that lost a like. A bug, for the log and
				// the reconciler, not for the client to retry.
				return fmt.Errorf("like of %s by %s: %w", postID, userID, err)
			default:
				return &problem.Error{Code: problem.ResourceBusy, Detail: "the like keeps changing; try again", RetryAfter: time.Second}
			}
		}
	})
	switch {
	case problem.CodeOf(err) == problem.ResourceBusy && !ran:
		s.metrics.Stopped(FlowLike, metrics.LayerLock)
	case errors.Is(err, lock.ErrLockLost):
		// The lease could not be extended (Redis slow or gone) and the
		// write was cancelled: it may or may not have happened. Sending
		// the same PUT or DELETE again is safe, which is what to say.
		return Result{}, &problem.Error{Code: problem.Unavailable,
			Detail: "the like's lock was lost while it was written; send the request again", RetryAfter: time.Second}
	}
	return out, err
}

// lock runs fn under the lock on key while layer 1 is on.
func (s *Service) lock(ctx context.Context, key string, fn func(ctx context.Context) error) error {
	if !s.layers.On(layers.Lock) {
		return fn(ctx)
	}
	return s.locker.Do(ctx, key, fn)
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
