package likes

import (
	"errors"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/shop-example/shop/internal/platform/problem"
)

// State is where one user's like of one post is.
//
//	unliked ──like──▶ liked
//	   ▲                │
//	   └─────unlike─────┘
//
// A like that was never made is unliked: there is no row yet, and the
// first like inserts it. Liking a liked post, or unliking an unliked one,
// changes nothing.
type State uint8

// The states of a like.
const (
	Unliked State = iota
	Liked
)

func (s State) String() string {
	if s == Liked {
		return "liked"
	}
	return "unliked"
}

// Like is one user's like of one post.
type Like struct {
	PostID string
	UserID string
	State  State
	// Shard is the counter row that counts this like while it is liked
	// (and that counted it last, once unliked): an unlike takes the like
	// back from the row the like added it to.
	Shard int
	// Version is bumped by every write of the row; 0 means there is no
	// row yet. Writes are made with "WHERE version = $read": the version
	// is the fencing token that stops a writer that read a stale like.
	Version int64
}

// Exists reports whether the like has a row.
func (l Like) Exists() bool { return l.Version > 0 }

// Set moves the like to want and reports whether that changed anything:
// liking a liked post, or unliking one that is not liked, leaves the like
// as it is (changed is false). It is the whole state machine: both moves
// are legal from the other state, and each is a no-op from its own.
func (l *Like) Set(want State) (changed bool) {
	if l.State == want {
		return false
	}
	l.State = want
	return true
}

// States are the states of a like, in order.
var States = []State{Unliked, Liked}

// A Change is one move of a like's state machine, layer 2: given the like
// as it was read, it makes the move and reports whether the like moved.
// A move to where the like already is leaves it as it is and reports
// false. No move is ever refused, so a Change returns no error.
//
// A change is pure: the store applies it to the like it reads
// (Store.Look, Store.QueueMove), and writes the like only if it moved, at
// the version read (layer 3).
type Change func(l *Like) (moved bool)

// SetTo is the move of a like to want (Like.Set): the change of PUT
// (Liked) and DELETE (Unliked).
func SetTo(want State) Change {
	return func(l *Like) bool { return l.Set(want) }
}

// Delta is how much a move of a like from before to after changes its
// post's count: +1 when it becomes liked, -1 when it stops being liked,
// 0 otherwise. The count moves by what the row changed, never by what
// the request asked for, so a write that changes nothing counts nothing.
func Delta(before, after State) int {
	switch {
	case before == after:
		return 0
	case after == Liked:
		return 1
	default:
		return -1
	}
}

// Post is something users like, as one viewer sees it.
type Post struct {
	ID        string
	AuthorID  string
	Title     string
	CreatedAt time.Time
	// LikeShards is how many counter rows the post's count is spread
	// over, fixed when it is created.
	LikeShards int
	// LikeCount is the number of users who like the post: the sum of
	// its counter rows, read in one statement.
	LikeCount int64
	// LikedByMe says whether the viewer likes it.
	LikedByMe bool
}

// Result is what a like or unlike answers: the like's state after it,
// and the post's count as the statement that wrote it (or, when nothing
// changed, the read that found it so) saw it.
type Result struct {
	PostID    string
	State     State
	LikeCount int64
}

// MaxTitle is the longest title, in characters (API.md).
const MaxTitle = 200

// Limits of the counter's sharding: a post's count is spread over 1 to
// MaxShards rows.
const MaxShards = 256

// Errors returned by this package, matched with errors.Is.
var (
	ErrNotFound = problem.New(problem.NotFound, "no such post")
	// ErrVersionConflict means another writer changed the like between
	// read and write. It never reaches a client: the service re-reads.
	ErrVersionConflict = errors.New("like changed since it was read")
	// ErrDuplicateLike means a like row for this user and post appeared
	// since it was read (likes_pkey said so): another request made the
	// first like. The service re-reads.
	ErrDuplicateLike = errors.New("like row already exists")
	// ErrLockBusy means the lock on the like in PostgreSQL stayed taken
	// for LockWait (SHOP_LIKE_LOCK=advisory): another click of the same
	// user on the same post is still being written. Nothing was written;
	// the service answers 409 resource_busy.
	ErrLockBusy = errors.New("like is locked by another request")
	// ErrCountBelowZero means a counter row would have gone below zero
	// (post_like_shards_n_nonnegative said so): an unlike taking back a
	// like that was not counted. The service re-reads.
	ErrCountBelowZero = errors.New("like count would go below zero")
)

// ValidateTitle checks a post's title: 1–200 characters, not all blank.
// Control characters are refused by the JSON decoder at the edge.
func ValidateTitle(title string) error {
	n := utf8.RuneCountInString(title)
	switch {
	case !utf8.ValidString(title):
		return problem.New(problem.Invalid, "title: must be valid UTF-8")
	case strings.TrimSpace(title) == "":
		return problem.New(problem.Invalid, "title: must not be empty or blank")
	case n > MaxTitle:
		return problem.Errorf(problem.Invalid, "title: at most %d characters, got %d", MaxTitle, n)
	}
	return nil
}
