package seats

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/shop-example/shop/internal/platform/outbox"
	"github.com/shop-example/shop/internal/platform/postgres"
	"github.com/shop-example/shop/internal/platform/problem"
)

// The steps of a hold's transactions: its making (Service.Hold), its end
// (Service.Confirm, Service.Release) and its expiry (Service.ExpireDue).
// The use cases own the transactions; each step here queues its
// statements in the use case's pgx.Batch, or runs them on its pgx.Tx,
// and the statements that do not need each other's answers travel
// together, BEGIN with the first of them and COMMIT with the last
// (postgres.InTxBatched). The rules that judge what was read (the caps,
// layer 2) run in Go between the round trips.
//
// COMMIT travels with a hold's and a confirm's writes, so a write that
// reaches fewer rows than it was meant to must fail on the server, in
// its own statement, before COMMIT runs: a result checked in Go would
// come back after the commit. Those statements check themselves with a
// NOT NULL: the rows that follow a conditional write take a value from
// each row the write reached, into a NOT NULL column, and a row it did
// not reach leaves a NULL there. PostgreSQL refuses the statement
// (23502), COMMIT does not run, and WriteError reads that refusal as
// what it stands for (shortfalls): ErrSeatMoved or ErrHoldMoved, layer
// 3's refusal. Nothing else in those statements can write a NULL there.
// A release's statement writes nothing at all when its hold moved, and
// says so in the count it answers.

// lockTimeout bounds how long a hold's transaction waits for a lock in
// PostgreSQL (the caps' lock, and the seats' with SHOP_SEAT_LOCK=advisory),
// as the redsync wait budget bounds the wait for a Redis lock.
const lockTimeout = "2s"

const (
	// What a hold reads before any lock or transaction (Store.Glance):
	// the event's seat map dimensions, which of the seats asked for are
	// taken now, and whether the user has a hold under the request key.
	sqlGlance = `SELECT e.id, e.name, e.rows, e.seats_per_row, e.created_at,
			coalesce((SELECT array_agg(s.seat ORDER BY s.position) FROM seats s
				WHERE s.event_id = e.id AND s.seat = ANY($2) AND s.status <> 'available'), '{}'),
			EXISTS (SELECT 1 FROM holds h WHERE h.user_id = $3 AND h.request_key = $4)
		FROM events e WHERE e.id = $1`

	// Layer 1 in PostgreSQL. The bound on every lock wait of a hold's
	// transaction: the caps' lock, the seats' and their rows'.
	sqlLockTimeout = `SET LOCAL lock_timeout = '` + lockTimeout + `'`
	// The caps' lock: one per (user, event), released at commit. Two
	// holds by one user on one event take it in turn, so the second
	// reads what the first committed.
	sqlCapLock = `SELECT pg_advisory_xact_lock(hashtextextended('hold-cap:' || $1 || ':' || $2, 0))`
	// The locks of SHOP_SEAT_LOCK=advisory: one per seat, in the order of
	// the (sorted) array; released at commit.
	sqlAdvisoryLocks = `SELECT count(pg_advisory_xact_lock(hashtextextended($1 || ':' || s, 0)))
		FROM unnest($2::text[]) AS s`

	// What the user holds of the event: their counted row (holdings).
	sqlReadHolding = `SELECT coalesce(max(holds), 0), coalesce(max(seats), 0) FROM holdings
		WHERE user_id = $1 AND event_id = $2`

	sqlReadSeats = `SELECT seat, status, coalesce(hold_id::text, ''), version
		FROM seats WHERE event_id = $1 AND seat = ANY($2) ORDER BY position`

	// The hold's row is the transaction's first write: it claims the
	// request key (holds_user_request_key). Nothing is inserted when the
	// key already has a hold: a try of this request that committed
	// before, whose answer was lost.
	sqlInsertHold = `INSERT INTO holds (id, event_id, user_id, request_key, seats, status, expires_at, version, created_at, updated_at)
		VALUES ($1, $2, $3, $4, $5, 'active', $6, 1, $7, $7)
		ON CONFLICT ON CONSTRAINT ` + ConstraintHoldRequest + ` DO NOTHING`

	sqlReadHoldOfRequest = holdSelect + `WHERE user_id = $1 AND request_key = $2`

	// Layers 2 and 3: each seat is written only while it is available
	// (layer 2, asked again in the write) at the version read (layer 3),
	// and layer 4 behind it: each seat the write reached gets its
	// hold_seats row, which hold_seats_one_active_per_seat admits once
	// per seat while active. The statement's own check (shortfalls): a
	// seat the write did not reach, because it moved since it was read,
	// leaves its hold_seats row a NULL seat, which NOT NULL refuses, so
	// a hold that lost a seat rolls back before COMMIT runs.
	sqlHoldSeats = `WITH written AS (
			UPDATE seats s SET status = 'held', hold_id = $3, version = s.version + 1
			FROM unnest($2::text[], $4::bigint[]) AS r (seat, version)
			WHERE s.event_id = $1 AND s.seat = r.seat AND s.status = 'available' AND s.version = r.version
			RETURNING s.seat)
		INSERT INTO hold_seats (hold_id, event_id, seat, active)
		SELECT $3, $1, written.seat, true
		FROM unnest($2::text[]) AS asked (seat) LEFT JOIN written ON written.seat = asked.seat`

	// The caps, layer 4: the user's holding on the event, counted up with
	// this hold, under the caps of the replica that writes it.
	// holdings_within_caps refuses a count past them: of two holds by one
	// user that both read a count under a cap, the second waits for the
	// first's row and then counts past it.
	sqlCountHold = `INSERT INTO holdings (user_id, event_id, holds, seats, max_holds, max_seats)
		VALUES ($1, $2, 1, $3, $4, $5)
		ON CONFLICT ON CONSTRAINT holdings_pkey DO UPDATE
		SET holds = holdings.holds + 1, seats = holdings.seats + excluded.seats,
			max_holds = excluded.max_holds, max_seats = excluded.max_seats`

	// A confirm's writes, in one statement: the hold moved at the version
	// read (layer 3; of a confirm, a release and the expiry job, one
	// moves it), its hold_seats no longer active, its seats booked (those
	// this hold holds: its fence on the seats), the user's holding counted
	// down, the booking (layer 4: bookings_one_per_hold) and a ticket per
	// seat (tickets_one_per_seat). The statement's own checks
	// (shortfalls): a ticket's booking and seat come from what the writes
	// before it reached, so a hold someone else moved leaves the tickets
	// no booking, and a seat that is no longer this hold's is not booked
	// and leaves its ticket no seat; either NULL is refused (NOT NULL), so
	// the confirm is all of it or none, and COMMIT can travel with it.
	sqlConfirmHold = `WITH moved AS (
			UPDATE holds SET status = 'confirmed', version = version + 1, updated_at = $3
			WHERE id = $1 AND version = $6
			RETURNING id, event_id, user_id, seats),
		ended AS (
			UPDATE hold_seats SET active = false FROM moved
			WHERE hold_seats.hold_id = moved.id AND hold_seats.active),
		counted AS (
			UPDATE holdings SET holds = holdings.holds - 1, seats = holdings.seats - cardinality(moved.seats) FROM moved
			WHERE holdings.user_id = moved.user_id AND holdings.event_id = moved.event_id),
		booked AS (
			UPDATE seats SET status = 'booked', hold_id = moved.id, version = seats.version + 1 FROM moved
			WHERE seats.event_id = moved.event_id AND seats.seat = ANY(moved.seats)
				AND seats.hold_id = moved.id AND seats.status = 'held'
			RETURNING seats.seat),
		booking AS (
			INSERT INTO bookings (id, hold_id, event_id, user_id, seats, created_at)
			SELECT $2, id, event_id, user_id, seats, $3 FROM moved RETURNING id)
		INSERT INTO tickets (booking_id, event_id, seat)
		SELECT booking.id, $4, booked.seat
		FROM unnest($5::text[]) AS asked (seat) LEFT JOIN booking ON true LEFT JOIN booked ON booked.seat = asked.seat`

	// A release's writes, in one statement: the hold moved at the version
	// read (layer 3), its hold_seats no longer active, the user's holding
	// counted down, and its seats back to available (those still held by
	// it). Every write hangs on the hold's move, so when someone else
	// moved the hold first the statement writes nothing, and it answers
	// how many holds it moved: none.
	sqlReleaseHold = `WITH moved AS (
			UPDATE holds SET status = 'released', version = version + 1, updated_at = $2
			WHERE id = $1 AND version = $3
			RETURNING id, event_id, user_id, seats),
		ended AS (
			UPDATE hold_seats SET active = false FROM moved
			WHERE hold_seats.hold_id = moved.id AND hold_seats.active),
		counted AS (
			UPDATE holdings SET holds = holdings.holds - 1, seats = holdings.seats - cardinality(moved.seats) FROM moved
			WHERE holdings.user_id = moved.user_id AND holdings.event_id = moved.event_id),
		freed AS (
			UPDATE seats SET status = 'available', hold_id = NULL, version = seats.version + 1 FROM moved
			WHERE seats.hold_id = moved.id AND seats.status = 'held')
		SELECT count(*)::int FROM moved`

	sqlGetBookingForHold = bookingSelect + `WHERE hold_id = $1`

	// The expiry of the due holds (due, a CTE the statement names), in
	// one statement: each moved to expired with a version bump, its seats
	// freed, its hold_seats no longer active, and its user's holding on
	// its event counted down. It answers how many it expired.
	expireDue = `
		h AS (
			UPDATE holds SET status = 'expired', version = holds.version + 1, updated_at = $1
			FROM due WHERE holds.id = due.id AND holds.status = 'active'
			RETURNING holds.id, holds.user_id, holds.event_id, cardinality(holds.seats) AS seats),
		s AS (
			UPDATE seats SET status = 'available', hold_id = NULL, version = seats.version + 1
			FROM h WHERE seats.hold_id = h.id AND seats.status = 'held'),
		hs AS (
			UPDATE hold_seats SET active = false FROM h WHERE hold_seats.hold_id = h.id AND active),
		counted AS (
			UPDATE holdings SET holds = holdings.holds - x.holds, seats = holdings.seats - x.seats
			FROM (SELECT user_id, event_id, count(*)::int AS holds, sum(seats)::int AS seats
				FROM h GROUP BY user_id, event_id) AS x
			WHERE holdings.user_id = x.user_id AND holdings.event_id = x.event_id)
		SELECT count(*)::int FROM h`
	// The expiry job's batch: due holds that no other transaction (a
	// confirm, a release, another replica's job) has locked.
	sqlExpireDue = `WITH due AS (
			SELECT id FROM holds WHERE status = 'active' AND expires_at <= $1
			ORDER BY expires_at LIMIT $2 FOR UPDATE SKIP LOCKED),` + expireDue
	// One user's holds on one event whose time is up, expired by that
	// user's next hold on it (holds_active_of_user_event_idx finds them).
	sqlExpireLapsed = `WITH due AS (
			SELECT id FROM holds WHERE user_id = $2 AND event_id = $3 AND status = 'active' AND expires_at <= $1
			FOR UPDATE SKIP LOCKED),` + expireDue
)

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

// QueueLocks queues layer 1 of a hold's transaction, before its reads:
// the bound on its lock waits (lockTimeout, past which WriteError answers
// resource_busy), the caps' lock on (user, event), and with
// LockAdvisory a lock per seat, in seat order. The caps' lock comes
// before the seats', so every hold takes its locks in one order and none
// can deadlock another.
func (s *Store) QueueLocks(b *pgx.Batch, h Hold, lock LockStrategy) {
	b.Queue(sqlLockTimeout)
	b.Queue(sqlCapLock, h.UserID, h.EventID)
	if lock == LockAdvisory {
		b.Queue(sqlAdvisoryLocks, h.EventID, h.Seats)
	}
}

// QueueExpireLapsed queues the expiry of userID's holds on eventID whose
// time is up at now, as the expiry job makes it (their seats freed,
// their holding counted down), so that they no longer count against the
// caps when the job has not reached them yet. A hold another transaction
// is moving is skipped, and still counts: the caps err towards refusing.
func (s *Store) QueueExpireLapsed(b *pgx.Batch, userID, eventID string, now time.Time) {
	b.Queue(sqlExpireLapsed, now, userID, eventID)
}

// QueueReadHolding queues the read of what userID holds of eventID, and
// returns where it lands once the batch is sent.
func (s *Store) QueueReadHolding(b *pgx.Batch, userID, eventID string) *Holding {
	mine := &Holding{}
	b.Queue(sqlReadHolding, userID, eventID).QueryRow(func(row pgx.Row) error {
		return row.Scan(&mine.Holds, &mine.Seats)
	})
	return mine
}

// QueueInsertHold queues the insert of h's row under its request key,
// and returns whether it was inserted, once the batch is sent: false
// when the user already has a hold under the key (HoldOfRequest).
func (s *Store) QueueInsertHold(b *pgx.Batch, h Hold, now time.Time) *bool {
	inserted := new(bool)
	b.Queue(sqlInsertHold, h.ID, h.EventID, h.UserID, h.RequestKey, h.Seats, h.ExpiresAt, now).Exec(func(tag pgconn.CommandTag) error {
		*inserted = tag.RowsAffected() == 1
		return nil
	})
	return inserted
}

// QueueReadSeats queues the read of h's seats, in seat order, and
// returns where they land once the batch is sent.
func (s *Store) QueueReadSeats(b *pgx.Batch, h Hold) *[]Seat {
	read := new([]Seat)
	b.Queue(sqlReadSeats, h.EventID, h.Seats).Query(func(rows pgx.Rows) error {
		var err error
		*read, err = pgx.CollectRows(rows, scanSeat)
		return err
	})
	return read
}

// HoldOfRequest reads, in tx, the hold userID made under requestKey.
func (s *Store) HoldOfRequest(ctx context.Context, tx pgx.Tx, userID, requestKey string) (Hold, error) {
	h, err := scanHold(tx.QueryRow(ctx, sqlReadHoldOfRequest, userID, requestKey))
	if err != nil {
		return Hold{}, fmt.Errorf("read hold of request: %w", err)
	}
	return h, nil
}

// QueueHoldSeats applies rule to h's seats as read (layer 2) and, when
// it lets them be held, queues their write: each seat held at the
// version read, only while available (layers 2 and 3), and recorded
// under hold_seats_one_active_per_seat (layer 4). Nothing is queued
// when rule refuses. Once the batch is sent, a seat the write did not
// reach fails it (WriteError: ErrSeatMoved), and a second active hold
// on a seat too (ErrSeatTaken).
func (s *Store) QueueHoldSeats(b *pgx.Batch, h Hold, read []Seat, rule SeatRule) error {
	if len(read) != len(h.Seats) {
		return fmt.Errorf("hold on %s: %d of %d seats exist", h.EventID, len(read), len(h.Seats))
	}
	if err := rule(read); err != nil {
		return err
	}
	versions := make([]int64, len(read))
	for i, seat := range read {
		versions[i] = seat.Version
	}
	b.Queue(sqlHoldSeats, h.EventID, h.Seats, h.ID, versions)
	return nil
}

// QueueCountHold queues the count of h in what its user holds of its
// event, under caps (layer 4, holdings_within_caps): once the batch is
// sent, a count past a cap fails it (WriteError: ErrOverCaps).
func (s *Store) QueueCountHold(b *pgx.Batch, h Hold, caps Caps) {
	b.Queue(sqlCountHold, h.UserID, h.EventID, len(h.Seats), caps.HoldsPerEvent, caps.SeatsPerEvent)
}

// QueueReadHold queues the read of userID's hold, and returns where it
// lands once the batch is sent: the zero Hold when there is none.
func (s *Store) QueueReadHold(b *pgx.Batch, holdID, userID string) *Hold {
	h := &Hold{}
	b.Queue(sqlReadHold, holdID, userID).QueryRow(func(row pgx.Row) error {
		read, err := scanHold(row)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		*h = read
		return err
	})
	return h
}

// BookingEvent is the body of booking.confirmed.
type BookingEvent struct {
	BookingID string   `json:"booking_id"`
	HoldID    string   `json:"hold_id"`
	EventID   string   `json:"event_id"`
	UserID    string   `json:"user_id"`
	Seats     []string `json:"seats"`
}

// QueueConfirm applies change (the confirm's rule, layer 2) to h as read
// and, when it moves the hold, queues the confirm's writes at the
// version read (layer 3: sqlConfirmHold) and booking.confirmed in the
// outbox, to commit with them or not at all. It returns the booking made
// and whether the hold moved; nothing is queued when change refuses or
// finds it confirmed already. Once the batch is sent, a hold someone else
// moved fails it (WriteError: ErrHoldMoved), a seat no longer the hold's
// too (ErrSeatMoved), and a second booking or ticket is refused by
// bookings_one_per_hold, tickets_one_per_seat (layer 4).
func (s *Store) QueueConfirm(ctx context.Context, b *pgx.Batch, h Hold, bookingID string, now time.Time, change Change) (Booking, bool, error) {
	read := h.Version
	moved, err := change(&h)
	if err != nil || !moved {
		return Booking{}, false, err
	}
	bk := Booking{ID: bookingID, HoldID: h.ID, EventID: h.EventID, UserID: h.UserID, Seats: h.Seats, CreatedAt: now}
	b.Queue(sqlConfirmHold, h.ID, bk.ID, now, h.EventID, h.Seats, read)
	e, err := outbox.New(outbox.BookingConfirmed, bk.ID, now, BookingEvent{
		BookingID: bk.ID, HoldID: bk.HoldID, EventID: bk.EventID, UserID: bk.UserID, Seats: bk.Seats,
	})
	if err != nil {
		return Booking{}, false, err
	}
	if err := outbox.Queue(ctx, b, e); err != nil {
		return Booking{}, false, err
	}
	return bk, true, nil
}

// QueueRelease applies change (the release's rule, layer 2) to h as read
// and, when it moves the hold, queues the release's writes at the version
// read (layer 3: sqlReleaseHold). It returns the hold as it will be, or
// as read when it did not move; nothing is queued when change refuses or
// finds it released already. Once the batch is sent, a release that
// found the hold moved by someone else fails it with ErrHoldMoved: its
// statement wrote nothing, so the COMMIT that travelled with it commits
// nothing.
func (s *Store) QueueRelease(b *pgx.Batch, h Hold, now time.Time, change Change) (Hold, bool, error) {
	read := h
	moved, err := change(&h)
	if err != nil || !moved {
		return read, false, err
	}
	b.Queue(sqlReleaseHold, h.ID, now, read.Version).QueryRow(func(row pgx.Row) error {
		var n int
		if err := row.Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			return ErrHoldMoved
		}
		return nil
	})
	h.Version = read.Version + 1
	return h, true, nil
}

// BookingOfHold reads, in tx, the booking of a confirmed hold.
func (s *Store) BookingOfHold(ctx context.Context, tx pgx.Tx, holdID string) (Booking, error) {
	b, err := scanBooking(tx.QueryRow(ctx, sqlGetBookingForHold, holdID))
	if err != nil {
		return Booking{}, fmt.Errorf("booking of hold %s: %w", holdID, err)
	}
	return b, nil
}

// ExpireDue expires up to limit active holds whose time is up at now,
// frees their seats and counts their users' holdings down, in one
// statement, which PostgreSQL runs as its own transaction. Every replica
// runs it: FOR UPDATE SKIP LOCKED splits the due holds between concurrent
// runs and skips a hold a confirm or release is moving; the status check
// and the version bump make the loser of that race find the hold moved.
func (s *Store) ExpireDue(ctx context.Context, now time.Time, limit int) (int, error) {
	var n int
	if err := s.db.QueryRow(ctx, sqlExpireDue, now, limit).Scan(&n); err != nil {
		return 0, WriteError(fmt.Errorf("expire holds: %w", err))
	}
	return n, nil
}

// shortfall is a statement's check of itself (see the top of this file):
// a NOT NULL column that a row the conditional write before it did not
// reach leaves NULL. Its refusal stands for the error named.
type shortfall struct {
	table, column string
	means         error
}

// shortfalls are the statements' own checks, by what they stand for.
var shortfalls = []shortfall{
	// sqlHoldSeats: a seat moved since the hold read it.
	{"hold_seats", "seat", ErrSeatMoved},
	// sqlConfirmHold: the hold moved since it was read; no booking.
	{"tickets", "booking_id", ErrHoldMoved},
	// sqlConfirmHold: a seat is no longer the hold's (it expired and
	// was held again in between; the re-read finds the hold expired).
	{"tickets", "seat", ErrSeatMoved},
}

// WriteError translates what PostgreSQL answered the seat flows' writes
// into the package's errors: a statement's own check (shortfalls) into
// ErrSeatMoved or ErrHoldMoved (layer 3); hold_seats_one_active_per_seat
// and tickets_one_per_seat into ErrSeatTaken, bookings_one_per_hold into
// ErrHoldMoved (a second booking: the hold was confirmed since it was
// read), holdings_within_caps into ErrOverCaps (layer 4); a deadlock
// PostgreSQL broke into ErrDeadlock; a lock not had within lockTimeout
// into resource_busy. Any other error is returned as it is.
func WriteError(err error) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return err
	}
	if pgErr.Code == "23502" { // not_null_violation
		for _, f := range shortfalls {
			if pgErr.TableName == f.table && pgErr.ColumnName == f.column {
				return f.means
			}
		}
	}
	switch postgres.ConstraintViolated(err) {
	case ConstraintOneActiveHold, ConstraintOneTicket:
		return ErrSeatTaken
	case ConstraintOneBooking:
		return ErrHoldMoved
	case ConstraintWithinCaps:
		return ErrOverCaps
	}
	switch pgErr.Code {
	case "40P01": // deadlock_detected
		return ErrDeadlock
	case "55P03": // lock_not_available
		return &problem.Error{Code: problem.ResourceBusy, Detail: "a seat is being held by another request; retry shortly", RetryAfter: time.Second}
	}
	return err
}
