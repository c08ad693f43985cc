package app_test

import (
	"net/http"
	"slices"
	"testing"
	"time"
)

// TestSeats_Flow walks the contract: an event and its counts, a hold, a
// refusal that names the taken seats, release, confirm, the booking, and
// refusals of bad input that change nothing.
func TestSeats_Flow(t *testing.T) {
	e := newEnv(t, 1, nil)
	r := e.r(0)
	alice, bob := mustCreateUser(t, r, "alice"), mustCreateUser(t, r, "bob")
	ev := mustCreateEvent(t, r, "Concert", 2, 5)
	if ev.Available != 10 || ev.Held != 0 || ev.Booked != 0 {
		t.Fatalf("new event: %+v", ev)
	}

	res := holdSeats(t, r, alice.Token, ev.ID, newKey(), "A2", "A1")
	wantStatus(t, res, http.StatusCreated)
	h := decode[seatHold](t, res)
	if h.Status != "active" || !slices.Equal(h.Seats, []string{"A1", "A2"}) || h.EventID != ev.ID {
		t.Fatalf("hold: %+v", h)
	}

	res = holdSeats(t, r, bob.Token, ev.ID, newKey(), "A2", "A3", "A1")
	wantProblem(t, res, http.StatusConflict, "seat_unavailable")
	if p := decode[seatProblem](t, res); !slices.Equal(p.Seats, []string{"A1", "A2"}) {
		t.Fatalf("seat_unavailable lists %v, want [A1 A2]", p.Seats)
	}
	if got := mustGetEvent(t, r, ev.ID); got.Available != 8 || got.Held != 2 || got.Booked != 0 {
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
		map[string]any{"seats": []string{"A3"}, "event_id": ev.ID},
	} {
		res := r.do(t, http.MethodPost, "/v1/events/"+ev.ID+"/holds", bob.Token, body, "Idempotency-Key", newKey())
		wantProblem(t, res, http.StatusBadRequest, "invalid_request")
	}
	wantProblem(t, holdSeats(t, r, bob.Token, "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b", newKey(), "A1"), http.StatusNotFound, "not_found")
	wantProblem(t, r.do(t, http.MethodPost, "/v1/events/"+ev.ID+"/holds", bob.Token, map[string]any{"seats": []string{"A3"}}),
		http.StatusBadRequest, "idempotency_key_required")

	// Another user's hold is not found.
	wantProblem(t, confirmHold(t, r, bob.Token, h.ID, newKey()), http.StatusNotFound, "not_found")
	wantProblem(t, releaseHold(t, r, bob.Token, h.ID), http.StatusNotFound, "not_found")

	// Release frees the seats, once; a second release answers the same.
	for range 2 {
		res = releaseHold(t, r, alice.Token, h.ID)
		wantStatus(t, res, http.StatusOK)
		if got := decode[seatHold](t, res); got.Status != "released" {
			t.Fatalf("release: %+v", got)
		}
	}
	wantProblem(t, confirmHold(t, r, alice.Token, h.ID, newKey()), http.StatusConflict, "invalid_state")
	if got := mustGetEvent(t, r, ev.ID); got.Available != 10 {
		t.Fatalf("after release: %+v", got)
	}

	// Bob holds and confirms; the booking is his, once.
	res = holdSeats(t, r, bob.Token, ev.ID, newKey(), "A1", "B5")
	wantStatus(t, res, http.StatusCreated)
	h2 := decode[seatHold](t, res)
	key := newKey()
	res = confirmHold(t, r, bob.Token, h2.ID, key)
	wantStatus(t, res, http.StatusCreated)
	b := decode[booking](t, res)
	if b.Status != "confirmed" || !slices.Equal(b.Seats, []string{"A1", "B5"}) || b.HoldID != h2.ID {
		t.Fatalf("booking: %+v", b)
	}
	again := confirmHold(t, r, bob.Token, h2.ID, key)
	wantStatus(t, again, http.StatusCreated)
	if again.Header.Get("Idempotent-Replayed") != "true" || decode[booking](t, again).ID != b.ID {
		t.Fatalf("replayed confirm: %s", again)
	}
	if other := decode[booking](t, confirmHold(t, r, bob.Token, h2.ID, newKey())); other.ID != b.ID {
		t.Fatalf("a confirm with another key made booking %s, want %s", other.ID, b.ID)
	}
	wantProblem(t, releaseHold(t, r, bob.Token, h2.ID), http.StatusConflict, "invalid_state")
	res = r.do(t, http.MethodGet, "/v1/bookings/"+b.ID, bob.Token, nil)
	wantStatus(t, res, http.StatusOK)
	wantProblem(t, r.do(t, http.MethodGet, "/v1/bookings/"+b.ID, alice.Token, nil), http.StatusNotFound, "not_found")

	res = r.do(t, http.MethodGet, "/v1/events/"+ev.ID+"/seats", "", nil)
	wantStatus(t, res, http.StatusOK)
	m := decode[page[seatItem]](t, res)
	if len(m.Items) != 10 || m.Items[0] != (seatItem{"A1", "booked"}) || m.Items[9] != (seatItem{"B5", "booked"}) || m.Items[1].Status != "available" {
		t.Fatalf("seat map: %+v", m.Items)
	}
	if got := mustGetEvent(t, r, ev.ID); got.Available != 8 || got.Booked != 2 || got.Held != 0 {
		t.Fatalf("after the booking: %+v", got)
	}

	// An expired hold cannot be confirmed, and the job frees its seats.
	h3 := decode[seatHold](t, holdSeats(t, r, alice.Token, ev.ID, newKey(), "A3"))
	e.clock.Advance(e.cfg.SeatHoldTTL + time.Second)
	wantProblem(t, confirmHold(t, r, alice.Token, h3.ID, newKey()), http.StatusConflict, "hold_expired")
	if n, err := r.app.Seats.ExpireDue(t.Context()); err != nil || n != 1 {
		t.Fatalf("ExpireDue = %d, %v; want 1", n, err)
	}
	if got := mustGetEvent(t, r, ev.ID); got.Available != 8 || got.Held != 0 {
		t.Fatalf("after expiry: %+v", got)
	}
	if v := e.seatRows(t, ev.ID).violations(); v != 0 {
		t.Fatalf("seat rows disagree: %+v", e.seatRows(t, ev.ID))
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
		payWantMetric(t, r, sample)
	}
}
