package app_test

import (
	"net/http"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/shop-example/shop/internal/app"
	"github.com/shop-example/shop/internal/platform/layers"
)

// GET /v1/holds lists the caller's active holds, newest first, a page at
// a time: not another user's, not a released one, not one whose time is
// up.
func TestHolds_List(t *testing.T) {
	e := newEnv(t, 1, nil)
	r := e.r(0)
	ann, bob := mustCreateUser(t, r, "ann"), mustCreateUser(t, r, "bob")
	ev := mustCreateEvent(t, r, "listed", 2, 5)

	var ids []string
	for _, seat := range []string{"A1", "A2", "A3"} {
		res := holdSeats(t, r, ann.Token, ev.ID, newKey(), seat)
		wantStatus(t, res, http.StatusCreated)
		ids = append(ids, decode[seatHold](t, res).ID)
		e.clock.Advance(time.Millisecond) // created_at orders the list
	}
	wantStatus(t, releaseHold(t, r, ann.Token, ids[2]), http.StatusOK)
	wantStatus(t, holdSeats(t, r, bob.Token, ev.ID, newKey(), "B1"), http.StatusCreated)

	var got []string
	cursor := ""
	for pages := 0; ; pages++ {
		if pages > 2 {
			t.Fatalf("more than 2 pages of 1 for 2 active holds: %v", got)
		}
		path := "/v1/holds?limit=1"
		if cursor != "" {
			path += "&cursor=" + url.QueryEscape(cursor)
		}
		res := r.do(t, http.MethodGet, path, ann.Token, nil)
		wantStatus(t, res, http.StatusOK)
		p := decode[page[seatHold]](t, res)
		for _, h := range p.Items {
			got = append(got, h.ID)
			if h.Status != "active" || h.EventID != ev.ID {
				t.Errorf("listed %+v, want an active hold of the event", h)
			}
		}
		if p.NextCursor == nil {
			break
		}
		cursor = *p.NextCursor
	}
	if want := []string{ids[1], ids[0]}; !slices.Equal(got, want) {
		t.Errorf("GET /v1/holds listed %v, want the active ones newest first %v", got, want)
	}

	e.clock.Advance(e.cfg.SeatHoldTTL + time.Second)
	res := r.do(t, http.MethodGet, "/v1/holds", ann.Token, nil)
	wantStatus(t, res, http.StatusOK)
	if p := decode[page[seatHold]](t, res); len(p.Items) != 0 {
		t.Errorf("after the hold TTL, GET /v1/holds listed %d holds, want none", len(p.Items))
	}
	wantProblem(t, r.do(t, http.MethodGet, "/v1/holds?cursor=garbage", ann.Token, nil), http.StatusBadRequest, "invalid_request")
}

// The hold's row carries its request key: with the idempotency layer off,
// so that no stored answer stands in front of the store, the same key
// sent again answers the same hold, and the key with other seats is
// refused, with nothing held.
func TestHolds_RequestKey(t *testing.T) {
	e := newEnvWith(t, 1, nil, app.Deps{Layers: layers.Off(layers.Idempotency)})
	r := e.r(0)
	u := mustCreateUser(t, r, "keyed")
	ev := mustCreateEvent(t, r, "keyed", 2, 5)
	key := newKey()

	first := holdSeats(t, r, u.Token, ev.ID, key, "A1", "A2")
	wantStatus(t, first, http.StatusCreated)
	again := holdSeats(t, r, u.Token, ev.ID, key, "A2", "A1")
	wantStatus(t, again, http.StatusCreated)
	if a, b := decode[seatHold](t, first), decode[seatHold](t, again); a.ID != b.ID || a.ExpiresAt != b.ExpiresAt {
		t.Errorf("the same key answered hold %+v, then %+v: want the same hold", a, b)
	}
	wantProblem(t, holdSeats(t, r, u.Token, ev.ID, key, "B1"), http.StatusUnprocessableEntity, "idempotency_key_reused")
	if n := e.count(t, `SELECT count(*) FROM holds WHERE user_id = $1`, u.ID); n != 1 {
		t.Errorf("%d holds of the user, want 1", n)
	}
	if n := e.count(t, `SELECT count(*) FROM seats WHERE event_id = $1 AND status <> 'available'`, ev.ID); n != 2 {
		t.Errorf("%d seats taken, want the hold's 2", n)
	}
}
