package variants

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/shop-example/shop/internal/likes"
	"github.com/shop-example/shop/internal/platform/layers"
)

// Likes returns rows with the layers that off takes off, telling probe
// each time one was: the lock in PostgreSQL not taken (UnlockedLikes),
// the write without its version (UnversionedLikes), the state rule
// applied blind (BlindLikes). The Redis lock of SHOP_LIKE_LOCK=redsync is
// taken off by NoLock.
func Likes(rows likes.LikeRows, off layers.Set, probe *layers.Probe) likes.LikeRows {
	if isOff(off, layers.Lock) {
		rows = UnlockedLikes{LikeRows: rows, Probe: probe}
	}
	if isOff(off, layers.Version) {
		rows = UnversionedLikes{LikeRows: rows, Probe: probe}
	}
	if isOff(off, layers.State) {
		rows = BlindLikes{LikeRows: rows, Probe: probe}
	}
	return rows
}

// UnlockedLikes are the like rows without the advisory lock: its
// statements are left out of the batch that begins the like's
// transaction, and one user's clicks on one post run side by side.
type UnlockedLikes struct {
	likes.LikeRows
	Probe *layers.Probe
}

// QueueLock queues nothing.
func (u UnlockedLikes) QueueLock(*pgx.Batch, string, string) {
	u.Probe.Took(layers.Lock)
}

// UnversionedLikes are the like rows written without the version check:
// a like is written, and its counter row moved, whatever wrote it since
// it was read.
type UnversionedLikes struct {
	likes.LikeRows
	Probe *layers.Probe
}

// likeVersion cuts the version condition out of a like's write.
var likeVersion = Edit{Prefix: "WITH l AS", Old: "AND version = $7", New: "AND $7::bigint IS NOT NULL"}

// QueueMove queues the write without the version check.
func (u UnversionedLikes) QueueMove(b *pgx.Batch, r *likes.LikeRead, now time.Time, change likes.Change) (*likes.LikeMove, error) {
	from := len(b.QueuedQueries)
	m, err := u.LikeRows.QueueMove(b, r, now, change)
	Edited(b, from, layers.Version, u.Probe, likeVersion)
	return m, err
}

// BlindLikes are the like rows as a flow without the state rule moves
// them: when the rule finds nothing to do (a like of a liked post), the
// like is moved all the same, as the rule would move a like in the other
// state. The rule is asked of the like in each state in turn, and the
// first move it makes is the one written, at the version read. So the
// first look answers nothing at once, and a like already where it is
// asked to be is written again.
type BlindLikes struct {
	likes.LikeRows
	Probe *layers.Probe
}

// Look applies change blind.
func (b BlindLikes) Look(ctx context.Context, postID, userID string, change likes.Change) (likes.Like, int64, bool, error) {
	return b.LikeRows.Look(ctx, postID, userID, b.blind(change))
}

// QueueMove applies change blind.
func (b BlindLikes) QueueMove(batch *pgx.Batch, r *likes.LikeRead, now time.Time, change likes.Change) (*likes.LikeMove, error) {
	return b.LikeRows.QueueMove(batch, r, now, b.blind(change))
}

// blind is change without its no-ops.
func (b BlindLikes) blind(change likes.Change) likes.Change {
	return func(l *likes.Like) bool {
		if change(l) {
			return true
		}
		for _, state := range likes.States {
			try := *l
			try.State = state
			if change(&try) {
				b.Probe.Took(layers.State)
				l.State = try.State
				return true
			}
		}
		return false
	}
}
