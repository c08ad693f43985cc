package seats

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/shop-example/shop/internal/platform/problem"
)

// Limits of the seat map and of a hold (API.md, "Seats").
const (
	MaxRows        = 26 // rows A–Z
	MaxSeatsPerRow = 50
	MaxHoldSeats   = 10
	MaxName        = 200
)

// SeatStatus is where one seat is.
//
//	available ──hold──▶ held ──confirm──▶ booked
//	    ▲                 │
//	    └─release/expiry──┘
//
// booked is final: a seat is sold once, ever.
type SeatStatus string

// The states of a seat.
const (
	Available SeatStatus = "available"
	Held      SeatStatus = "held"
	Booked    SeatStatus = "booked"
)

// HoldStatus is where a hold is.
//
//	active ──confirm──▶ confirmed
//	   ├────release───▶ released
//	   └────expiry────▶ expired
//
// Only an active hold moves; the other three are final.
type HoldStatus string

// The states of a hold.
const (
	Active    HoldStatus = "active"
	Confirmed HoldStatus = "confirmed"
	Released  HoldStatus = "released"
	Expired   HoldStatus = "expired"
)

// Event is a show with a seat map of Rows × SeatsPerRow seats, and how
// many of them are in each state, counted in one snapshot.
type Event struct {
	ID          string
	Name        string
	Rows        int
	SeatsPerRow int
	CreatedAt   time.Time
	Available   int
	Held        int
	Booked      int
}

// Seat is one seat of an event as the seat map shows it.
type Seat struct {
	Label   string
	Status  SeatStatus
	HoldID  string // the active hold holding it, "" when none
	Version int64
}

// Hold is a user's claim on a set of seats until ExpiresAt.
type Hold struct {
	ID      string
	EventID string
	UserID  string
	// RequestKey is the Idempotency-Key of the request that made the
	// hold: one hold per (user, key), holds_user_request_key.
	RequestKey string
	Seats      []string // in seat order (SortSeats)
	Status     HoldStatus
	ExpiresAt  time.Time
	Version    int64
	CreatedAt  time.Time
}

// Booking is a confirmed hold: its seats are sold.
type Booking struct {
	ID        string
	HoldID    string
	EventID   string
	UserID    string
	Seats     []string
	CreatedAt time.Time
}

// HoldStatuses are every state of a hold, active first.
var HoldStatuses = []HoldStatus{Active, Confirmed, Released, Expired}

// Change is a rule of a hold's end (layer 2): applied to the hold as its
// transaction read it, it moves the hold where the rule takes it and
// reports moved, or refuses with an error and leaves the hold as it was.
// moved is false, with no error, when the move was made before (a
// confirm of a confirmed hold, a release of a released one): the answer
// is the hold as it is. The use case names the rule; the store applies
// it to the row it read and writes what moved (Store.QueueConfirm,
// Store.QueueRelease), as orders.Change is applied.
type Change func(h *Hold) (moved bool, err error)

// Confirm is the confirm's rule at now: an active hold whose time is not
// up moves to confirmed. A hold whose time is up is expired even if the
// expiry job has not reached it yet: the rule is the clock, the job only
// frees the seats. A confirmed hold is left as it is (its booking is the
// answer); a released one cannot be confirmed.
func Confirm(now time.Time) Change {
	return func(h *Hold) (bool, error) {
		switch {
		case h.Status == Confirmed:
			return false, nil
		case h.Status == Expired, h.Status == Active && !now.Before(h.ExpiresAt):
			return false, problem.Errorf(problem.HoldExpired, "hold %s expired at %s", h.ID, h.ExpiresAt.UTC().Format(time.RFC3339))
		case h.Status != Active:
			return false, problem.Errorf(problem.InvalidState, "hold %s is %s", h.ID, h.Status)
		}
		h.Status = Confirmed
		return true, nil
	}
}

// Release is the release's rule at now: an active hold whose time is not
// up moves to released. A released hold is left as it is; a confirmed or
// expired one cannot be released.
func Release(now time.Time) Change {
	return func(h *Hold) (bool, error) {
		switch {
		case h.Status == Released:
			return false, nil
		case h.Status == Expired, h.Status == Active && !now.Before(h.ExpiresAt):
			return false, problem.Errorf(problem.HoldExpired, "hold %s expired at %s", h.ID, h.ExpiresAt.UTC().Format(time.RFC3339))
		case h.Status != Active:
			return false, problem.Errorf(problem.InvalidState, "hold %s is %s", h.ID, h.Status)
		}
		h.Status = Released
		return true, nil
	}
}

// SeatRule is a new hold's rule on its seats as its transaction read
// them (layer 2): CheckAvailable. The use case names it; the store
// applies it before it queues the seats' write (Store.QueueHoldSeats).
type SeatRule func(read []Seat) error

// CheckAvailable is the seat side of the state machine for a new hold:
// every seat must be available. Otherwise the refusal lists the seats
// that are not, as the seat map read in this transaction shows them.
func CheckAvailable(seats []Seat) error {
	var taken []string
	for _, s := range seats {
		if s.Status != Available {
			taken = append(taken, s.Label)
		}
	}
	if len(taken) > 0 {
		return Unavailable(taken)
	}
	return nil
}

// Unavailable is the 409 seat_unavailable naming the taken seats.
func Unavailable(taken []string) *problem.Error {
	return &problem.Error{Code: problem.SeatUnavailable,
		Detail: "taken: " + strings.Join(taken, ", "), Extra: map[string]any{"seats": taken}}
}

// Errors returned by this package, matched with errors.Is.
var (
	ErrNotFound        = problem.New(problem.NotFound, "no such resource")
	ErrSeatUnavailable = problem.New(problem.SeatUnavailable, "a seat is taken")
	// ErrKeyReused means the request's Idempotency-Key made a hold of
	// other seats: the same key sent with another request.
	ErrKeyReused = problem.New(problem.IdempotencyReused,
		"this Idempotency-Key was used for a hold of other seats; send a new key for a new request")
	// ErrHoldExpired and ErrInvalidState are the refusals of a hold's
	// end (Confirm, Release): its time is up, or it ended otherwise.
	ErrHoldExpired  = problem.New(problem.HoldExpired, "the hold expired")
	ErrInvalidState = problem.New(problem.InvalidState, "the hold is not in a state that allows this")
	// ErrVersionConflict means a seat or hold changed between read and
	// write (layer 3). It never reaches a client: the service re-reads.
	ErrVersionConflict = errors.New("seat or hold changed since it was read")
	// ErrSeatMoved is the version conflict of a write of seats: a seat
	// the hold read (available, at its version) moved before the write,
	// or, for a confirm, a seat is no longer the hold's.
	ErrSeatMoved = fmt.Errorf("%w: a seat moved", ErrVersionConflict)
	// ErrHoldMoved is the version conflict of a hold's end: someone else
	// confirmed, released or expired the hold since it was read.
	ErrHoldMoved = fmt.Errorf("%w: the hold moved", ErrVersionConflict)
	// ErrSeatTaken means hold_seats_one_active_per_seat or
	// tickets_one_per_seat refused a second active hold or a second
	// ticket for a seat (layer 4). The service re-reads.
	ErrSeatTaken = errors.New("seat already held or booked")
	// ErrOverCaps means holdings_within_caps refused the user's holding
	// counted with this hold (layer 4): another hold of theirs on the
	// event committed since this one read the count. The service
	// re-reads, and the caps' rule refuses with what the user holds.
	ErrOverCaps = errors.New("the user's holds on the event counted past a cap")
	// ErrDeadlock means PostgreSQL broke a deadlock by rolling this
	// transaction back: two writers locked the same rows in different
	// orders (only reachable with a layer off, or holds whose multi-row
	// updates interleave). Nothing was written; the service re-reads.
	ErrDeadlock = errors.New("deadlock with another writer")
)

// ParseSeat reads a seat label in its one spelling: a row letter A–Z and
// a number 1–50 without leading zeros ("A1", "Z50"). It returns the
// row (0-based) and the number.
func ParseSeat(label string) (row, num int, err error) {
	if len(label) < 2 || label[0] < 'A' || label[0] > 'Z' || label[1] == '0' {
		return 0, 0, fmt.Errorf("%q is not a seat (A1 to Z50)", label)
	}
	n, err := strconv.Atoi(label[1:])
	if err != nil || n < 1 || n > MaxSeatsPerRow || strconv.Itoa(n) != label[1:] {
		return 0, 0, fmt.Errorf("%q is not a seat (A1 to Z50)", label)
	}
	return int(label[0] - 'A'), n, nil
}

// Position orders seats: row by row, then by number (A1 = 1, B1 = 51).
func Position(label string) int {
	row, num, _ := ParseSeat(label)
	return row*MaxSeatsPerRow + num
}

// Label is the seat at row (0-based) and number.
func Label(row, num int) string { return string(rune('A'+row)) + strconv.Itoa(num) }

// SortSeats sorts labels in seat order, the order locks are taken in.
func SortSeats(labels []string) {
	slices.SortFunc(labels, func(a, b string) int { return Position(a) - Position(b) })
}

// ValidateHold checks the seats of a hold on ev: 1 to perHold (at most
// MaxHoldSeats) distinct seats of its map, and returns them sorted.
// Nothing is read or written on a refusal.
func ValidateHold(ev Event, labels []string, perHold int) ([]string, error) {
	if len(labels) < 1 || len(labels) > perHold {
		return nil, problem.Errorf(problem.Invalid, "seats: want 1–%d seats, got %d", perHold, len(labels))
	}
	out := slices.Clone(labels)
	seen := make(map[string]bool, len(out))
	for i, l := range out {
		row, num, err := ParseSeat(l)
		if err != nil {
			return nil, problem.Errorf(problem.Invalid, "seats[%d]: %v", i, err)
		}
		if row >= ev.Rows || num > ev.SeatsPerRow {
			return nil, problem.Errorf(problem.Invalid, "seats[%d]: %s is not a seat of this event (%d rows of %d)", i, l, ev.Rows, ev.SeatsPerRow)
		}
		if seen[l] {
			return nil, problem.Errorf(problem.Invalid, "seats[%d]: %s is listed twice", i, l)
		}
		seen[l] = true
	}
	SortSeats(out)
	return out, nil
}

// Caps bound what one user may hold of one event, so that within the
// rate limits no one user can hold a hall: 60 holds a minute of 10 seats,
// each lasting the hold TTL, would otherwise hold 1,190 of 1,300 seats in
// a minute. They count active holds only: a confirmed hold is sold, not
// hoarded.
type Caps struct {
	SeatsPerHold  int // seats in one hold, 1–MaxHoldSeats (SHOP_SEAT_CAP_PER_HOLD)
	HoldsPerEvent int // active holds of one user on one event (SHOP_SEAT_CAP_HOLDS)
	SeatsPerEvent int // seats one user holds of one event, all holds together (SHOP_SEAT_CAP_SEATS)
}

// The default caps: a hold of a whole row of friends, and room to hold
// seats again before a first hold is released or expires.
const (
	DefaultCapSeatsPerHold  = MaxHoldSeats
	DefaultCapHoldsPerEvent = 4
	DefaultCapSeatsPerEvent = 10
)

// orDefaults fills each cap left zero with its default, so a Config that
// forgets the caps has them on.
func (c Caps) orDefaults() Caps {
	if c.SeatsPerHold == 0 {
		c.SeatsPerHold = DefaultCapSeatsPerHold
	}
	if c.HoldsPerEvent == 0 {
		c.HoldsPerEvent = DefaultCapHoldsPerEvent
	}
	if c.SeatsPerEvent == 0 {
		c.SeatsPerEvent = DefaultCapSeatsPerEvent
	}
	return c
}

// check refuses caps that cannot be met: a hold of more than MaxHoldSeats
// seats, or a cap on the seats per event below the seats per hold.
func (c Caps) check() error {
	switch {
	case c.SeatsPerHold < 1 || c.SeatsPerHold > MaxHoldSeats:
		return fmt.Errorf("seats per hold: want 1–%d, got %d", MaxHoldSeats, c.SeatsPerHold)
	case c.HoldsPerEvent < 1:
		return fmt.Errorf("holds per event: want at least 1, got %d", c.HoldsPerEvent)
	case c.SeatsPerEvent < c.SeatsPerHold:
		return fmt.Errorf("seats per event: %d is fewer than the %d seats of one hold", c.SeatsPerEvent, c.SeatsPerHold)
	}
	return nil
}

// Holding is what one user holds of one event, as the hold's transaction
// read it from their counted row (holdings): their active holds, and
// those holds' seats. The transaction expires the user's holds on the
// event whose time is up before it reads (Store.QueueExpireLapsed), so
// a hold past its time counts no more, whether or not the expiry job has
// reached it.
type Holding struct {
	Holds int
	Seats int
}

// Admit is the caps' rule for a new hold of seats seats by a user who
// holds mine: one more hold and seats more seats must stay within the
// caps. A refusal is 409 hold_limit_reached, naming the cap and what the
// user holds; it passes once a hold of theirs is confirmed, released or
// expired.
func (c Caps) Admit(mine Holding, seats int) error {
	switch {
	case mine.Holds+1 > c.HoldsPerEvent:
		return &problem.Error{Code: problem.HoldLimitReached,
			Detail: fmt.Sprintf("at most %d active holds per event; you have %d", c.HoldsPerEvent, mine.Holds),
			Extra:  map[string]any{"limit": "holds_per_event", "max": c.HoldsPerEvent, "holds": mine.Holds, "held_seats": mine.Seats}}
	case mine.Seats+seats > c.SeatsPerEvent:
		return &problem.Error{Code: problem.HoldLimitReached,
			Detail: fmt.Sprintf("at most %d held seats per event; you hold %d and ask for %d", c.SeatsPerEvent, mine.Seats, seats),
			Extra:  map[string]any{"limit": "seats_per_event", "max": c.SeatsPerEvent, "holds": mine.Holds, "held_seats": mine.Seats}}
	}
	return nil
}

// ValidateEvent checks a new event's name and seat map.
func ValidateEvent(name string, rows, perRow int) error {
	switch {
	case !utf8.ValidString(name) || strings.TrimSpace(name) == "":
		return problem.New(problem.Invalid, "name: must not be empty or blank")
	case utf8.RuneCountInString(name) > MaxName:
		return problem.Errorf(problem.Invalid, "name: at most %d characters", MaxName)
	case rows < 1 || rows > MaxRows:
		return problem.Errorf(problem.Invalid, "rows: want 1–%d, got %d", MaxRows, rows)
	case perRow < 1 || perRow > MaxSeatsPerRow:
		return problem.Errorf(problem.Invalid, "seats_per_row: want 1–%d, got %d", MaxSeatsPerRow, perRow)
	}
	return nil
}
