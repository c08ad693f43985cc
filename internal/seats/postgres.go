package seats

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shop-example/shop/internal/platform/keyset"
	"github.com/shop-example/shop/internal/platform/postgres"
)

// The constraints that back the seat flows' rules (migrations/000007_seats.up.sql,
// 000008_hold_request_keys.up.sql).
const (
	ConstraintOneActiveHold = "hold_seats_one_active_per_seat" // one active hold per seat
	ConstraintOneTicket     = "tickets_one_per_seat"           // a seat is booked once, ever
	ConstraintOneBooking    = "bookings_one_per_hold"          // one booking per hold
	ConstraintHoldRequest   = "holds_user_request_key"         // one hold per (user, request key): layer 0's
)

// Constraints is the catalogue of layer 4 of the seat flows, as the race
// lab and the ablation tests take it off. The request key's belongs to
// layer 0.
var Constraints = []postgres.Constraint{
	{Table: "hold_seats", Name: ConstraintOneActiveHold, Index: true},
	{Table: "tickets", Name: ConstraintOneTicket},
	{Table: "bookings", Name: ConstraintOneBooking},
}

// lockTimeout bounds how long a hold's transaction waits for a lock in
// PostgreSQL (the caps' lock, and the seats' with SHOP_SEAT_LOCK=advisory),
// as the redsync wait budget bounds the wait for a Redis lock.
const lockTimeout = "2s"

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

	// What a hold reads before any lock or transaction (Store.Glance):
	// the event's seat map dimensions, which of the seats asked for are
	// taken now, and whether the user has a hold under the request key.
	sqlGlance = `SELECT e.id, e.name, e.rows, e.seats_per_row, e.created_at,
			coalesce((SELECT array_agg(s.seat ORDER BY s.position) FROM seats s
				WHERE s.event_id = e.id AND s.seat = ANY($2) AND s.status <> 'available'), '{}'),
			EXISTS (SELECT 1 FROM holds h WHERE h.user_id = $3 AND h.request_key = $4)
		FROM events e WHERE e.id = $1`

	sqlSeatMap = `SELECT seat, status, coalesce(hold_id::text, ''), version FROM seats WHERE event_id = $1 ORDER BY position`

	// The bound on every lock wait of a hold's transaction: the caps'
	// lock, the seats' (SHOP_SEAT_LOCK=advisory) and their rows'.
	sqlLockTimeout = `SET LOCAL lock_timeout = '` + lockTimeout + `'`

	// The locks of SHOP_SEAT_LOCK=advisory: one per seat, inside the
	// transaction, in the order of the (sorted) array; released at commit.
	sqlAdvisoryLocks = `SELECT count(pg_advisory_xact_lock(hashtextextended($1 || ':' || s, 0)))
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
		ON CONFLICT ON CONSTRAINT ` + ConstraintHoldRequest + ` DO NOTHING`

	// Layers 2 and 3: each seat is written only if it is available
	// (layer 2, asked again in the write) at the version read (layer 3),
	// and layer 4 behind it: each seat the write reached gets its
	// hold_seats row, which hold_seats_one_active_per_seat admits once
	// per seat while active. A seat the write did not reach (it moved
	// since it was read) gives its row a NULL seat, which hold_seats
	// refuses (NOT NULL): the write and its check are one statement, so
	// COMMIT can travel with it, and a hold that lost a seat rolls back.
	sqlHoldSeats = holdSeatsWrite + ` AND s.status = 'available' AND s.version = r.version` + holdSeatsRows
	// The same with a layer taken off, as a naive implementation writes
	// it; only the layer tests use them (holdSeatsSQL).
	sqlHoldSeatsStateless   = holdSeatsWrite + ` AND s.version = r.version` + holdSeatsRows
	sqlHoldSeatsUnversioned = holdSeatsWrite + ` AND s.status = 'available'` + holdSeatsRows
	sqlHoldSeatsAny         = holdSeatsWrite + holdSeatsRows
	holdSeatsWrite          = `WITH written AS (
			UPDATE seats s SET status = 'held', hold_id = $3, version = s.version + 1
			FROM unnest($2::text[], $4::bigint[]) AS r (seat, version)
			WHERE s.event_id = $1 AND s.seat = r.seat`
	holdSeatsRows = `
			RETURNING s.seat)
		INSERT INTO hold_seats (hold_id, event_id, seat, active)
		SELECT $3, $1, written.seat, true
		FROM unnest($2::text[]) AS asked (seat) LEFT JOIN written ON written.seat = asked.seat`

	holdSelect           = `SELECT id, event_id, user_id, coalesce(request_key, ''), seats, status, expires_at, version, created_at FROM holds `
	sqlReadHold          = holdSelect + `WHERE id = $1 AND user_id = $2`
	sqlReadHoldOfRequest = holdSelect + `WHERE user_id = $1 AND request_key = $2`
	sqlListActiveForUser = holdSelect + `WHERE user_id = $1 AND status = 'active' AND expires_at > $2
		AND (created_at, id) < ($3, $4) ORDER BY created_at DESC, id DESC LIMIT $5`

	// A confirm's writes, in one statement: the hold moved at the version
	// read (layer 3; of a confirm, a release and the expiry job, one
	// moves it), its hold_seats no longer active, its seats booked (those
	// this hold holds: its fence on the seats), the booking (layer 4:
	// bookings_one_per_hold) and a ticket per seat (tickets_one_per_seat).
	// A ticket's booking and seat come from what the writes before it
	// reached: a hold that someone else moved leaves no booking, a seat
	// that is no longer this hold's is not booked, and either gives a
	// ticket a NULL, which tickets refuses (NOT NULL). So the confirm is
	// all of it or none, and COMMIT can travel with it.
	sqlConfirmHold = confirmMove + ` AND version = $6` + confirmBook + ` AND seats.hold_id = moved.id AND seats.status = 'held'` + confirmRest
	// The same without layer 3: the hold moved and its seats booked
	// whatever they are now (the layer tests).
	sqlConfirmHoldUnversioned = confirmMove + confirmBook + confirmRest
	confirmMove               = `WITH moved AS (
			UPDATE holds SET status = 'confirmed', version = version + 1, updated_at = $3
			WHERE id = $1`
	confirmBook = `
			RETURNING id, event_id, user_id, seats),
		ended AS (
			UPDATE hold_seats SET active = false FROM moved
			WHERE hold_seats.hold_id = moved.id AND hold_seats.active),
		booked AS (
			UPDATE seats SET status = 'booked', hold_id = moved.id, version = seats.version + 1 FROM moved
			WHERE seats.event_id = moved.event_id AND seats.seat = ANY(moved.seats)`
	confirmRest = `
			RETURNING seats.seat),
		booking AS (
			INSERT INTO bookings (id, hold_id, event_id, user_id, seats, created_at)
			SELECT $2, id, event_id, user_id, seats, $3 FROM moved RETURNING id)
		INSERT INTO tickets (booking_id, event_id, seat)
		SELECT booking.id, $4, booked.seat
		FROM unnest($5::text[]) AS asked (seat) LEFT JOIN booking ON true LEFT JOIN booked ON booked.seat = asked.seat`

	// A release's writes, in one statement: the hold moved at the version
	// read (layer 3), its hold_seats no longer active, and its seats back
	// to available (those still held by it). It answers how many holds it
	// moved: none when someone else moved the hold first, and then
	// nothing else was written either.
	sqlReleaseHold = releaseMove + ` AND version = $3` + releaseRest
	// The same without layer 3 (the layer tests).
	sqlReleaseHoldUnversioned = releaseMove + releaseRest
	releaseMove               = `WITH moved AS (
			UPDATE holds SET status = 'released', version = version + 1, updated_at = $2
			WHERE id = $1`
	releaseRest = `
			RETURNING id),
		ended AS (
			UPDATE hold_seats SET active = false FROM moved
			WHERE hold_seats.hold_id = moved.id AND hold_seats.active),
		freed AS (
			UPDATE seats SET status = 'available', hold_id = NULL, version = seats.version + 1 FROM moved
			WHERE seats.hold_id = moved.id AND seats.status = 'held')
		SELECT count(*)::int FROM moved`

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
