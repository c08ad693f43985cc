package seats

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shop-example/shop/internal/platform/lock"
	"github.com/shop-example/shop/internal/platform/problem"
)

func TestParseSeat(t *testing.T) {
	tests := []struct {
		label    string
		row, num int
		ok       bool
	}{
		{"A1", 0, 1, true},
		{"Z50", 25, 50, true},
		{"K12", 10, 12, true},
		{"a1", 0, 0, false},
		{"A0", 0, 0, false},
		{"A01", 0, 0, false},
		{"A51", 0, 0, false},
		{"A", 0, 0, false},
		{"1A", 0, 0, false},
		{"A+1", 0, 0, false},
		{"", 0, 0, false},
	}
	for _, tt := range tests {
		row, num, err := ParseSeat(tt.label)
		if (err == nil) != tt.ok || (tt.ok && (row != tt.row || num != tt.num)) {
			t.Errorf("ParseSeat(%q) = %d, %d, %v; want %d, %d, ok %v", tt.label, row, num, err, tt.row, tt.num, tt.ok)
		}
	}
}

func TestValidateHold(t *testing.T) {
	ev := Event{Rows: 2, SeatsPerRow: 10}
	got, err := ValidateHold(ev, []string{"B2", "A10", "A2", "B1"}, MaxHoldSeats)
	if err != nil || !slices.Equal(got, []string{"A2", "A10", "B1", "B2"}) {
		t.Fatalf("ValidateHold = %v, %v; want seat order", got, err)
	}
	for name, labels := range map[string][]string{
		"None":        {},
		"Eleven":      {"A1", "A2", "A3", "A4", "A5", "A6", "A7", "A8", "A9", "A10", "B1"},
		"Twice":       {"A1", "A1"},
		"RowBeyond":   {"C1"},
		"NumBeyond":   {"A11"},
		"LowerCase":   {"a1"},
		"LeadingZero": {"A01"},
	} {
		if _, err := ValidateHold(ev, labels, MaxHoldSeats); problem.CodeOf(err) != problem.Invalid {
			t.Errorf("%s: ValidateHold(%v) = %v, want invalid_request", name, labels, err)
		}
	}
	// SHOP_SEAT_CAP_PER_HOLD below 10 lowers the bound.
	if _, err := ValidateHold(ev, []string{"A1", "A2", "A3"}, 2); problem.CodeOf(err) != problem.Invalid {
		t.Errorf("3 seats with a cap of 2 per hold: %v, want invalid_request", err)
	}
	if _, err := ValidateHold(ev, []string{"A1", "A2"}, 2); err != nil {
		t.Errorf("2 seats with a cap of 2 per hold: %v", err)
	}
}

func TestCaps_Admit(t *testing.T) {
	caps := Caps{SeatsPerHold: 10, HoldsPerEvent: 4, SeatsPerEvent: 10}
	for _, tt := range []struct {
		name  string
		mine  Holding
		seats int
		limit string // "" when admitted
	}{
		{"FirstHold", Holding{}, 10, ""},
		{"FourthHold", Holding{Holds: 3, Seats: 3}, 1, ""},
		{"FifthHold", Holding{Holds: 4, Seats: 4}, 1, "holds_per_event"},
		{"UpToTheSeats", Holding{Holds: 1, Seats: 6}, 4, ""},
		{"PastTheSeats", Holding{Holds: 1, Seats: 6}, 5, "seats_per_event"},
		{"FullHouse", Holding{Holds: 1, Seats: 10}, 1, "seats_per_event"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := caps.Admit(tt.mine, tt.seats)
			if tt.limit == "" {
				if err != nil {
					t.Fatalf("Admit(%+v, %d) = %v, want admitted", tt.mine, tt.seats, err)
				}
				return
			}
			p, ok := problem.As(err)
			if !ok || p.Code != problem.HoldLimitReached || p.Extra["limit"] != tt.limit {
				t.Fatalf("Admit(%+v, %d) = %v, want hold_limit_reached on %s", tt.mine, tt.seats, err, tt.limit)
			}
		})
	}
}

func TestCaps_ZeroIsDefault(t *testing.T) {
	want := Caps{SeatsPerHold: DefaultCapSeatsPerHold, HoldsPerEvent: DefaultCapHoldsPerEvent, SeatsPerEvent: DefaultCapSeatsPerEvent}
	if got := (Caps{}).orDefaults(); got != want {
		t.Errorf("Caps{}.orDefaults() = %+v, want %+v", got, want)
	}
	if got := (Caps{HoldsPerEvent: 9}).orDefaults(); got.HoldsPerEvent != 9 || got.SeatsPerEvent != DefaultCapSeatsPerEvent {
		t.Errorf("a set cap is kept, the others defaulted: %+v", got)
	}
}

// TestConfirm: the confirm's rule moves an active hold within its time,
// leaves a confirmed one as it is, and refuses the others, leaving them as
// they were.
func TestConfirm(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name    string
		status  HoldStatus
		expires time.Time
		moved   bool
		want    error
	}{
		{"Active", Active, now.Add(time.Minute), true, nil},
		{"ActivePastItsTime", Active, now, false, ErrHoldExpired},
		{"Expired", Expired, now.Add(time.Minute), false, ErrHoldExpired},
		{"Released", Released, now.Add(time.Minute), false, ErrInvalidState},
		{"Confirmed", Confirmed, now.Add(time.Minute), false, nil},
	}
	for _, tt := range tests {
		h := Hold{Status: tt.status, ExpiresAt: tt.expires}
		moved, err := Confirm(now)(&h)
		if moved != tt.moved || (tt.want == nil) != (err == nil) || (tt.want != nil && !errors.Is(err, tt.want)) {
			t.Errorf("%s: Confirm = %v, %v; want %v, %v", tt.name, moved, err, tt.moved, tt.want)
		}
		want := tt.status
		if tt.moved {
			want = Confirmed
		}
		if h.Status != want {
			t.Errorf("%s: status %s after Confirm, want %s", tt.name, h.Status, want)
		}
	}
}

// TestRelease: the release's rule moves an active hold within its time,
// leaves a released one as it is, and refuses the others.
func TestRelease(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name    string
		status  HoldStatus
		expires time.Time
		moved   bool
		code    problem.Code
	}{
		{"Active", Active, now.Add(time.Minute), true, ""},
		{"ActivePastItsTime", Active, now, false, problem.HoldExpired},
		{"Released", Released, now.Add(time.Minute), false, ""},
		{"Confirmed", Confirmed, now.Add(time.Minute), false, problem.InvalidState},
		{"Expired", Expired, now.Add(time.Minute), false, problem.HoldExpired},
	}
	for _, tt := range tests {
		h := Hold{Status: tt.status, ExpiresAt: tt.expires}
		moved, err := Release(now)(&h)
		if moved != tt.moved || problem.CodeOf(err) != tt.code {
			t.Errorf("%s: Release = %v, %v; want %v, %q", tt.name, moved, err, tt.moved, tt.code)
		}
		want := tt.status
		if tt.moved {
			want = Released
		}
		if h.Status != want {
			t.Errorf("%s: status %s after Release, want %s", tt.name, h.Status, want)
		}
	}
}

func TestCheckAvailable(t *testing.T) {
	err := CheckAvailable([]Seat{{Label: "A1", Status: Available}, {Label: "A2", Status: Held}, {Label: "A3", Status: Booked}})
	p, ok := problem.As(err)
	if !ok || p.Code != problem.SeatUnavailable || !slices.Equal(p.Extra["seats"].([]string), []string{"A2", "A3"}) {
		t.Fatalf("CheckAvailable = %v, want seat_unavailable listing A2, A3", err)
	}
	if err := CheckAvailable([]Seat{{Label: "A1", Status: Available}}); err != nil {
		t.Fatalf("CheckAvailable(available) = %v", err)
	}
}

// TestParseLockStrategy: SHOP_SEAT_LOCK's values are config.FromEnv's,
// and NewService takes no other (a lock per section is the bench's
// variant of the Redis lock, harness/variants.Sections).
func TestParseLockStrategy(t *testing.T) {
	for _, ok := range []string{"advisory", "redsync", "none"} {
		if _, err := ParseLockStrategy(ok); err != nil {
			t.Errorf("ParseLockStrategy(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"", "Redsync", "pg", "section"} {
		if _, err := ParseLockStrategy(bad); err == nil {
			t.Errorf("ParseLockStrategy(%q) = nil error", bad)
		}
	}
	for _, tt := range []struct {
		lock LockStrategy
		want LockStrategy // "" when NewService refuses it
	}{
		{"", LockAdvisory}, {LockAdvisory, LockAdvisory}, {LockRedsync, LockRedsync}, {LockNone, LockNone},
		{"section", ""}, {"pg", ""},
	} {
		svc, err := NewService(Config{DB: new(pgxpool.Pool), Locker: lock.None{}, Lock: tt.lock})
		switch {
		case tt.want == "":
			if err == nil {
				t.Errorf("NewService with lock %q: nil error", tt.lock)
			}
		case err != nil:
			t.Errorf("NewService with lock %q: %v", tt.lock, err)
		case svc.lock != tt.want:
			t.Errorf("NewService with lock %q runs %q, want %q", tt.lock, svc.lock, tt.want)
		}
	}
}
