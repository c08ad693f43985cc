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
// 000008_hold_request_keys.up.sql, 000013_holdings.up.sql).
const (
	ConstraintOneActiveHold = "hold_seats_one_active_per_seat" // one active hold per seat
	ConstraintOneTicket     = "tickets_one_per_seat"           // a seat is booked once, ever
	ConstraintOneBooking    = "bookings_one_per_hold"          // one booking per hold
	ConstraintWithinCaps    = "holdings_within_caps"           // a user's holds on an event within the caps
	ConstraintHoldRequest   = "holds_user_request_key"         // one hold per (user, request key): layer 0's
)

// Constraints is the catalogue of layer 4 of the seat flows, as the race
// lab and the ablation tests take it off. The request key's belongs to
// layer 0.
var Constraints = []postgres.Constraint{
	{Table: "hold_seats", Name: ConstraintOneActiveHold, Index: true},
	{Table: "tickets", Name: ConstraintOneTicket},
	{Table: "bookings", Name: ConstraintOneBooking},
	{Table: "holdings", Name: ConstraintWithinCaps},
}

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

	sqlSeatMap = `SELECT seat, status, coalesce(hold_id::text, ''), version FROM seats WHERE event_id = $1 ORDER BY position`

	holdSelect           = `SELECT id, event_id, user_id, coalesce(request_key, ''), seats, status, expires_at, version, created_at FROM holds `
	sqlReadHold          = holdSelect + `WHERE id = $1 AND user_id = $2`
	sqlListActiveForUser = holdSelect + `WHERE user_id = $1 AND status = 'active' AND expires_at > $2
		AND (created_at, id) < ($3, $4) ORDER BY created_at DESC, id DESC LIMIT $5`

	bookingSelect = `SELECT id, hold_id, event_id, user_id, seats, created_at FROM bookings `
	sqlGetBooking = bookingSelect + `WHERE id = $1 AND user_id = $2`
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
