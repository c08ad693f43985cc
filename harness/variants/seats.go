package variants

import (
	"context"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/shop-example/shop/internal/platform/layers"
	"github.com/shop-example/shop/internal/seats"
)

// Holds returns the seat flows' steps with the layers that off takes off,
// telling probe each time one was: the locks taken in PostgreSQL
// (UnlockedHolds; the Redis ones are the Locker's, NoLock), the writes
// without their version conditions (UnversionedHolds), the rules and the
// status condition applied blind (BlindHolds).
func Holds(rows seats.HoldRows, off layers.Set, probe *layers.Probe) seats.HoldRows {
	if isOff(off, layers.Lock) {
		rows = UnlockedHolds{HoldRows: rows, Probe: probe}
	}
	if isOff(off, layers.Version) {
		rows = UnversionedHolds{HoldRows: rows, Probe: probe}
	}
	if isOff(off, layers.State) {
		rows = BlindHolds{HoldRows: rows, Probe: probe}
	}
	return rows
}

// UnlockedHolds are the seat flows' steps without the locks a hold takes
// in its transaction: no caps' lock on (user, event), no lock per seat,
// no bound on lock waits.
type UnlockedHolds struct {
	seats.HoldRows
	Probe *layers.Probe
}

// QueueLocks queues no lock.
func (u UnlockedHolds) QueueLocks(*pgx.Batch, seats.Hold, seats.LockStrategy) {
	u.Probe.Took(layers.Lock)
}

// BlindHolds are the seat flows' steps as code without the state rules
// runs them: the read before any lock sees no seat taken, a new hold's
// rule on its seats lets any seat be held and its write no longer asks
// status = 'available', and a confirm or release moves the hold from
// whatever state it is in (the rule is asked of the hold in each state
// in turn; the first move it makes is written, at the version read).
type BlindHolds struct {
	seats.HoldRows
	Probe *layers.Probe
}

// seatAvailable cuts the state condition out of a hold's seat write.
var seatAvailable = Edit{Prefix: "WITH written AS", Old: " AND s.status = 'available'", New: ""}

// Glance answers that no seat asked for is taken.
func (b BlindHolds) Glance(ctx context.Context, eventID, userID, requestKey string, labels []string) (seats.Glance, error) {
	g, err := b.HoldRows.Glance(ctx, eventID, userID, requestKey, labels)
	if len(g.Taken) > 0 {
		b.Probe.Took(layers.State)
		g.Taken = nil
	}
	return g, err
}

// QueueHoldSeats holds the seats whatever their state.
func (b BlindHolds) QueueHoldSeats(batch *pgx.Batch, h seats.Hold, read []seats.Seat, rule seats.SeatRule) error {
	from := len(batch.QueuedQueries)
	err := b.HoldRows.QueueHoldSeats(batch, h, read, func(read []seats.Seat) error {
		if rule(read) != nil {
			b.Probe.Took(layers.State)
		}
		return nil
	})
	Edited(batch, from, layers.State, b.Probe, seatAvailable)
	return err
}

// QueueConfirm applies change blind.
func (b BlindHolds) QueueConfirm(ctx context.Context, batch *pgx.Batch, h seats.Hold, bookingID string, now time.Time, change seats.Change) (seats.Booking, bool, error) {
	return b.HoldRows.QueueConfirm(ctx, batch, h, bookingID, now, b.blind(change))
}

// QueueRelease applies change blind.
func (b BlindHolds) QueueRelease(batch *pgx.Batch, h seats.Hold, now time.Time, change seats.Change) (seats.Hold, bool, error) {
	return b.HoldRows.QueueRelease(batch, h, now, b.blind(change))
}

// blind is change without its refusals.
func (b BlindHolds) blind(change seats.Change) seats.Change {
	return func(h *seats.Hold) (bool, error) {
		moved, err := change(h)
		if err == nil && moved {
			return true, nil
		}
		for _, status := range seats.HoldStatuses {
			// The expiry time is part of the rule too.
			for _, expires := range []time.Time{h.ExpiresAt, farFuture, farPast} {
				try := *h
				try.Status, try.ExpiresAt = status, expires
				if m, e := change(&try); e == nil && m {
					b.Probe.Took(layers.State)
					h.Status = try.Status
					return true, nil
				}
			}
		}
		return moved, err
	}
}

// UnversionedHolds are the seat flows' steps with the writes' version
// conditions cut out: a hold writes its seats whatever moved them since
// it read them, and a confirm or release writes the hold whatever moved
// it (a confirm books the hold's seats whatever holds them now).
type UnversionedHolds struct {
	seats.HoldRows
	Probe *layers.Probe
}

var (
	// seatVersion cuts the version condition out of a hold's seat write.
	seatVersion = Edit{Prefix: "WITH written AS", Old: " AND s.version = r.version", New: ""}
	// holdVersion cuts it out of a confirm's and a release's move, and
	// the confirm's fence on the seats it books (still this hold's).
	holdVersion = []Edit{
		{Prefix: "WITH moved AS", Old: "WHERE id = $1 AND version = $6", New: "WHERE id = $1 AND $6::bigint IS NOT NULL"},
		{Prefix: "WITH moved AS", Old: "AND seats.hold_id = moved.id AND seats.status = 'held'", New: "AND true"},
		{Prefix: "WITH moved AS", Old: "WHERE id = $1 AND version = $3", New: "WHERE id = $1 AND $3::bigint IS NOT NULL"},
	}
)

// QueueHoldSeats writes the seats without the version check.
func (u UnversionedHolds) QueueHoldSeats(b *pgx.Batch, h seats.Hold, read []seats.Seat, rule seats.SeatRule) error {
	from := len(b.QueuedQueries)
	err := u.HoldRows.QueueHoldSeats(b, h, read, rule)
	Edited(b, from, layers.Version, u.Probe, seatVersion)
	return err
}

// QueueConfirm moves the hold without the version check.
func (u UnversionedHolds) QueueConfirm(ctx context.Context, b *pgx.Batch, h seats.Hold, bookingID string, now time.Time, change seats.Change) (seats.Booking, bool, error) {
	from := len(b.QueuedQueries)
	booked, moved, err := u.HoldRows.QueueConfirm(ctx, b, h, bookingID, now, change)
	Edited(b, from, layers.Version, u.Probe, holdVersion...)
	return booked, moved, err
}

// QueueRelease moves the hold without the version check.
func (u UnversionedHolds) QueueRelease(b *pgx.Batch, h seats.Hold, now time.Time, change seats.Change) (seats.Hold, bool, error) {
	from := len(b.QueuedQueries)
	out, moved, err := u.HoldRows.QueueRelease(b, h, now, change)
	Edited(b, from, layers.Version, u.Probe, holdVersion...)
	return out, moved, err
}

// Sections is the Redis lock per section that `shop bench seats` weighs
// against a lock per seat: with SHOP_SEAT_LOCK=redsync, the seat locks of
// a hold (seat:{event}:{seat}, in seat order) become one lock per row of
// seats the hold touches (section:{event}:{row}), in row order; every
// other key is locked as it is. Fewer Redis round trips than a lock per
// seat, but every hold in a row waits for every other.
type Sections struct{ layers.Locker }

// heldSection marks the section a hold's nested seat locks are under.
type heldSection struct{}

// Do runs fn under the lock of key's section, or of key itself.
func (s Sections) Do(ctx context.Context, key string, fn func(context.Context) error) error {
	section, ok := sectionOf(key)
	if !ok {
		return s.Locker.Do(ctx, key, fn)
	}
	if held, _ := ctx.Value(heldSection{}).(string); held == section {
		return fn(ctx) // a seat of the section this hold locked already
	}
	return s.Locker.Do(ctx, section, func(ctx context.Context) error {
		return fn(context.WithValue(ctx, heldSection{}, section))
	})
}

// sectionOf is the section lock of a seat lock: seat:{event}:{seat} is
// section:{event}:{row}.
func sectionOf(key string) (string, bool) {
	rest, ok := strings.CutPrefix(key, "seat:")
	if !ok {
		return "", false
	}
	event, seat, ok := strings.Cut(rest, ":")
	if !ok || seat == "" {
		return "", false
	}
	return "section:" + event + ":" + seat[:1], true
}
