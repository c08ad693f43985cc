package seats

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shop-example/shop/internal/platform/keyset"
	"github.com/shop-example/shop/internal/platform/layers"
	"github.com/shop-example/shop/internal/platform/postgres"
	"github.com/shop-example/shop/internal/platform/problem"
)

// Constraints that back this package's rules (migrations/000007_seats.up.sql,
// 000008_hold_request_keys.up.sql).
const (
	constraintOneActiveHold = "hold_seats_one_active_per_seat" // one active hold per seat
	constraintOneTicket     = "tickets_one_per_seat"           // a seat is booked once, ever
	constraintOneBooking    = "bookings_one_per_hold"          // one booking per hold
	constraintHoldRequest   = "holds_user_request_key"         // one hold per (user, request key)
)

// advisoryLockTimeout bounds the wait for the advisory locks (SHOP_SEAT_LOCK=advisory),
// as the redsync wait budget bounds the other strategy's.
const advisoryLockTimeout = "2s"

const (
	sqlInsertEvent = `WITH e AS (
			INSERT INTO events (id, name, rows, seats_per_row, created_at)
			VALUES ($1, $2, $3, $4, $5) RETURNING id)
		INSERT INTO seats (event_id, seat, position, status, version)
		SELECT e.id, chr(65 + r) || n, r * 50 + n, 'available', 1
		FROM e, generate_series(0, $3 - 1) AS r, generate_series(1, $4) AS n`

	// The counts come from one statement, one snapshot: they always add
	// up to the seat count.
	sqlGetEvent = `SELECT e.id, e.name, e.rows, e.seats_per_row, e.created_at,
			count(*) FILTER (WHERE s.status = 'available')::int,
			count(*) FILTER (WHERE s.status = 'held')::int,
			count(*) FILTER (WHERE s.status = 'booked')::int
		FROM events e JOIN seats s ON s.event_id = e.id
		WHERE e.id = $1 GROUP BY e.id`

	// An event's seat map dimensions alone: what a hold validates its
	// seats against, without counting the seats.
	sqlEventShape = `SELECT id, name, rows, seats_per_row, created_at FROM events WHERE id = $1`

	sqlSeatMap = `SELECT seat, status, coalesce(hold_id::text, ''), version FROM seats WHERE event_id = $1 ORDER BY position`

	// The locks of SHOP_SEAT_LOCK=advisory: one per seat, inside the
	// transaction, in the order of the (sorted) array; released at commit.
	sqlAdvisoryLockTimeout = `SET LOCAL lock_timeout = '` + advisoryLockTimeout + `'`
	sqlAdvisoryLocks       = `SELECT count(pg_advisory_xact_lock(hashtextextended($1 || ':' || s, 0)))
		FROM unnest($2::text[]) AS s`

	// The caps' lock: one per (user, event), inside the hold's
	// transaction, released at commit. Two holds by one user on one event
	// take it in turn, so the second reads what the first committed.
	sqlCapLock = `SELECT pg_advisory_xact_lock(hashtextextended('hold-cap:' || $1 || ':' || $2, 0))`

	// What the user holds of the event: active holds whose time is not up
	// (a hold past expires_at is over, whether or not the expiry job has
	// reached it; holds_active_of_user_event_idx finds them).
	sqlReadHolding = `SELECT count(*)::int, coalesce(sum(cardinality(seats)), 0)::int FROM holds
		WHERE user_id = $1 AND event_id = $2 AND status = 'active' AND expires_at > $3`

	sqlReadSeats = `SELECT seat, status, coalesce(hold_id::text, ''), version
		FROM seats WHERE event_id = $1 AND seat = ANY($2) ORDER BY position`

	// The hold's row is the transaction's first write: it claims the
	// request key (holds_user_request_key). Nothing is inserted when the
	// key already has a hold: a try of this request that committed
	// before, whose answer was lost.
	sqlInsertHold = `INSERT INTO holds (id, event_id, user_id, request_key, seats, status, expires_at, version, created_at, updated_at)
		VALUES ($1, $2, $3, $4, $5, 'active', $6, 1, $7, $7)
		ON CONFLICT ON CONSTRAINT ` + constraintHoldRequest + ` DO NOTHING`

	// Layers 2 and 3: each seat is written only if it is available
	// (layer 2, asked again in the write) at the version read (layer 3).
	// A seat that moved since is not written (a stale holder's write
	// lands on zero rows), and the hold rolls back.
	sqlHoldSeats = sqlHoldSeatsAny + ` AND s.status = 'available' AND s.version = r.version`
	// The same with a layer taken off, as a naive implementation writes
	// it; only the layer tests use them (holdSeatsSQL).
	sqlHoldSeatsStateless   = sqlHoldSeatsAny + ` AND s.version = r.version`
	sqlHoldSeatsUnversioned = sqlHoldSeatsAny + ` AND s.status = 'available'`
	sqlHoldSeatsAny         = `UPDATE seats s SET status = 'held', hold_id = $3, version = s.version + 1
		FROM unnest($2::text[], $4::bigint[]) AS r (seat, version)
		WHERE s.event_id = $1 AND s.seat = r.seat`

	// Layer 4 behind it: hold_seats_one_active_per_seat.
	sqlInsertHoldSeats = `INSERT INTO hold_seats (hold_id, event_id, seat, active)
		SELECT $1, $2, s, true FROM unnest($3::text[]) AS s`

	holdSelect           = `SELECT id, event_id, user_id, coalesce(request_key, ''), seats, status, expires_at, version, created_at FROM holds `
	sqlReadHold          = holdSelect + `WHERE id = $1 AND user_id = $2`
	sqlReadHoldOfRequest = holdSelect + `WHERE user_id = $1 AND request_key = $2`
	sqlListActiveForUser = holdSelect + `WHERE user_id = $1 AND status = 'active' AND expires_at > $2
		AND (created_at, id) < ($3, $4) ORDER BY created_at DESC, id DESC LIMIT $5`

	// Layer 3 on the hold: its move is written only at the version read,
	// so of a confirm, a release and the expiry job, one moves it.
	sqlMoveHold = `UPDATE holds SET status = $3, version = version + 1, updated_at = $4
		WHERE id = $1 AND version = $2`
	sqlMoveHoldUnversioned = `UPDATE holds SET status = $2, version = version + 1, updated_at = $3
		WHERE id = $1`

	// A confirmed hold's seats are booked: those this hold holds (its
	// fence on the seats), all of them or the confirm rolls back.
	sqlBookSeats = `UPDATE seats SET status = 'booked', version = version + 1
		WHERE event_id = $1 AND seat = ANY($2) AND hold_id = $3 AND status = 'held'`
	sqlBookSeatsUnversioned = `UPDATE seats SET status = 'booked', hold_id = $3, version = version + 1
		WHERE event_id = $1 AND seat = ANY($2)`

	// A released or expired hold's seats go back: those still held by it.
	sqlFreeSeats = `UPDATE seats SET status = 'available', hold_id = NULL, version = version + 1
		WHERE hold_id = $1 AND status = 'held'`

	sqlEndHoldSeats = `UPDATE hold_seats SET active = false WHERE hold_id = $1 AND active`

	sqlInsertBooking = `INSERT INTO bookings (id, hold_id, event_id, user_id, seats, created_at)
		VALUES ($1, $2, $3, $4, $5, $6)`
	sqlInsertTickets = `INSERT INTO tickets (booking_id, event_id, seat) SELECT $1, $2, s FROM unnest($3::text[]) AS s`

	bookingSelect        = `SELECT id, hold_id, event_id, user_id, seats, created_at FROM bookings `
	sqlGetBooking        = bookingSelect + `WHERE id = $1 AND user_id = $2`
	sqlGetBookingForHold = bookingSelect + `WHERE hold_id = $1`

	// The expiry job's batch: due holds that no other transaction (a
	// confirm, a release, another replica's job) has locked, each moved
	// to expired with a version bump, and their seats freed, in one
	// statement.
	sqlExpireDue = `WITH due AS (
			SELECT id FROM holds WHERE status = 'active' AND expires_at <= $1
			ORDER BY expires_at LIMIT $2 FOR UPDATE SKIP LOCKED),
		h AS (
			UPDATE holds SET status = 'expired', version = holds.version + 1, updated_at = $1
			FROM due WHERE holds.id = due.id AND holds.status = 'active' RETURNING holds.id),
		s AS (
			UPDATE seats SET status = 'available', hold_id = NULL, version = seats.version + 1
			FROM h WHERE seats.hold_id = h.id AND seats.status = 'held' RETURNING 1),
		hs AS (
			UPDATE hold_seats SET active = false FROM h WHERE hold_seats.hold_id = h.id AND active RETURNING 1)
		SELECT (SELECT count(*) FROM h)::int, (SELECT count(*) FROM s)::int, (SELECT count(*) FROM hs)::int`
)

// Store keeps events, seats, holds and bookings in PostgreSQL.
type Store struct {
	db *pgxpool.Pool
}

// NewStore returns a store over db.
func NewStore(db *pgxpool.Pool) *Store { return &Store{db: db} }

// CreateEvent inserts ev and its seat map, every seat available.
func (s *Store) CreateEvent(ctx context.Context, ev Event) error {
	if _, err := s.db.Exec(ctx, sqlInsertEvent, ev.ID, ev.Name, ev.Rows, ev.SeatsPerRow, ev.CreatedAt); err != nil {
		return fmt.Errorf("create event: %w", err)
	}
	return nil
}

// Event returns an event with its counts.
func (s *Store) Event(ctx context.Context, id string) (Event, error) {
	var ev Event
	var rows, perRow int16
	err := s.db.QueryRow(ctx, sqlGetEvent, id).Scan(&ev.ID, &ev.Name, &rows, &perRow, &ev.CreatedAt,
		&ev.Available, &ev.Held, &ev.Booked)
	if errors.Is(err, pgx.ErrNoRows) {
		return Event{}, ErrNotFound
	}
	if err != nil {
		return Event{}, fmt.Errorf("get event %s: %w", id, err)
	}
	ev.Rows, ev.SeatsPerRow = int(rows), int(perRow)
	return ev, nil
}

// EventShape returns an event without its counts: its name and seat map
// dimensions.
func (s *Store) EventShape(ctx context.Context, id string) (Event, error) {
	var ev Event
	var rows, perRow int16
	err := s.db.QueryRow(ctx, sqlEventShape, id).Scan(&ev.ID, &ev.Name, &rows, &perRow, &ev.CreatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return Event{}, ErrNotFound
	}
	if err != nil {
		return Event{}, fmt.Errorf("get event %s: %w", id, err)
	}
	ev.Rows, ev.SeatsPerRow = int(rows), int(perRow)
	return ev, nil
}

// SeatMap returns every seat of an event, in seat order.
func (s *Store) SeatMap(ctx context.Context, eventID string) ([]Seat, error) {
	rows, err := s.db.Query(ctx, sqlSeatMap, eventID)
	if err != nil {
		return nil, fmt.Errorf("seat map of %s: %w", eventID, err)
	}
	out, err := pgx.CollectRows(rows, scanSeat)
	if err != nil {
		return nil, fmt.Errorf("seat map of %s: %w", eventID, err)
	}
	return out, nil
}

// HoldOptions say how Store.Hold guards its write.
type HoldOptions struct {
	// Layers are the defences on; a layer test takes some off.
	Layers layers.Set
	// Advisory takes pg_advisory_xact_lock on each seat, in order, before
	// reading them (SHOP_SEAT_LOCK=advisory).
	Advisory bool
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
// With layer 1 on, the user's holds on the event are serialised first
// (sqlCapLock), so two of them cannot both read a count under the caps
// and both write. A count of rows cannot be a constraint, and locking the
// rows counted does not stop a new row from joining them; an advisory
// lock needs no table, is taken only by this user's holds on this event,
// and is gone at commit or rollback. Releases and expiry take no such
// lock: they only lower the count, and a hold that does not see one yet
// errs towards refusing.
func (s *Store) Hold(ctx context.Context, h Hold, now time.Time, opts HoldOptions, rule func(mine Holding, read []Seat) error) (Hold, error) {
	out := h
	err := postgres.InTx(ctx, s.db, func(tx pgx.Tx) error {
		// The caps' lock comes before the seats': every hold takes the
		// locks in that one order, so they cannot deadlock.
		if opts.Layers.On(layers.Lock) {
			if _, err := tx.Exec(ctx, sqlCapLock, h.UserID, h.EventID); err != nil {
				return fmt.Errorf("cap lock: %w", err)
			}
		}
		// Read before this hold's own row is written, so it does not
		// count itself.
		var mine Holding
		if err := tx.QueryRow(ctx, sqlReadHolding, h.UserID, h.EventID, now).Scan(&mine.Holds, &mine.Seats); err != nil {
			return fmt.Errorf("read holding: %w", err)
		}
		if opts.Advisory {
			if err := advisoryLocks(ctx, tx, h.EventID, h.Seats); err != nil {
				return err
			}
		}
		tag, err := tx.Exec(ctx, sqlInsertHold, h.ID, h.EventID, h.UserID, h.RequestKey, h.Seats, h.ExpiresAt, now)
		if err != nil {
			return fmt.Errorf("insert hold: %w", err)
		}
		if tag.RowsAffected() == 0 {
			out, err = scanHold(tx.QueryRow(ctx, sqlReadHoldOfRequest, h.UserID, h.RequestKey))
			if err != nil {
				return fmt.Errorf("read hold of request: %w", err)
			}
			if out.EventID != h.EventID || !slices.Equal(out.Seats, h.Seats) {
				return problem.New(problem.IdempotencyReused,
					"this Idempotency-Key was used for a hold of other seats; send a new key for a new request")
			}
			return nil
		}
		rows, err := tx.Query(ctx, sqlReadSeats, h.EventID, h.Seats)
		if err != nil {
			return fmt.Errorf("read seats: %w", err)
		}
		read, err := pgx.CollectRows(rows, scanSeat)
		if err != nil {
			return fmt.Errorf("read seats: %w", err)
		}
		if len(read) != len(h.Seats) {
			return fmt.Errorf("hold on %s: %d of %d seats exist", h.EventID, len(read), len(h.Seats))
		}
		if err := rule(mine, read); err != nil {
			return err
		}
		versions := make([]int64, len(read))
		for i, seat := range read {
			versions[i] = seat.Version
		}
		tag, err = tx.Exec(ctx, holdSeatsSQL(opts.Layers), h.EventID, h.Seats, h.ID, versions)
		if err != nil {
			return fmt.Errorf("hold seats: %w", err)
		}
		if tag.RowsAffected() != int64(len(h.Seats)) {
			return ErrVersionConflict
		}
		_, err = tx.Exec(ctx, sqlInsertHoldSeats, h.ID, h.EventID, h.Seats)
		if postgres.ConstraintViolated(err) == constraintOneActiveHold {
			return ErrSeatTaken
		}
		if err != nil {
			return fmt.Errorf("insert hold seats: %w", err)
		}
		return nil
	})
	if err != nil {
		return Hold{}, deadlock(err)
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

// deadlock turns PostgreSQL's deadlock refusal into ErrDeadlock.
func deadlock(err error) error {
	if postgres.SQLState(err) == "40P01" {
		return ErrDeadlock
	}
	return err
}

// advisoryLocks waits, within advisoryLockTimeout, for the advisory lock
// of each seat, in the order given (sorted, so overlapping holds cannot
// deadlock). PostgreSQL releases them at commit or rollback.
func advisoryLocks(ctx context.Context, tx pgx.Tx, eventID string, seats []string) error {
	if _, err := tx.Exec(ctx, sqlAdvisoryLockTimeout); err != nil {
		return fmt.Errorf("advisory lock timeout: %w", err)
	}
	_, err := tx.Exec(ctx, sqlAdvisoryLocks, eventID, seats)
	if postgres.SQLState(err) == "55P03" { // lock_not_available: the wait budget ran out
		return &problem.Error{Code: problem.ResourceBusy, Detail: "a seat is being held by another request; retry shortly", RetryAfter: time.Second}
	}
	if err != nil {
		return fmt.Errorf("advisory locks: %w", err)
	}
	return nil
}

// Move is how Store.Update ends a hold: confirmed (with a booking) or
// released.
type Move struct {
	// To is the hold's new status: Confirmed or Released.
	To HoldStatus
	// BookingID is the new booking's id when To is Confirmed.
	BookingID string
}

// Update reads userID's hold, lets change apply the rule (layer 2), and
// writes the move in one transaction: the hold at the version read
// (layer 3), its seats (booked, or back to available), its hold_seats no
// longer active, and for a confirm the booking and one ticket per seat
// under tickets_one_per_seat (layer 4). change returning
// ErrAlreadyConfirmed makes Update return the hold's booking. The hold is
// read first, before anything else: a confirm that lost to the expiry job
// finds its own row expired.
func (s *Store) Update(ctx context.Context, holdID, userID string, now time.Time, on layers.Set,
	change func(*Hold) (Move, error)) (Hold, Booking, error) {
	var h Hold
	var b Booking
	err := postgres.InTx(ctx, s.db, func(tx pgx.Tx) error {
		var err error
		h, err = scanHold(tx.QueryRow(ctx, sqlReadHold, holdID, userID))
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return fmt.Errorf("read hold %s: %w", holdID, err)
		}
		read := h.Version
		move, err := change(&h)
		if errors.Is(err, ErrAlreadyConfirmed) {
			b, err = scanBooking(tx.QueryRow(ctx, sqlGetBookingForHold, holdID))
			if err != nil {
				return fmt.Errorf("booking of hold %s: %w", holdID, err)
			}
			return nil
		}
		if err != nil || move.To == "" {
			return err
		}
		sqlMove := sqlMoveHold
		args := []any{h.ID, read, string(move.To), now}
		if !on.On(layers.Version) {
			sqlMove, args = sqlMoveHoldUnversioned, []any{h.ID, string(move.To), now}
		}
		tag, err := tx.Exec(ctx, sqlMove, args...)
		if err != nil {
			return fmt.Errorf("move hold %s: %w", holdID, err)
		}
		if tag.RowsAffected() != 1 {
			return ErrVersionConflict
		}
		h.Version = read + 1
		if _, err := tx.Exec(ctx, sqlEndHoldSeats, h.ID); err != nil {
			return fmt.Errorf("end hold seats: %w", err)
		}
		if move.To != Confirmed {
			if _, err := tx.Exec(ctx, sqlFreeSeats, h.ID); err != nil {
				return fmt.Errorf("free seats: %w", err)
			}
			return nil
		}
		sqlBook := sqlBookSeats
		if !on.On(layers.Version) {
			sqlBook = sqlBookSeatsUnversioned
		}
		tag, err = tx.Exec(ctx, sqlBook, h.EventID, h.Seats, h.ID)
		if err != nil {
			return fmt.Errorf("book seats: %w", err)
		}
		if tag.RowsAffected() != int64(len(h.Seats)) {
			// A seat is no longer this hold's: it expired and was held
			// again in between. The re-read finds the hold expired.
			return ErrVersionConflict
		}
		b = Booking{ID: move.BookingID, HoldID: h.ID, EventID: h.EventID, UserID: h.UserID, Seats: h.Seats, CreatedAt: now}
		if _, err := tx.Exec(ctx, sqlInsertBooking, b.ID, b.HoldID, b.EventID, b.UserID, b.Seats, b.CreatedAt); err != nil {
			if postgres.ConstraintViolated(err) == constraintOneBooking {
				return ErrVersionConflict
			}
			return fmt.Errorf("insert booking: %w", err)
		}
		_, err = tx.Exec(ctx, sqlInsertTickets, b.ID, b.EventID, b.Seats)
		if postgres.ConstraintViolated(err) == constraintOneTicket {
			return ErrSeatTaken
		}
		if err != nil {
			return fmt.Errorf("insert tickets: %w", err)
		}
		return nil
	})
	return h, b, deadlock(err)
}

// Booking returns userID's booking.
func (s *Store) Booking(ctx context.Context, id, userID string) (Booking, error) {
	b, err := scanBooking(s.db.QueryRow(ctx, sqlGetBooking, id, userID))
	if errors.Is(err, pgx.ErrNoRows) {
		return Booking{}, ErrNotFound
	}
	if err != nil {
		return Booking{}, fmt.Errorf("get booking %s: %w", id, err)
	}
	return b, nil
}

// ExpireDue expires up to limit active holds whose time is up at now, and
// frees their seats, in one statement. Every replica runs it: FOR UPDATE
// SKIP LOCKED splits the due holds between concurrent runs and skips a
// hold a confirm or release is moving; the status check and the version
// bump make the loser of that race find the hold moved.
func (s *Store) ExpireDue(ctx context.Context, now time.Time, limit int) (int, error) {
	var holds, seats, rows int
	if err := s.db.QueryRow(ctx, sqlExpireDue, now, limit).Scan(&holds, &seats, &rows); err != nil {
		return 0, fmt.Errorf("expire holds: %w", err)
	}
	return holds, nil
}

func scanSeat(row pgx.CollectableRow) (Seat, error) {
	var s Seat
	var status string
	err := row.Scan(&s.Label, &status, &s.HoldID, &s.Version)
	s.Status = SeatStatus(status)
	return s, err
}

func scanHold(row pgx.Row) (Hold, error) {
	var h Hold
	var status string
	err := row.Scan(&h.ID, &h.EventID, &h.UserID, &h.RequestKey, &h.Seats, &status, &h.ExpiresAt, &h.Version, &h.CreatedAt)
	h.Status = HoldStatus(status)
	return h, err
}

func scanBooking(row pgx.Row) (Booking, error) {
	var b Booking
	err := row.Scan(&b.ID, &b.HoldID, &b.EventID, &b.UserID, &b.Seats, &b.CreatedAt)
	return b, err
}

// HoldOf returns userID's hold.
func (s *Store) HoldOf(ctx context.Context, id, userID string) (Hold, error) {
	h, err := scanHold(s.db.QueryRow(ctx, sqlReadHold, id, userID))
	if errors.Is(err, pgx.ErrNoRows) {
		return Hold{}, ErrNotFound
	}
	if err != nil {
		return Hold{}, fmt.Errorf("get hold %s: %w", id, err)
	}
	return h, nil
}

// ActiveHolds returns up to limit of userID's holds that are active at
// now, newest first, after the cursor, and the cursor of the next page
// ("" on the last page).
func (s *Store) ActiveHolds(ctx context.Context, userID string, now time.Time, cursor string, limit int) ([]Hold, string, error) {
	beforeAt, beforeID, err := keyset.Decode(cursor)
	if err != nil {
		return nil, "", err
	}
	rows, err := s.db.Query(ctx, sqlListActiveForUser, userID, now, beforeAt, beforeID, limit+1)
	if err != nil {
		return nil, "", fmt.Errorf("list holds: %w", err)
	}
	items, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Hold, error) { return scanHold(r) })
	if err != nil {
		return nil, "", fmt.Errorf("list holds: %w", err)
	}
	page, next := keyset.Page(items, limit, func(x Hold) (time.Time, string) { return x.CreatedAt, x.ID })
	return page, next, nil
}
