package seats

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"

	"github.com/shop-example/shop/internal/platform/idempotency"
	"github.com/shop-example/shop/internal/platform/ids"
	"github.com/shop-example/shop/internal/platform/layers"
	"github.com/shop-example/shop/internal/platform/metrics"
	"github.com/shop-example/shop/internal/platform/problem"
)

// The layers of the seat flows, where each one is:
//
//	layer           where                                         backed by
//	0 idempotency   Idempotency-Key on POST holds and confirm:     the route (http.go,
//	                claimed first and completed last in the hold's  idempotency.Store.Atomic);
//	                (the confirm's) transaction; (user, key) on     Store.Hold, Store.Update;
//	                the hold's row                                  holds_user_request_key
//	1 lock          pg_advisory_xact_lock per seat, sorted, in the  Store.Hold: sqlAdvisoryLocks
//	                transaction (SHOP_SEAT_LOCK=advisory, the
//	                default); or seat:{event}:{seat} in Redis per   Service.seatKeys
//	                seat, sorted, nested, and hold:{id} on confirm
//	                and release (SHOP_SEAT_LOCK=redsync);
//	                pg_advisory_xact_lock on (user, event) for the  Store.Hold: sqlCapLock
//	                caps, whatever the strategy
//	2 state         seat available → held → booked, asked of a     Service.Hold (Glance),
//	                snapshot before any lock, of the seats read,    CheckAvailable and
//	                and again in their write (WHERE status =        Store.Hold: sqlHoldSeats,
//	                'available'); hold active → confirmed |         Hold.Confirm, Hold.Release
//	                released | expired
//	3 version       seats written WHERE version = $read; the hold  Store.Hold: sqlHoldSeats,
//	                moved WHERE version = $read                     Store.Update: sqlConfirmHold,
//	                                                                sqlReleaseHold
//	4 constraint    one active hold per seat; one ticket per seat, hold_seats_one_active_per_seat,
//	                ever; one booking per hold                      tickets_one_per_seat, bookings_one_per_hold

// Flow names in the conflict counter and in docs/ABLATION.md.
const (
	FlowHold    = "hold_seats"
	FlowConfirm = "confirm_hold"
	FlowRelease = "release_hold"
	flowExpire  = "expire_holds"
)

// LockStrategy is how layer 1 serialises holds on a seat
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
	// LockNone takes no lock: layers 2–4 alone.
	LockNone LockStrategy = "none"
	// LockSection takes one redsync lock per section (row) the hold
	// touches, in row order: fewer Redis round trips than a lock per
	// seat, but every hold in a row waits for every other. It is the
	// alternative `shop bench seats` measures, not a value of
	// SHOP_SEAT_LOCK: only code sets it (Config.Lock).
	LockSection LockStrategy = "section"
)

// ParseLockStrategy reads SHOP_SEAT_LOCK: advisory, redsync or none, as
// config.FromEnv accepts them. LockSection is not one of them.
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

// Config holds what the service is built from.
type Config struct {
	Store   *Store
	Locker  layers.Locker
	Metrics *metrics.Metrics
	Logger  *slog.Logger
	Now     func() time.Time
	HoldTTL time.Duration // 0 means DefaultHoldTTL
	// Lock is the strategy of layer 1: one of ParseLockStrategy's, or
	// LockSection; "" means LockAdvisory.
	Lock LockStrategy
	// Caps bound what one user may hold of one event; a cap left zero is
	// its default.
	Caps Caps
	// Layers are the defences on. The zero value is all of them; only the
	// layer tests take some off.
	Layers layers.Set
}

// Service runs events, holds and bookings.
type Service struct {
	store   *Store
	hold    layers.Flow
	moves   map[string]layers.Flow // confirm_hold, release_hold
	metrics *metrics.Metrics
	counts  *counters
	logger  *slog.Logger
	now     func() time.Time
	ttl     time.Duration
	lock    LockStrategy
	caps    Caps
	layers  layers.Set
}

// NewService returns the seats service.
func NewService(cfg Config) (*Service, error) {
	if cfg.Store == nil || cfg.Locker == nil {
		return nil, errors.New("seats: a store and a locker are required")
	}
	if cfg.Lock == "" {
		cfg.Lock = LockAdvisory
	}
	if _, err := ParseLockStrategy(string(cfg.Lock)); err != nil && cfg.Lock != LockSection {
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
	counts, err := newCounters(cfg.Metrics)
	if err != nil {
		return nil, err
	}
	flow := layers.Flows("hold", cfg.Layers, cfg.Locker, cfg.Metrics)
	return &Service{store: cfg.Store, hold: flow(FlowHold),
		moves:   map[string]layers.Flow{FlowConfirm: flow(FlowConfirm), FlowRelease: flow(FlowRelease)},
		metrics: cfg.Metrics, counts: counts, logger: cfg.Logger,
		now: cfg.Now, ttl: cfg.HoldTTL, lock: cfg.Lock, caps: cfg.Caps, layers: cfg.Layers}, nil
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
	// One read before any lock or transaction: the event's seat map, and
	// which of the seats asked for are taken now.
	g, err := s.store.Glance(ctx, eventID, userID, requestKey, labels)
	if err != nil {
		return Hold{}, err
	}
	sorted, err := ValidateHold(g.Event, labels, s.caps.SeatsPerHold)
	if err != nil {
		return Hold{}, err
	}
	// Layer 2, asked first of that snapshot: a hold of seats the database
	// already shows taken is refused at once, before it waits for a lock
	// that would only lead it to the same answer. A repeat of a request
	// that made a hold goes on: its transaction answers with that hold,
	// whose seats are the ones taken.
	if len(g.Taken) > 0 && !g.Repeat && s.layers.On(layers.State) {
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
	// The hold's transaction claims it first and completes it last, so
	// the hold and the answer that replays it commit together or not at
	// all.
	rec := idempotency.RecordFrom(ctx)
	var out Hold
	// Layer 1: a lock per seat, taken in seat order (in the store's
	// transaction by default; here, in Redis, with SHOP_SEAT_LOCK=redsync),
	// so two holds that overlap queue on their first common seat and
	// never deadlock; holds of other seats never wait.
	err = s.hold.LockAll(ctx, s.seatKeys(eventID, sorted), func(ctx context.Context) error {
		return s.hold.Retry(ctx, func(int) error {
			now := s.stamp()
			h.ExpiresAt, h.CreatedAt = now.Add(s.ttl), now
			// Layers 3 and 4 are in the store's transaction: each seat is
			// written at the version read, and hold_seats admits one
			// active hold per seat. The hold's row comes first, under its
			// request key: a try of this request that committed before is
			// found there.
			var err error
			out, err = s.store.Hold(ctx, h, now, HoldOptions{Layers: s.layers, Advisory: s.lockOn(LockAdvisory), Record: rec}, func(mine Holding, read []Seat) error {
				// The caps: what this user holds of the event, read under
				// the lock on (user, event) that layer 1 takes in the
				// transaction, leaves room for this hold.
				if err := s.caps.Admit(mine, len(h.Seats)); err != nil {
					return err
				}
				// Layer 2: every seat must be available.
				if !s.layers.On(layers.State) {
					return nil
				}
				if err := CheckAvailable(read); err != nil {
					s.hold.Stopped(ctx, layers.State)
					return err
				}
				return nil
			})
			return raced(err)
		})
	})
	s.countHold(err)
	if err != nil {
		return Hold{}, err
	}
	return out, nil
}

// raced marks the store's errors that lost a race, for Flow.Retry: a
// seat or hold written since it was read (layer 3), a seat another hold
// took first (layer 4), or a deadlock PostgreSQL broke.
func raced(err error) error {
	switch {
	case errors.Is(err, ErrVersionConflict):
		return layers.Lost(layers.Version, err)
	case errors.Is(err, ErrSeatTaken):
		return layers.Lost(layers.Constraint, err)
	case errors.Is(err, ErrDeadlock):
		return layers.Again(err)
	}
	return err
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
	var b Booking
	err = s.update(ctx, FlowConfirm, userID, holdID, nil, &b, func(h *Hold, now time.Time) (Move, error) {
		// Layer 2: only an active hold whose time is not up is confirmed.
		if !s.layers.On(layers.State) {
			return Move{To: Confirmed, BookingID: id.String()}, nil
		}
		if err := h.Confirm(now); err != nil {
			return Move{}, err
		}
		return Move{To: Confirmed, BookingID: id.String()}, nil
	})
	if err != nil {
		return Booking{}, err
	}
	return b, nil
}

// Release frees the seats of userID's hold. Releasing a released hold
// changes nothing and answers it again.
func (s *Service) Release(ctx context.Context, userID, holdID string) (Hold, error) {
	if !ids.Valid(holdID) {
		return Hold{}, ErrNotFound
	}
	var out Hold
	err := s.update(ctx, FlowRelease, userID, holdID, &out, nil, func(h *Hold, now time.Time) (Move, error) {
		// Layer 2: only an active hold is released, once.
		if !s.layers.On(layers.State) {
			h.Status = Released
			return Move{To: Released}, nil
		}
		changed, err := h.Release(now)
		if err != nil || !changed {
			return Move{}, err
		}
		return Move{To: Released}, nil
	})
	if err != nil {
		return Hold{}, err
	}
	return out, nil
}

// update runs one move of a hold (confirm or release) under the hold's
// lock, re-reading after a lost race at layer 3 or 4.
func (s *Service) update(ctx context.Context, flow, userID, holdID string, hold *Hold, booking *Booking,
	rule func(h *Hold, now time.Time) (Move, error)) error {
	f := s.moves[flow]
	// Layer 0 on a confirm: the key's record, claimed and completed in
	// the move's transaction (a release has none).
	rec := idempotency.RecordFrom(ctx)
	// Layer 1: the hold's lock, so a double click on confirm runs once
	// and the second finds the first's booking.
	err := f.LockAll(ctx, s.holdKeys(holdID), func(ctx context.Context) error {
		return f.Retry(ctx, func(int) error {
			now := s.stamp()
			h, b, err := s.store.Update(ctx, holdID, userID, s.layers, now, rec, func(h *Hold) (Move, error) {
				m, err := rule(h, now)
				if err != nil && !errors.Is(err, ErrAlreadyConfirmed) {
					f.Stopped(ctx, layers.State)
				}
				return m, err
			})
			if err != nil {
				return raced(err)
			}
			if hold != nil {
				*hold = h
			}
			if booking != nil {
				*booking = b
			}
			return nil
		})
	})
	if err == nil {
		s.counts.moves.WithLabelValues(flow).Inc()
	}
	return err
}

// seatKeys are the Redis locks of a hold of sorted seats, in seat order:
// one per seat (LockRedsync), or one per section (LockSection). The
// advisory strategy locks inside the store's transaction instead, and
// takes none here.
func (s *Service) seatKeys(eventID string, sorted []string) []string {
	var keys []string
	switch s.lock {
	case LockRedsync:
		for _, seat := range sorted {
			keys = append(keys, "seat:"+eventID+":"+seat)
		}
	case LockSection:
		for _, seat := range sorted {
			key := "section:" + eventID + ":" + seat[:1]
			if len(keys) == 0 || keys[len(keys)-1] != key {
				keys = append(keys, key)
			}
		}
	}
	return keys
}

// holdKeys is the Redis lock of a confirm or release of the hold, with a
// Redis strategy; none with the others.
func (s *Service) holdKeys(holdID string) []string {
	if s.lock != LockRedsync && s.lock != LockSection {
		return nil
	}
	return []string{"hold:" + holdID}
}

// lockOn reports whether layer 1 is on with strategy l.
func (s *Service) lockOn(l LockStrategy) bool { return s.layers.On(layers.Lock) && s.lock == l }

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

// CreateEvent creates an event with rows × perRow seats, all available.
func (s *Service) CreateEvent(ctx context.Context, name string, rows, perRow int) (Event, error) {
	if err := ValidateEvent(name, rows, perRow); err != nil {
		return Event{}, err
	}
	id, err := uuid.NewV7()
	if err != nil {
		return Event{}, fmt.Errorf("new event id: %w", err)
	}
	ev := Event{ID: id.String(), Name: name, Rows: rows, SeatsPerRow: perRow, CreatedAt: s.stamp(), Available: rows * perRow}
	if err := s.store.CreateEvent(ctx, ev); err != nil {
		return Event{}, err
	}
	return ev, nil
}

// Event returns an event with its counts.
func (s *Service) Event(ctx context.Context, id string) (Event, error) {
	if !ids.Valid(id) {
		return Event{}, ErrNotFound
	}
	return s.store.Event(ctx, id)
}

// SeatMap returns an event's seats in seat order.
func (s *Service) SeatMap(ctx context.Context, id string) ([]Seat, error) {
	if !ids.Valid(id) {
		return nil, ErrNotFound
	}
	m, err := s.store.SeatMap(ctx, id)
	if err == nil && len(m) == 0 {
		return nil, ErrNotFound
	}
	return m, err
}

// Booking returns userID's booking.
func (s *Service) Booking(ctx context.Context, userID, id string) (Booking, error) {
	if !ids.Valid(id) {
		return Booking{}, ErrNotFound
	}
	return s.store.Booking(ctx, id, userID)
}

// stamp is the time now as PostgreSQL keeps it.
func (s *Service) stamp() time.Time { return s.now().UTC().Truncate(time.Microsecond) }

// ActiveHolds returns a page of userID's active holds, newest first: a
// client that lost the answer to a hold finds it here.
func (s *Service) ActiveHolds(ctx context.Context, userID, cursor string, limit int) ([]Hold, string, error) {
	return s.store.ActiveHolds(ctx, userID, s.stamp(), cursor, limit)
}

// HoldOf returns userID's hold.
func (s *Service) HoldOf(ctx context.Context, userID, id string) (Hold, error) {
	if !ids.Valid(id) {
		return Hold{}, ErrNotFound
	}
	return s.store.HoldOf(ctx, id, userID)
}
