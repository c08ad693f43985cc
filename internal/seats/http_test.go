package seats_test

import (
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/shop-example/shop/harness/apptest"
)

// TestSeats_Flow walks the contract: an event and its counts, a hold, a
// refusal that names the taken seats, release, confirm, the booking, and
// refusals of bad input that change nothing.
func TestSeats_Flow(t *testing.T) {
	e := apptest.New(t, 1, nil)
	r := e.R(0)
	alice, bob := apptest.MustCreateUser(t, r, "alice"), apptest.MustCreateUser(t, r, "bob")
	ev := apptest.MustCreateEvent(t, r, "Concert", 2, 5)
	if ev.Available != 10 || ev.Held != 0 || ev.Booked != 0 {
		t.Fatalf("new event: %+v", ev)
	}

	res := apptest.HoldSeats(t, r, alice.Token, ev.ID, apptest.NewKey(), "A2", "A1")
	apptest.WantStatus(t, res, http.StatusCreated)
	h := apptest.Decode[apptest.SeatHold](t, res)
	if h.Status != "active" || !slices.Equal(h.Seats, []string{"A1", "A2"}) || h.EventID != ev.ID {
		t.Fatalf("hold: %+v", h)
	}

	res = apptest.HoldSeats(t, r, bob.Token, ev.ID, apptest.NewKey(), "A2", "A3", "A1")
	apptest.WantProblem(t, res, http.StatusConflict, "seat_unavailable")
	if p := apptest.Decode[apptest.SeatProblem](t, res); !slices.Equal(p.Seats, []string{"A1", "A2"}) {
		t.Fatalf("seat_unavailable lists %v, want [A1 A2]", p.Seats)
	}
	if got := apptest.MustGetEvent(t, r, ev.ID); got.Available != 8 || got.Held != 2 || got.Booked != 0 {
		t.Fatalf("after one hold: %+v", got)
	}

	// Bad input changes nothing.
	for _, body := range []any{
		map[string]any{"seats": []string{}},
		map[string]any{"seats": []string{"A1", "A1"}},
		map[string]any{"seats": []string{"C1"}},
		map[string]any{"seats": []string{"a3"}},
		map[string]any{"seats": []string{"A03"}},
		map[string]any{"seats": []string{"A1", "A2", "A3", "A4", "A5", "B1", "B2", "B3", "B4", "B5", "A6"}},
	} {
		res := r.Do(t, http.MethodPost, "/v1/events/"+ev.ID+"/holds", bob.Token, body, "Idempotency-Key", apptest.NewKey())
		apptest.WantProblem(t, res, http.StatusBadRequest, "invalid_request")
	}
	apptest.WantProblem(t, r.OffContract("a member the hold does not have").Do(t, http.MethodPost, "/v1/events/"+ev.ID+"/holds", bob.Token,
		map[string]any{"seats": []string{"A3"}, "event_id": ev.ID}, "Idempotency-Key", apptest.NewKey()),
		http.StatusBadRequest, "invalid_request")
	apptest.WantProblem(t, apptest.HoldSeats(t, r, bob.Token, "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b", apptest.NewKey(), "A1"), http.StatusNotFound, "not_found")
	apptest.WantProblem(t, r.OffContract("no Idempotency-Key").Do(t, http.MethodPost, "/v1/events/"+ev.ID+"/holds", bob.Token, map[string]any{"seats": []string{"A3"}}),
		http.StatusBadRequest, "idempotency_key_required")

	// Another user's hold is not found.
	apptest.WantProblem(t, apptest.ConfirmHold(t, r, bob.Token, h.ID, apptest.NewKey()), http.StatusNotFound, "not_found")
	apptest.WantProblem(t, apptest.ReleaseHold(t, r, bob.Token, h.ID), http.StatusNotFound, "not_found")

	// Release frees the seats, once; a second release answers the same.
	for range 2 {
		res = apptest.ReleaseHold(t, r, alice.Token, h.ID)
		apptest.WantStatus(t, res, http.StatusOK)
		if got := apptest.Decode[apptest.SeatHold](t, res); got.Status != "released" {
			t.Fatalf("release: %+v", got)
		}
	}
	apptest.WantProblem(t, apptest.ConfirmHold(t, r, alice.Token, h.ID, apptest.NewKey()), http.StatusConflict, "invalid_state")
	if got := apptest.MustGetEvent(t, r, ev.ID); got.Available != 10 {
		t.Fatalf("after release: %+v", got)
	}

	// Bob holds and confirms; the booking is his, once.
	res = apptest.HoldSeats(t, r, bob.Token, ev.ID, apptest.NewKey(), "A1", "B5")
	apptest.WantStatus(t, res, http.StatusCreated)
	h2 := apptest.Decode[apptest.SeatHold](t, res)
	key := apptest.NewKey()
	res = apptest.ConfirmHold(t, r, bob.Token, h2.ID, key)
	apptest.WantStatus(t, res, http.StatusCreated)
	b := apptest.Decode[apptest.Booking](t, res)
	if b.Status != "confirmed" || !slices.Equal(b.Seats, []string{"A1", "B5"}) || b.HoldID != h2.ID {
		t.Fatalf("booking: %+v", b)
	}
	again := apptest.ConfirmHold(t, r, bob.Token, h2.ID, key)
	apptest.WantStatus(t, again, http.StatusCreated)
	if again.Header.Get("Idempotent-Replayed") != "true" || apptest.Decode[apptest.Booking](t, again).ID != b.ID {
		t.Fatalf("replayed confirm: %s", again)
	}
	if other := apptest.Decode[apptest.Booking](t, apptest.ConfirmHold(t, r, bob.Token, h2.ID, apptest.NewKey())); other.ID != b.ID {
		t.Fatalf("a confirm with another key made booking %s, want %s", other.ID, b.ID)
	}
	apptest.WantProblem(t, apptest.ReleaseHold(t, r, bob.Token, h2.ID), http.StatusConflict, "invalid_state")
	res = r.Do(t, http.MethodGet, "/v1/bookings/"+b.ID, bob.Token, nil)
	apptest.WantStatus(t, res, http.StatusOK)
	apptest.WantProblem(t, r.Do(t, http.MethodGet, "/v1/bookings/"+b.ID, alice.Token, nil), http.StatusNotFound, "not_found")

	res = r.Do(t, http.MethodGet, "/v1/events/"+ev.ID+"/seats", "", nil)
	apptest.WantStatus(t, res, http.StatusOK)
	m := apptest.Decode[apptest.Page[apptest.SeatItem]](t, res)
	if len(m.Items) != 10 || m.Items[0] != (apptest.SeatItem{Seat: "A1", Status: "booked"}) || m.Items[9] != (apptest.SeatItem{Seat: "B5", Status: "booked"}) || m.Items[1].Status != "available" {
		t.Fatalf("seat map: %+v", m.Items)
	}
	if got := apptest.MustGetEvent(t, r, ev.ID); got.Available != 8 || got.Booked != 2 || got.Held != 0 {
		t.Fatalf("after the booking: %+v", got)
	}

	// An expired hold cannot be confirmed, and the job frees its seats.
	h3 := apptest.Decode[apptest.SeatHold](t, apptest.HoldSeats(t, r, alice.Token, ev.ID, apptest.NewKey(), "A3"))
	e.Clock.Advance(e.Cfg.SeatHoldTTL + time.Second)
	apptest.WantProblem(t, apptest.ConfirmHold(t, r, alice.Token, h3.ID, apptest.NewKey()), http.StatusConflict, "hold_expired")
	if n, err := r.App.Seats.ExpireDue(t.Context()); err != nil || n != 1 {
		t.Fatalf("ExpireDue = %d, %v; want 1", n, err)
	}
	if got := apptest.MustGetEvent(t, r, ev.ID); got.Available != 8 || got.Held != 0 {
		t.Fatalf("after expiry: %+v", got)
	}
	if v := readSeatRows(t, e, ev.ID).violations(); v != 0 {
		t.Fatalf("seat rows disagree: %+v", readSeatRows(t, e, ev.ID))
	}

	// The metrics: the holds by outcome, the conflicts by the layer that
	// stopped them (bob's hold of held seats: the state rule), the expiry.
	for _, sample := range []string{
		`shop_seat_holds_total{outcome="held"} 3`,
		`shop_seat_holds_total{outcome="unavailable"} 1`,
		`shop_conflicts_stopped_total{flow="hold_seats",layer="state"} 1`,
		`shop_conflicts_stopped_total{flow="confirm_hold",layer="state"} 2`,
		`shop_conflicts_stopped_total{flow="release_hold",layer="state"} 1`,
		`shop_seat_holds_expired_total 1`,
	} {
		apptest.WantMetric(t, r, sample)
	}
}
