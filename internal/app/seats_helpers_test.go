package app_test

import (
	"context"
	"net/http"
	"testing"
)

// The JSON shapes of API.md, "Seats".
type (
	event struct {
		ID          string `json:"id"`
		Name        string `json:"name"`
		Available   int    `json:"available"`
		Held        int    `json:"held"`
		Booked      int    `json:"booked"`
		Rows        int    `json:"rows"`
		SeatsPerRow int    `json:"seats_per_row"`
	}
	seatItem struct {
		Seat   string `json:"seat"`
		Status string `json:"status"`
	}
	seatHold struct {
		ID        string   `json:"id"`
		EventID   string   `json:"event_id"`
		Seats     []string `json:"seats"`
		Status    string   `json:"status"`
		ExpiresAt string   `json:"expires_at"`
	}
	booking struct {
		ID      string   `json:"id"`
		EventID string   `json:"event_id"`
		HoldID  string   `json:"hold_id"`
		Seats   []string `json:"seats"`
		Status  string   `json:"status"`
	}
	// seatProblem is a seat_unavailable answer: the seats taken.
	seatProblem struct {
		Code  string   `json:"code"`
		Seats []string `json:"seats"`
	}
)

func mustCreateEvent(t testing.TB, r *replica, name string, rows, perRow int) event {
	t.Helper()
	res := r.do(t, http.MethodPost, "/v1/events", testAdminToken,
		map[string]any{"name": name, "rows": rows, "seats_per_row": perRow})
	wantStatus(t, res, http.StatusCreated)
	return decode[event](t, res)
}

func mustGetEvent(t testing.TB, r *replica, id string) event {
	t.Helper()
	res := r.do(t, http.MethodGet, "/v1/events/"+id, "", nil)
	wantStatus(t, res, http.StatusOK)
	return decode[event](t, res)
}

// holdSeats sends POST /v1/events/{id}/holds with key.
func holdSeats(t testing.TB, r *replica, token, eventID, key string, seats ...string) response {
	t.Helper()
	return r.do(t, http.MethodPost, "/v1/events/"+eventID+"/holds", token, map[string]any{"seats": seats}, "Idempotency-Key", key)
}

func confirmHold(t testing.TB, r *replica, token, holdID, key string) response {
	t.Helper()
	return r.do(t, http.MethodPost, "/v1/holds/"+holdID+"/confirm", token, nil, "Idempotency-Key", key)
}

func releaseHold(t testing.TB, r *replica, token, holdID string) response {
	t.Helper()
	return r.do(t, http.MethodDelete, "/v1/holds/"+holdID, token, nil)
}

// seatRows is what the database says about an event's seats: how many
// are in each state, and the rows that must agree with them.
type seatRows struct {
	available, held, booked int
	activeHolds             int // active hold_seats rows
	tickets                 int
	// doubleHeld counts the active hold_seats rows beyond the first on a
	// seat; doubleBooked the tickets beyond the first; heldWrong the held
	// seats whose hold is not active or does not list them.
	doubleHeld, doubleBooked, heldWrong int
}

func (e *env) seatRows(t testing.TB, eventID string) seatRows {
	t.Helper()
	var s seatRows
	err := e.db.QueryRow(context.Background(), `SELECT
		(SELECT count(*) FROM seats WHERE event_id = $1 AND status = 'available')::int,
		(SELECT count(*) FROM seats WHERE event_id = $1 AND status = 'held')::int,
		(SELECT count(*) FROM seats WHERE event_id = $1 AND status = 'booked')::int,
		(SELECT count(*) FROM hold_seats WHERE event_id = $1 AND active)::int,
		(SELECT count(*) FROM tickets WHERE event_id = $1)::int,
		(SELECT coalesce(sum(n - 1), 0) FROM (SELECT count(*) AS n FROM hold_seats WHERE event_id = $1 AND active GROUP BY seat) x)::int,
		(SELECT coalesce(sum(n - 1), 0) FROM (SELECT count(*) AS n FROM tickets WHERE event_id = $1 GROUP BY seat) x)::int,
		(SELECT count(*) FROM seats s LEFT JOIN holds h ON h.id = s.hold_id
			WHERE s.event_id = $1 AND s.status = 'held' AND (h.status IS DISTINCT FROM 'active' OR NOT s.seat = ANY(h.seats)))::int`,
		eventID).Scan(&s.available, &s.held, &s.booked, &s.activeHolds, &s.tickets, &s.doubleHeld, &s.doubleBooked, &s.heldWrong)
	if err != nil {
		t.Fatalf("seat rows: %v", err)
	}
	return s
}

// violations counts how far the seat rows are from the invariant: no
// seat in two active holds or two bookings, and the seats' states equal
// the hold and ticket rows.
func (s seatRows) violations() int {
	return s.doubleHeld + s.doubleBooked + s.heldWrong + abs(s.held-s.activeHolds) + abs(s.booked-s.tickets)
}
