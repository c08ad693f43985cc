package seats

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shop-example/shop/internal/platform/idempotency"
	"github.com/shop-example/shop/internal/platform/ids"
	"github.com/shop-example/shop/internal/platform/layers"
	"github.com/shop-example/shop/internal/platform/metrics"
	"github.com/shop-example/shop/internal/platform/postgres"
	"github.com/shop-example/shop/internal/platform/problem"
)

// The layers of the seat flows, where each one is in this package:
//
//	layer          hold                                confirm, release                  expire
//	0 idempotency  the key's record, claimed first     confirm: the key's record, with   —
//	               and completed last in the hold's    the hold's read and the answer
//	               transaction; the hold's row under
//	               its key (holds_user_request_key)
//	1 lock         Store.QueueLocks: the caps' lock,   with SHOP_SEAT_LOCK=redsync,      none: SKIP LOCKED
//	               then pg_advisory_xact_lock per      hold:{id} in Redis                (sqlExpireDue)
//	               seat (SHOP_SEAT_LOCK=advisory); or
//	               seat:{event}:{seat} in Redis
//	2 state        the Glance before any lock, then    Confirm, Release (seats.go)       status = 'active'
//	               CheckAvailable on the seats read
//	               and status = 'available' in their
//	               write (Store.QueueHoldSeats)
//	3 version      the seats written at the version    the hold moved at the version     the version bump
//	               read (sqlHoldSeats)                 read (sqlConfirmHold,
//	                                                   sqlReleaseHold)
//	4 constraint   hold_seats_one_active_per_seat,     tickets_one_per_seat,             —
//	               holdings_within_caps                bookings_one_per_hold
//
// What the client is answered when a layer refuses (the codes' statuses
// are httpx/errors.go's one table):
//
//	hold     0  a copy still running: 409 request_in_progress; a finished
//	            one: its answer again; the key with other seats: 422
//	            idempotency_key_reused
//	         1  a lock not had within its timeout: 409 resource_busy
//	         2  a seat held or sold: 409 seat_unavailable, naming them; over
//	            the user's caps: 409 hold_limit_reached
//	         3  a seat moved since read: read again (3 tries, then 409
//	            resource_busy)
//	         4  a seat another hold took first, or a count of the user's
//	            another hold made first: read again, and 2 answers
//	confirm  2  a hold whose time is up: 409 hold_expired; released: 409
//	            invalid_state; confirmed already: the hold as it is
//	         4  a second ticket or booking: read again, and 2 answers
//	release  2  as confirm; released already: the hold as it is
//
// What each layer of a hold runs, in the order a hold meets them (the SQL
// is in holdtx.go and postgres.go, the key's in
// platform/idempotency/record.go):
//
//	0  pg_try_advisory_xact_lock on (user, key), then INSERT INTO
//	   idempotency_keys … ON CONFLICT DO UPDATE … RETURNING (claim), alone
//	   with BEGIN; UPDATE idempotency_keys SET status_code, body … WHERE
//	   owner = the claim's token (complete), with COMMIT; and INSERT INTO
//	   holds … ON CONFLICT ON CONSTRAINT holds_user_request_key DO NOTHING
//	   (a try that committed its hold before: that hold is the answer)
//	1  SET LOCAL lock_timeout = '2s'; SELECT
//	   pg_advisory_xact_lock('hold-cap:' || user || ':' || event); with
//	   SHOP_SEAT_LOCK=advisory, pg_advisory_xact_lock per seat in seat
//	   order (55P03 past the timeout: 409 resource_busy); with redsync,
//	   SET seat:{event}:{seat} NX PX on a majority of the Redis nodes,
//	   before the transaction
//	2  the Glance (one read of the seats taken, before any lock),
//	   CheckAvailable on the seats read under the locks, and Caps.Admit
//	   on the user's counted row (SELECT … FROM holdings)
//	3  UPDATE seats SET status = 'held' … WHERE seat AND status =
//	   'available' AND version = the version read, inserting a hold_seats
//	   row per seat it reached (sqlHoldSeats): a seat it did not reach
//	   leaves a NULL seat, which NOT NULL refuses (ErrSeatMoved: read
//	   again)
//	4  hold_seats_one_active_per_seat on those rows (ErrSeatTaken: read
//	   again); INSERT INTO holdings … ON CONFLICT DO UPDATE SET holds =
//	   holds + 1, seats = seats + n under holdings_within_caps
//	   (ErrOverCaps: read again, and the caps refuse)

// Flow names in the conflict counter and in docs/ABLATION.md.
const (
	FlowHold    = "hold_seats"
	FlowConfirm = "confirm_hold"
	FlowRelease = "release_hold"
	flowExpire  = "expire_holds"
)

// LockStrategy is where layer 1 serialises holds on a seat
// (SHOP_SEAT_LOCK; docs/DESIGN.md, "Seats", says why the default).
type LockStrategy string

// The lock strategies.
const (
	// LockAdvisory takes pg_advisory_xact_lock per seat, in seat order,
	// inside the transaction, in the round trip of its reads (the
	// default): no Redis, no retry loop; a waiter sleeps in PostgreSQL,
	// on its connection, until the holder commits.
	LockAdvisory LockStrategy = "advisory"
	// LockRedsync takes a redsync lock per seat, in seat order, before
	// the transaction, and hold:{id} on confirm and release.
	LockRedsync LockStrategy = "redsync"
	// LockNone takes no lock on the seats: layers 2–4 alone.
	LockNone LockStrategy = "none"
)

// ParseLockStrategy reads SHOP_SEAT_LOCK: advisory, redsync or none, as
// config.FromEnv accepts them.
func ParseLockStrategy(s string) (LockStrategy, error) {
	switch l := LockStrategy(s); l {
	case LockAdvisory, LockRedsync, LockNone:
		return l, nil
	}
	return "", fmt.Errorf("want advisory, redsync or none, got %q", s)
}

// DefaultHoldTTL is how long a hold lasts unless configured
// (SHOP_SEAT_HOLD_TTL).
const DefaultHoldTTL = 5 * time.Minute

// HoldRows are the steps of the seat flows in which a layer lives: *Store
// (holdtx.go). A layer test takes one layer off by handing in a variant
// of the production step (harness/variants); production leaves
// Config.Holds nil and gets the store.
type HoldRows interface {
	Glance(ctx context.Context, eventID, userID, requestKey string, labels []string) (Glance, error)
	QueueLocks(b *pgx.Batch, h Hold, lock LockStrategy)
	QueueHoldSeats(b *pgx.Batch, h Hold, read []Seat, rule SeatRule) error
	QueueConfirm(ctx context.Context, b *pgx.Batch, h Hold, bookingID string, now time.Time, change Change) (Booking, bool, error)
	QueueRelease(b *pgx.Batch, h Hold, now time.Time, change Change) (Hold, bool, error)
}

// Config holds what the service is built from.
type Config struct {
	DB      *pgxpool.Pool // the flows' transactions, and the store's reads
	Locker  layers.Locker
	Metrics *metrics.Metrics
	Logger  *slog.Logger
	Now     func() time.Time
	HoldTTL time.Duration // 0 means DefaultHoldTTL
	// Lock is the strategy of layer 1, one of ParseLockStrategy's; ""
	// means LockAdvisory.
	Lock LockStrategy
	// Caps bound what one user may hold of one event; a cap left zero is
	// its default.
	Caps Caps

	// Holds are the steps; nil is production's (NewStore(DB)).
	Holds HoldRows
}

// Service runs events, holds and bookings. Each flow reads top to bottom
// in layer order.
type Service struct {
	db                     *pgxpool.Pool
	store                  *Store
	holds                  HoldRows
	hold, confirm, release layers.Flow
	metrics                *metrics.Metrics
	counts                 *counters
	logger                 *slog.Logger
	now                    func() time.Time
	ttl                    time.Duration
	lock                   LockStrategy
	caps                   Caps
}

// NewService returns the seats service.
func NewService(cfg Config) (*Service, error) {
	if cfg.DB == nil || cfg.Locker == nil {
		return nil, errors.New("seats: a pool and a locker are required")
	}
	if cfg.Lock == "" {
		cfg.Lock = LockAdvisory
	}
	if _, err := ParseLockStrategy(string(cfg.Lock)); err != nil {
		return nil, fmt.Errorf("seats: lock strategy: %w", err)
	}
	cfg.Caps = cfg.Caps.orDefaults()
	if err := cfg.Caps.check(); err != nil {
		return nil, fmt.Errorf("seats: %w", err)
	}
	if cfg.HoldTTL == 0 {
		cfg.HoldTTL = DefaultHoldTTL
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	store := NewStore(cfg.DB)
	if cfg.Holds == nil {
		cfg.Holds = store
	}
	counts, err := newCounters(cfg.Metrics)
	if err != nil {
		return nil, err
	}
	flow := layers.Flows("hold", cfg.Locker, cfg.Metrics)
	return &Service{db: cfg.DB, store: store, holds: cfg.Holds,
		hold: flow(FlowHold), confirm: flow(FlowConfirm), release: flow(FlowRelease),
		metrics: cfg.Metrics, counts: counts, logger: cfg.Logger,
		now: cfg.Now, ttl: cfg.HoldTTL, lock: cfg.Lock, caps: cfg.Caps}, nil
}

// Hold holds seats of eventID for userID, all or none. Any seat taken
// gives seat_unavailable listing the seats taken as this request read
// them: in the one read before any lock, or in its transaction.
// requestKey is the client's Idempotency-Key: the same request sent
// again, after a first try that committed, answers the hold that try made
// (its answer may have been lost on the way).
func (s *Service) Hold(ctx context.Context, userID, requestKey, eventID string, labels []string) (Hold, error) {
	if requestKey == "" {
		return Hold{}, problem.New(problem.IdempotencyRequired, "Idempotency-Key: required on this route")
	}
	if !ids.Valid(eventID) {
		return Hold{}, ErrNotFound
	}
	// One read before any lock or transaction: the event's seat map,
	// which of the seats asked for are taken now, and whether this
	// request made its hold before.
	g, err := s.holds.Glance(ctx, eventID, userID, requestKey, labels)
	if err != nil {
		return Hold{}, err
	}
	sorted, err := ValidateHold(g.Event, labels, s.caps.SeatsPerHold)
	if err != nil {
		return Hold{}, err
	}
	// Layer 2, asked first of that snapshot: a hold of seats the database
	// already shows taken is refused at once, 409 seat_unavailable,
	// before it waits for a lock that would only lead it to the same
	// answer. A repeat of a request that made its hold goes on: its
	// transaction answers with that hold, whose seats are the ones taken.
	if len(g.Taken) > 0 && !g.Repeat {
		s.hold.Stopped(ctx, layers.State)
		err := Unavailable(g.Taken)
		s.countHold(err)
		return Hold{}, err
	}
	id, err := uuid.NewV7()
	if err != nil {
		return Hold{}, fmt.Errorf("new hold id: %w", err)
	}
	h := Hold{ID: id.String(), EventID: eventID, UserID: userID, RequestKey: requestKey, Seats: sorted, Status: Active, Version: 1}
	// Layer 0: the key's record, when the route has the layer (Atomic).
	rec := idempotency.RecordFrom(ctx)
	var out Hold
	// Layer 1 in Redis, with SHOP_SEAT_LOCK=redsync: a lock per seat, in
	// seat order, before the transaction (seatKeys). The default takes
	// its seat locks in the transaction instead, below.
	err = s.hold.LockAll(ctx, s.seatKeys(eventID, sorted), func(ctx context.Context) error {
		return s.hold.Retry(ctx, func(int) error {
			now := s.stamp()
			h.ExpiresAt, h.CreatedAt = now.Add(s.ttl), now
			var (
				mine     *Holding
				inserted *bool
				read     *[]Seat
			)
			// One round trip: the locks, then the reads and the hold's
			// row, in this order.
			lockAndRead := func(b *pgx.Batch) {
				// Layer 1 in PostgreSQL: the caps' lock on (user, event),
				// then, with SHOP_SEAT_LOCK=advisory, a lock per seat in
				// seat order, so two holds that overlap queue on their
				// first common seat and never deadlock. A wait past 2 s
				// answers resource_busy.
				s.holds.QueueLocks(b, h, s.lock)
				// The caps: the user's holds on the event whose time is up
				// expire now, and what the user holds is read from their
				// counted row, before this hold's own row is written.
				s.store.QueueExpireLapsed(b, h.UserID, h.EventID, now)
				mine = s.store.QueueReadHolding(b, h.UserID, h.EventID)
				// Layer 0 in the hold's row: written under its request key
				// (holds_user_request_key), and not written when a try of
				// this request committed its hold before.
				inserted = s.store.QueueInsertHold(b, h, now)
				read = s.store.QueueReadSeats(b, h)
			}
			err := postgres.InTxBatched(ctx, s.db,
				// Layer 0: BEGIN and the key's claim (the try-lock on
				// (user, key) and INSERT INTO idempotency_keys … ON
				// CONFLICT DO UPDATE), alone: a copy of the request in
				// flight is refused here (request_in_progress), before it
				// waits for a seat's advisory lock the first copy holds,
				// with a pool connection in hand. (With
				// SHOP_SEAT_LOCK=redsync the seats' Redis locks come
				// first, above: a copy waits there, and may be told
				// resource_busy.) With no key's record, the locks and
				// reads travel with BEGIN.
				func(first *pgx.Batch) {
					if rec == nil {
						lockAndRead(first)
						return
					}
					rec.QueueClaim(first)
				},
				func(tx pgx.Tx) (*pgx.Batch, error) {
					if rec != nil {
						b := &pgx.Batch{}
						lockAndRead(b)
						if err := tx.SendBatch(ctx, b).Close(); err != nil {
							return nil, err
						}
					}
					if !*inserted {
						// A try of this request made its hold (one whose key's
						// record is gone, or that ran without layer 0): it is
						// the answer, if this request asks for its seats.
						var err error
						out, err = s.store.HoldOfRequest(ctx, tx, h.UserID, h.RequestKey)
						if err != nil {
							return nil, err
						}
						if out.EventID != h.EventID || !slices.Equal(out.Seats, h.Seats) {
							return nil, ErrKeyReused
						}
						_, err = rec.Complete(ctx, tx, heldAnswer(out))
						return nil, err
					}
					// The caps: one more hold, and its seats, within what
					// the user may hold of the event (hold_limit_reached).
					if err := s.caps.Admit(*mine, len(h.Seats)); err != nil {
						return nil, err
					}
					// The last round trip: the seats' write, the hold's count,
					// the key's answer, and COMMIT.
					last := &pgx.Batch{}
					// Layer 2: every seat available as read (CheckAvailable;
					// seat_unavailable names the others). Layer 3: each
					// written only while available at the version read; one
					// that moved since fails the write (ErrSeatMoved), and the
					// hold reads again. Layer 4: hold_seats_one_active_per_seat
					// admits one active hold per seat (ErrSeatTaken: again).
					if err := s.holds.QueueHoldSeats(last, h, *read, CheckAvailable); err != nil {
						return nil, err
					}
					// Layer 4 of the caps: the hold counted in the user's
					// holding; holdings_within_caps refuses a count past a
					// cap (ErrOverCaps: again, and the caps refuse).
					s.store.QueueCountHold(last, h, s.caps)
					// Layer 0: the key's answer, with the hold or not at all.
					out = h
					return last, rec.QueueComplete(last, heldAnswer(h))
				})
			err = WriteError(err)
			if errors.Is(err, ErrSeatUnavailable) {
				s.hold.Stopped(ctx, layers.State)
			}
			return raced(err)
		})
	})
	s.countHold(err)
	if err != nil {
		return Hold{}, err
	}
	return out, nil
}

// Confirm books the seats of userID's hold. Confirming a confirmed hold
// answers its booking again; an expired hold gives hold_expired, a
// released one invalid_state.
func (s *Service) Confirm(ctx context.Context, userID, holdID string) (Booking, error) {
	if !ids.Valid(holdID) {
		return Booking{}, ErrNotFound
	}
	id, err := uuid.NewV7()
	if err != nil {
		return Booking{}, fmt.Errorf("new booking id: %w", err)
	}
	// Layer 0: the key's record, when the route has the layer (Atomic).
	rec := idempotency.RecordFrom(ctx)
	var b Booking
	// Layer 1 in Redis, with SHOP_SEAT_LOCK=redsync: the hold's lock, so a
	// double click runs once and the second finds the first's booking.
	err = s.confirm.LockAll(ctx, s.holdKeys(holdID), func(ctx context.Context) error {
		return s.confirm.Retry(ctx, func(int) error {
			now := s.stamp()
			var h *Hold
			err := postgres.InTxBatched(ctx, s.db,
				// Layer 0: BEGIN and the key's claim, with the hold as it
				// is now: the loser of a race asks its own row first, so a
				// confirm the expiry job beat finds its hold expired. The
				// read waits for no lock, so it travels with the claim.
				func(first *pgx.Batch) {
					rec.QueueClaim(first)
					h = s.store.QueueReadHold(first, holdID, userID)
				},
				func(tx pgx.Tx) (*pgx.Batch, error) {
					if h.ID == "" {
						return nil, ErrNotFound
					}
					// Layer 2: Confirm, only an active hold whose time is not
					// up (hold_expired, invalid_state). Layer 3: the move at
					// the version read; a hold someone else moved since fails
					// it (ErrHoldMoved), and the confirm reads again. Layer 4:
					// bookings_one_per_hold, tickets_one_per_seat.
					last := &pgx.Batch{}
					booked, moved, err := s.holds.QueueConfirm(ctx, last, *h, id.String(), now, Confirm(now))
					if err != nil {
						return nil, err
					}
					if !moved {
						// Confirmed before: its booking is the answer.
						b, err = s.store.BookingOfHold(ctx, tx, holdID)
						if err != nil {
							return nil, err
						}
						_, err = rec.Complete(ctx, tx, bookedAnswer(b))
						return nil, err
					}
					// Layer 0: the key's answer, with the booking or not at
					// all.
					b = booked
					return last, rec.QueueComplete(last, bookedAnswer(b))
				})
			err = WriteError(err)
			if errors.Is(err, ErrHoldExpired) || errors.Is(err, ErrInvalidState) {
				s.confirm.Stopped(ctx, layers.State)
			}
			return raced(err)
		})
	})
	if err != nil {
		return Booking{}, err
	}
	s.counts.moves.WithLabelValues(FlowConfirm).Inc()
	return b, nil
}

// Release frees the seats of userID's hold. Releasing a released hold
// changes nothing and answers it again.
func (s *Service) Release(ctx context.Context, userID, holdID string) (Hold, error) {
	if !ids.Valid(holdID) {
		return Hold{}, ErrNotFound
	}
	var out Hold
	// Layer 1 in Redis, with SHOP_SEAT_LOCK=redsync: the hold's lock.
	err := s.release.LockAll(ctx, s.holdKeys(holdID), func(ctx context.Context) error {
		return s.release.Retry(ctx, func(int) error {
			now := s.stamp()
			var h *Hold
			err := postgres.InTxBatched(ctx, s.db,
				// BEGIN with the hold as it is now: the loser of a race
				// asks its own row first.
				func(first *pgx.Batch) { h = s.store.QueueReadHold(first, holdID, userID) },
				func(pgx.Tx) (*pgx.Batch, error) {
					if h.ID == "" {
						return nil, ErrNotFound
					}
					// Layer 2: Release, only an active hold whose time is not
					// up, once (hold_expired, invalid_state; a released one
					// is answered as it is). Layer 3: the move at the version
					// read; a hold someone else moved since makes it write
					// nothing (ErrHoldMoved), and the release reads again.
					last := &pgx.Batch{}
					var moved bool
					var err error
					out, moved, err = s.holds.QueueRelease(last, *h, now, Release(now))
					if err != nil || !moved {
						return nil, err
					}
					return last, nil
				})
			err = WriteError(err)
			if errors.Is(err, ErrHoldExpired) || errors.Is(err, ErrInvalidState) {
				s.release.Stopped(ctx, layers.State)
			}
			return raced(err)
		})
	})
	if err != nil {
		return Hold{}, err
	}
	s.counts.moves.WithLabelValues(FlowRelease).Inc()
	return out, nil
}

// raced marks the errors of a transaction that lost a race, for
// Flow.Retry: a seat or hold written since it was read (layer 3), a seat
// another hold took first or a count another hold of the user made first
// (layer 4), or a deadlock PostgreSQL broke.
func raced(err error) error {
	switch {
	case errors.Is(err, ErrVersionConflict):
		return layers.Lost(layers.Version, err)
	case errors.Is(err, ErrSeatTaken), errors.Is(err, ErrOverCaps):
		return layers.Lost(layers.Constraint, err)
	case errors.Is(err, ErrDeadlock):
		return layers.Again(err)
	}
	return err
}

// seatKeys are the Redis locks of a hold of sorted seats, in seat order:
// one per seat with LockRedsync. The advisory strategy locks inside the
// hold's transaction instead (Store.QueueLocks), and none takes none.
func (s *Service) seatKeys(eventID string, sorted []string) []string {
	if s.lock != LockRedsync {
		return nil
	}
	keys := make([]string, len(sorted))
	for i, seat := range sorted {
		keys[i] = "seat:" + eventID + ":" + seat
	}
	return keys
}

// holdKeys is the Redis lock of a confirm or release of the hold with
// LockRedsync; none with the others.
func (s *Service) holdKeys(holdID string) []string {
	if s.lock != LockRedsync {
		return nil
	}
	return []string{"hold:" + holdID}
}

// countHold counts a hold's outcome, and a lock that stopped one. A
// copy of a request its key refused is not a hold's outcome: the
// idempotency layer counts it.
func (s *Service) countHold(err error) {
	var refusal *idempotency.Refusal
	if errors.As(err, &refusal) {
		return
	}
	outcome := "held"
	switch code := problem.CodeOf(err); {
	case err == nil:
	case code == problem.SeatUnavailable:
		outcome = "unavailable"
	case code == problem.HoldLimitReached:
		outcome = "capped"
	case code == problem.ResourceBusy:
		outcome = "busy"
	default:
		outcome = "error"
	}
	s.counts.holds.WithLabelValues(outcome).Inc()
}

// stamp is the time now as PostgreSQL keeps it.
func (s *Service) stamp() time.Time { return s.now().UTC().Truncate(time.Microsecond) }
