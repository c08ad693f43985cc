package apptest

import (
	"net/http"
	"testing"
)

// The JSON shapes of API.md, "Seats".
type (
	Event struct {
		ID          string `json:"id"`
		Name        string `json:"name"`
		Available   int    `json:"available"`
		Held        int    `json:"held"`
		Booked      int    `json:"booked"`
		Rows        int    `json:"rows"`
		SeatsPerRow int    `json:"seats_per_row"`
	}
	SeatItem struct {
		Seat   string `json:"seat"`
		Status string `json:"status"`
	}
	SeatHold struct {
		ID        string   `json:"id"`
		EventID   string   `json:"event_id"`
		Seats     []string `json:"seats"`
		Status    string   `json:"status"`
		ExpiresAt string   `json:"expires_at"`
	}
	Booking struct {
		ID      string   `json:"id"`
		EventID string   `json:"event_id"`
		HoldID  string   `json:"hold_id"`
		Seats   []string `json:"seats"`
		Status  string   `json:"status"`
	}
	// SeatProblem is a seat_unavailable answer: the seats taken.
	SeatProblem struct {
		Code  string   `json:"code"`
		Seats []string `json:"seats"`
	}
)

func MustCreateEvent(t testing.TB, r *Replica, name string, rows, perRow int) Event {
	t.Helper()
	res := r.Do(t, http.MethodPost, "/v1/events", AdminToken,
		map[string]any{"name": name, "rows": rows, "seats_per_row": perRow})
	WantStatus(t, res, http.StatusCreated)
	return Decode[Event](t, res)
}

func MustGetEvent(t testing.TB, r *Replica, id string) Event {
	t.Helper()
	res := r.Do(t, http.MethodGet, "/v1/events/"+id, "", nil)
	WantStatus(t, res, http.StatusOK)
	return Decode[Event](t, res)
}

// HoldSeats sends POST /v1/events/{id}/holds with key.
func HoldSeats(t testing.TB, r *Replica, token, eventID, key string, seats ...string) Response {
	t.Helper()
	return r.Do(t, http.MethodPost, "/v1/events/"+eventID+"/holds", token, map[string]any{"seats": seats}, "Idempotency-Key", key)
}

func ConfirmHold(t testing.TB, r *Replica, token, holdID, key string) Response {
	t.Helper()
	return r.Do(t, http.MethodPost, "/v1/holds/"+holdID+"/confirm", token, nil, "Idempotency-Key", key)
}

func ReleaseHold(t testing.TB, r *Replica, token, holdID string) Response {
	t.Helper()
	return r.Do(t, http.MethodDelete, "/v1/holds/"+holdID, token, nil)
}
