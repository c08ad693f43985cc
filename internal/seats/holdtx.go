package seats

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/shop-example/shop/internal/platform/idempotency"
	"github.com/shop-example/shop/internal/platform/layers"
	"github.com/shop-example/shop/internal/platform/outbox"
	"github.com/shop-example/shop/internal/platform/postgres"
	"github.com/shop-example/shop/internal/platform/problem"
)

// The transactions of a hold: its making (Store.Hold) and its end
// (Store.Update). Statements that do not need each other's answers travel
// together in a pgx.Batch, BEGIN with the first of them and COMMIT with
// the last (postgres.InTxBatched); the rules that judge what was read
// (the caps, layer 2) run in Go between the round trips. COMMIT can
// travel with the writes because every check on what a write reached is
// made by the statement itself: a write that reached too little fails
// (a NOT NULL refuses the row it could not fill), and COMMIT does not run.

// Glance is what a hold reads before it takes any lock or opens a
// transaction.
type Glance struct {
	// Event has the seat map's dimensions, without the counts.
	Event Event
	// Taken are the seats asked for that are held or booked now, in seat
	// order.
	Taken []string
	// Repeat is whether the user already has a hold under the request's
	// key: the same request sent again, which the hold's transaction
	// answers with that hold.
	Repeat bool
}

// Glance reads eventID's seat map dimensions, which of labels are taken,
// and whether userID has a hold under requestKey, in one statement
// outside any transaction. It is the cheap refusal of a hold of seats
// already taken: a snapshot, so a seat it shows available may be taken
// by the time the hold's transaction reads it, and the transaction asks
// again.
func (s *Store) Glance(ctx context.Context, eventID, userID, requestKey string, labels []string) (Glance, error) {
	if len(labels) > MaxHoldSeats {
		labels = nil // refused by ValidateHold whatever they are
	}
	var g Glance
	var rows, perRow int16
	err := s.db.QueryRow(ctx, sqlGlance, eventID, labels, userID, requestKey).Scan(
		&g.Event.ID, &g.Event.Name, &rows, &perRow, &g.Event.CreatedAt, &g.Taken, &g.Repeat)
	if errors.Is(err, pgx.ErrNoRows) {
		return Glance{}, ErrNotFound
	}
	if err != nil {
		return Glance{}, fmt.Errorf("glance at event %s: %w", eventID, err)
	}
	g.Event.Rows, g.Event.SeatsPerRow = int(rows), int(perRow)
	return g, nil
}

// HoldOptions say how Store.Hold guards its write.
type HoldOptions struct {
	// Layers are the defences on; a layer test takes some off.
	Layers layers.Set
	// Advisory takes pg_advisory_xact_lock on each seat, in order, before
	// reading them (SHOP_SEAT_LOCK=advisory).
	Advisory bool
	// Record is the request's idempotency key (layer 0), claimed first
	// and completed last in the hold's transaction; nil without layer 0.
	Record *idempotency.Record
}

// Hold creates h in one transaction: it reads what h's user holds of the
// event, claims h's request key, reads h's seats, lets rule judge them
// (the caps, and layer 2: all available), writes each seat at the version
// read (layer 3), and records the seats as actively held under
// hold_seats_one_active_per_seat (layer 4). A seat that moved since it was
// read gives ErrVersionConflict; a second active hold on a seat gives
// ErrSeatTaken. Either way nothing is written.
//
// When h's user already has a hold under h's request key, that hold is
// the answer, whatever its state now, and nothing is written: the same
// request, sent again after its first try committed. A hold under the
// key for other seats gives idempotency_key_reused.
//
// With opts.Record, the transaction claims the request's idempotency key
// first and completes it last with the hold's answer, so the hold and the
// answer that replays it commit together or not at all. A refused claim
// (a copy of the request in flight, or one that completed) comes back as
// the record's *idempotency.Refusal, and nothing is written. The claim
// travels alone with BEGIN: a copy of a request in flight is refused
// there, before it waits for a lock the first copy holds, with a pool
// connection in hand.
//
//	BEGIN, claim                           one round trip (with a record)
//	locks, reads, hold row                 one round trip (BEGIN's, without)
//	seats, hold_seats, complete, COMMIT    one round trip
//
// With layer 1 on, the user's holds on the event are serialised first
// (sqlCapLock), so two of them cannot both read a count under the caps
// and both write. A count of rows cannot be a constraint, and locking the
// rows counted does not stop a new row from joining them; an advisory
// lock needs no table, is taken only by this user's holds on this event,
// and is gone at commit or rollback. Releases and expiry take no such
// lock: they only lower the count, and a hold that does not see one yet
// errs towards refusing. Every lock wait of the transaction is bounded by
// lockTimeout, past which the hold answers resource_busy.
func (s *Store) Hold(ctx context.Context, h Hold, now time.Time, opts HoldOptions, rule func(mine Holding, read []Seat) error) (Hold, error) {
	out := h
	var (
		mine     Holding
		inserted bool
		read     []Seat
	)
	// The locks, then the reads and the hold's row, in this order.
	lockAndRead := func(b *pgx.Batch) {
		if opts.Layers.On(layers.Lock) {
			// The caps' lock comes before the seats': every hold takes
			// the locks in that one order, so they cannot deadlock.
			b.Queue(sqlLockTimeout)
			b.Queue(sqlCapLock, h.UserID, h.EventID)
			if opts.Advisory {
				b.Queue(sqlAdvisoryLocks, h.EventID, h.Seats)
			}
		}
		// Read before this hold's own row is written, so it does not
		// count itself.
		b.Queue(sqlReadHolding, h.UserID, h.EventID, now).QueryRow(func(row pgx.Row) error {
			return row.Scan(&mine.Holds, &mine.Seats)
		})
		b.Queue(sqlInsertHold, h.ID, h.EventID, h.UserID, h.RequestKey, h.Seats, h.ExpiresAt, now).Exec(func(tag pgconn.CommandTag) error {
			inserted = tag.RowsAffected() == 1
			return nil
		})
		b.Queue(sqlReadSeats, h.EventID, h.Seats).Query(func(rows pgx.Rows) error {
			var err error
			read, err = pgx.CollectRows(rows, scanSeat)
			return err
		})
	}
	first := lockAndRead
	if opts.Record != nil {
		first = opts.Record.QueueClaim
	}
	err := postgres.InTxBatched(ctx, s.db, first, func(tx pgx.Tx) (*pgx.Batch, error) {
		if opts.Record != nil {
			b := &pgx.Batch{}
			lockAndRead(b)
			if err := tx.SendBatch(ctx, b).Close(); err != nil {
				return nil, err
			}
		}
		if !inserted {
			// An earlier request with the key made its hold: one whose
			// record is gone (swept), or that ran without layer 0.
			var err error
			out, err = scanHold(tx.QueryRow(ctx, sqlReadHoldOfRequest, h.UserID, h.RequestKey))
			if err != nil {
				return nil, fmt.Errorf("read hold of request: %w", err)
			}
			if out.EventID != h.EventID || !slices.Equal(out.Seats, h.Seats) {
				return nil, problem.New(problem.IdempotencyReused,
					"this Idempotency-Key was used for a hold of other seats; send a new key for a new request")
			}
			_, err = opts.Record.Complete(ctx, tx, heldAnswer(out))
			return nil, err
		}
		if len(read) != len(h.Seats) {
			return nil, fmt.Errorf("hold on %s: %d of %d seats exist", h.EventID, len(read), len(h.Seats))
		}
		if err := rule(mine, read); err != nil {
			return nil, err
		}
		versions := make([]int64, len(read))
		for i, seat := range read {
			versions[i] = seat.Version
		}
		// The last round trip: the seats' write with their hold_seats
		// rows, the key's answer, and COMMIT.
		last := &pgx.Batch{}
		last.Queue(holdSeatsSQL(opts.Layers), h.EventID, h.Seats, h.ID, versions)
		if err := opts.Record.QueueComplete(last, heldAnswer(h)); err != nil {
			return nil, err
		}
		return last, nil
	})
	switch {
	case notNull(err, "hold_seats", "seat"):
		// A seat moved since it was read: the write did not reach it.
		return Hold{}, ErrVersionConflict
	case postgres.ConstraintViolated(err) == ConstraintOneActiveHold:
		return Hold{}, ErrSeatTaken
	case err != nil:
		return Hold{}, txError(err)
	}
	return out, nil
}

// holdSeatsSQL is the write of a hold's seats with the conditions of the
// layers on: sqlHoldSeats in production.
func holdSeatsSQL(on layers.Set) string {
	switch state, version := on.On(layers.State), on.On(layers.Version); {
	case state && version:
		return sqlHoldSeats
	case version:
		return sqlHoldSeatsStateless
	case state:
		return sqlHoldSeatsUnversioned
	default:
		return sqlHoldSeatsAny
	}
}

// txError turns PostgreSQL's refusals of a transaction that waited into
// the package's: a deadlock broken by rolling this one back is
// ErrDeadlock (the service re-reads), and a lock not had within
// lockTimeout is resource_busy.
func txError(err error) error {
	switch postgres.SQLState(err) {
	case "40P01":
		return ErrDeadlock
	case "55P03": // lock_not_available
		return &problem.Error{Code: problem.ResourceBusy, Detail: "a seat is being held by another request; retry shortly", RetryAfter: time.Second}
	}
	return err
}

// Move is how Store.Update ends a hold: confirmed (with a booking) or
// released.
type Move struct {
	// To is the hold's new status: Confirmed or Released.
	To HoldStatus
	// BookingID is the new booking's id when To is Confirmed.
	BookingID string
}

// BookingEvent is the body of booking.confirmed.
type BookingEvent struct {
	BookingID string   `json:"booking_id"`
	HoldID    string   `json:"hold_id"`
	EventID   string   `json:"event_id"`
	UserID    string   `json:"user_id"`
	Seats     []string `json:"seats"`
}

// Update reads userID's hold, lets change apply the rule (layer 2), and
// writes the move in one transaction: the hold at the version read
// (layer 3), its seats (booked, or back to available), its hold_seats no
// longer active, and for a confirm the booking and one ticket per seat
// under tickets_one_per_seat (layer 4). change returning
// ErrAlreadyConfirmed makes Update return the hold's booking. The hold is
// read first, before anything else: a confirm that lost to the expiry job
// finds its own row expired.
//
// With rec (a confirm's idempotency key, layer 0), the key is claimed
// with the read and completed with the booking's answer, as in Hold; the
// read waits for no lock, so it travels with the claim.
//
//	BEGIN, claim, read hold             one round trip
//	the move's writes, complete, COMMIT one round trip
func (s *Store) Update(ctx context.Context, holdID, userID string, on layers.Set, now time.Time, rec *idempotency.Record,
	change func(*Hold) (Move, error)) (Hold, Booking, error) {
	var h Hold
	var b Booking
	found := false
	first := func(b *pgx.Batch) {
		rec.QueueClaim(b)
		b.Queue(sqlReadHold, holdID, userID).QueryRow(func(row pgx.Row) error {
			var err error
			h, err = scanHold(row)
			if errors.Is(err, pgx.ErrNoRows) {
				return nil
			}
			found = err == nil
			return err
		})
	}
	moved := int64(-1)
	err := postgres.InTxBatched(ctx, s.db, first, func(tx pgx.Tx) (*pgx.Batch, error) {
		if !found {
			return nil, ErrNotFound
		}
		read := h.Version
		move, err := change(&h)
		if errors.Is(err, ErrAlreadyConfirmed) {
			b, err = scanBooking(tx.QueryRow(ctx, sqlGetBookingForHold, holdID))
			if err != nil {
				return nil, fmt.Errorf("booking of hold %s: %w", holdID, err)
			}
			_, err = rec.Complete(ctx, tx, bookedAnswer(b))
			return nil, err
		}
		if err != nil || move.To == "" {
			return nil, err
		}
		h.Version = read + 1
		last := &pgx.Batch{}
		if move.To != Confirmed {
			sqlRelease, args := sqlReleaseHold, []any{h.ID, now, read}
			if !on.On(layers.Version) {
				sqlRelease, args = sqlReleaseHoldUnversioned, []any{h.ID, now}
			}
			last.Queue(sqlRelease, args...).QueryRow(func(row pgx.Row) error { return row.Scan(&moved) })
			return last, nil
		}
		b = Booking{ID: move.BookingID, HoldID: h.ID, EventID: h.EventID, UserID: h.UserID, Seats: h.Seats, CreatedAt: now}
		sqlConfirm, args := sqlConfirmHold, []any{h.ID, b.ID, now, h.EventID, h.Seats, read}
		if !on.On(layers.Version) {
			sqlConfirm, args = sqlConfirmHoldUnversioned, []any{h.ID, b.ID, now, h.EventID, h.Seats}
		}
		last.Queue(sqlConfirm, args...)
		// booking.confirmed commits with the booking, or neither does.
		e, err := outbox.New(outbox.BookingConfirmed, b.ID, now, BookingEvent{
			BookingID: b.ID, HoldID: b.HoldID, EventID: b.EventID, UserID: b.UserID, Seats: b.Seats,
		})
		if err != nil {
			return nil, err
		}
		if err := outbox.Queue(ctx, last, e); err != nil {
			return nil, err
		}
		if err := rec.QueueComplete(last, bookedAnswer(b)); err != nil {
			return nil, err
		}
		return last, nil
	})
	switch violated := postgres.ConstraintViolated(err); {
	case err == nil && moved == 0:
		// Someone else released, confirmed or expired the hold since it
		// was read; the release wrote nothing.
		return Hold{}, Booking{}, ErrVersionConflict
	case notNull(err, "tickets", "booking_id"):
		// Someone else moved the hold since it was read: no booking.
		return Hold{}, Booking{}, ErrVersionConflict
	case notNull(err, "tickets", "seat"):
		// A seat is no longer this hold's: it expired and was held
		// again in between. The re-read finds the hold expired.
		return Hold{}, Booking{}, ErrVersionConflict
	case violated == ConstraintOneBooking:
		return Hold{}, Booking{}, ErrVersionConflict
	case violated == ConstraintOneTicket:
		return Hold{}, Booking{}, ErrSeatTaken
	case err != nil:
		return Hold{}, Booking{}, txError(err)
	}
	return h, b, nil
}

// notNull reports whether err is PostgreSQL's refusal of a NULL in
// table's column: a write that reached fewer rows than the statement
// that follows it needs.
func notNull(err error, table, column string) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23502" && pgErr.TableName == table && pgErr.ColumnName == column
}
