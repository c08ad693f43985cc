package seats_test

import (
	"net/http"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/shop-example/shop/harness/apptest"
	"github.com/shop-example/shop/harness/variants"
	"github.com/shop-example/shop/internal/app"
)

// GET /v1/holds lists the caller's active holds, newest first, a page at
// a time: not another user's, not a released one, not one whose time is
// up.
func TestHolds_List(t *testing.T) {
	e := apptest.New(t, 1, nil)
	r := e.R(0)
	ann, bob := apptest.MustCreateUser(t, r, "ann"), apptest.MustCreateUser(t, r, "bob")
	ev := apptest.MustCreateEvent(t, r, "listed", 2, 5)

	var ids []string
	for _, seat := range []string{"A1", "A2", "A3"} {
		res := apptest.HoldSeats(t, r, ann.Token, ev.ID, apptest.NewKey(), seat)
		apptest.WantStatus(t, res, http.StatusCreated)
		ids = append(ids, apptest.Decode[apptest.SeatHold](t, res).ID)
		e.Clock.Advance(time.Millisecond) // created_at orders the list
	}
	apptest.WantStatus(t, apptest.ReleaseHold(t, r, ann.Token, ids[2]), http.StatusOK)
	apptest.WantStatus(t, apptest.HoldSeats(t, r, bob.Token, ev.ID, apptest.NewKey(), "B1"), http.StatusCreated)

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
		res := r.Do(t, http.MethodGet, path, ann.Token, nil)
		apptest.WantStatus(t, res, http.StatusOK)
		p := apptest.Decode[apptest.Page[apptest.SeatHold]](t, res)
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

	e.Clock.Advance(e.Cfg.SeatHoldTTL + time.Second)
	res := r.Do(t, http.MethodGet, "/v1/holds", ann.Token, nil)
	apptest.WantStatus(t, res, http.StatusOK)
	if p := apptest.Decode[apptest.Page[apptest.SeatHold]](t, res); len(p.Items) != 0 {
		t.Errorf("after the hold TTL, GET /v1/holds listed %d holds, want none", len(p.Items))
	}
	apptest.WantProblem(t, r.Do(t, http.MethodGet, "/v1/holds?cursor=garbage", ann.Token, nil), http.StatusBadRequest, "invalid_request")
}

// The hold's row carries its request key: with the idempotency layer off,
// so that no stored answer stands in front of the store, the same key
// sent again answers the same hold, and the key with other seats is
// refused, with nothing held.
func TestHolds_RequestKey(t *testing.T) {
	e := apptest.NewWith(t, 1, nil, app.Deps{Variants: app.Variants{Keys: variants.NoKeys(nil)}})
	r := e.R(0)
	u := apptest.MustCreateUser(t, r, "keyed")
	ev := apptest.MustCreateEvent(t, r, "keyed", 2, 5)
	key := apptest.NewKey()

	first := apptest.HoldSeats(t, r, u.Token, ev.ID, key, "A1", "A2")
	apptest.WantStatus(t, first, http.StatusCreated)
	again := apptest.HoldSeats(t, r, u.Token, ev.ID, key, "A2", "A1")
	apptest.WantStatus(t, again, http.StatusCreated)
	if a, b := apptest.Decode[apptest.SeatHold](t, first), apptest.Decode[apptest.SeatHold](t, again); a.ID != b.ID || a.ExpiresAt != b.ExpiresAt {
		t.Errorf("the same key answered hold %+v, then %+v: want the same hold", a, b)
	}
	apptest.WantProblem(t, apptest.HoldSeats(t, r, u.Token, ev.ID, key, "B1"), http.StatusUnprocessableEntity, "idempotency_key_reused")
	if n := e.Count(t, `SELECT count(*) FROM holds WHERE user_id = $1`, u.ID); n != 1 {
		t.Errorf("%d holds of the user, want 1", n)
	}
	if n := e.Count(t, `SELECT count(*) FROM seats WHERE event_id = $1 AND status <> 'available'`, ev.ID); n != 2 {
		t.Errorf("%d seats taken, want the hold's 2", n)
	}
}
