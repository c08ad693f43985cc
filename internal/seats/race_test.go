package seats_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/shop-example/shop/harness/apptest"
	"github.com/shop-example/shop/harness/testenv"
	"github.com/shop-example/shop/internal/seats"
)

// randomSeats picks 1 to most distinct seats of a rows × perRow event.
func randomSeats(rng *rand.Rand, rows, perRow, most int) []string {
	n := 1 + rng.IntN(most)
	picked := map[string]bool{}
	var out []string
	for len(out) < n {
		l := seats.Label(rng.IntN(rows), 1+rng.IntN(perRow))
		if !picked[l] {
			picked[l] = true
			out = append(out, l)
		}
	}
	return out
}

// holdLife is when a successful hold held its seats: from the call of
// its request to the return of the release that freed them (never, for a
// hold kept or confirmed).
type holdLife struct {
	seats          []string
	from, released time.Duration
}

// refusal is a seat_unavailable answer and when its request ran.
type refusal struct {
	seats     []string
	call, ret time.Duration
}

// TestSeats_RaceOverlappingHolds: 64 clients over two replicas hold
// random overlapping sets of 1–4 seats of a 20-seat event, then confirm
// or release or keep what they got, three rounds each, with each lock
// strategy of SHOP_SEAT_LOCK. No seat is in two active holds or two
// bookings, the event's counts equal the rows, and every seat a 409
// names was held by a hold alive at some point while that request ran.
func TestSeats_RaceOverlappingHolds(t *testing.T) {
	for _, strategy := range []string{"redsync", "advisory", "none"} {
		t.Run(strategy, func(t *testing.T) { raceOverlappingHolds(t, strategy) })
	}
}

func raceOverlappingHolds(t *testing.T, strategy string) {
	const clients, rounds, rows, perRow = 64, 3, 2, 10
	e := apptest.New(t, 2, map[string]string{"SHOP_SEAT_LOCK": strategy})
	ev := apptest.MustCreateEvent(t, e.R(0), "race", rows, perRow)
	users := testenv.Users(t, e.DB, clients)
	e.Warm(t, 32)
	start := time.Now()
	var mu sync.Mutex
	var lives []holdLife
	var refusals []refusal
	testenv.Together(clients, func(i int) {
		rng := rand.New(rand.NewPCG(uint64(i), 7))
		u := users[i]
		for round := range rounds {
			want := randomSeats(rng, rows, perRow, 4)
			call := time.Since(start)
			res := apptest.UntilNotBusy(t, func(attempt int) apptest.Response {
				return apptest.HoldSeats(t, e.R(i+attempt), u.Token, ev.ID, fmt.Sprintf("%s-%d", u.ID, round), want...)
			})
			ret := time.Since(start)
			switch {
			case res.Status == http.StatusCreated:
				h := apptest.Decode[apptest.SeatHold](t, res)
				life := holdLife{seats: h.Seats, from: call, released: time.Duration(1 << 62)}
				switch rng.IntN(3) {
				case 0:
					apptest.WantStatus(t, apptest.ConfirmHold(t, e.R(i), u.Token, h.ID, apptest.NewKey()), http.StatusCreated)
				case 1:
					apptest.WantStatus(t, apptest.ReleaseHold(t, e.R(i+1), u.Token, h.ID), http.StatusOK)
					life.released = time.Since(start)
				}
				mu.Lock()
				lives = append(lives, life)
				mu.Unlock()
			case res.Code() == "seat_unavailable":
				p := apptest.Decode[apptest.SeatProblem](t, res)
				mu.Lock()
				refusals = append(refusals, refusal{seats: p.Seats, call: call, ret: ret})
				mu.Unlock()
			default:
				t.Errorf("hold %v: %s", want, res)
			}
		}
	})
	s := readSeatRows(t, e, ev.ID)
	got := apptest.MustGetEvent(t, e.R(1), ev.ID)
	if v := s.violations(); v != 0 {
		t.Errorf("seat rows break the invariant (%d): %+v", v, s)
	}
	if m := miscounted(t, e, ev.ID); m != 0 {
		t.Errorf("%d users' counted rows disagree with their active holds", m)
	}
	if got.Available != s.available || got.Held != s.held || got.Booked != s.booked || got.Available+got.Held+got.Booked != rows*perRow {
		t.Errorf("GET event %+v, rows %+v", got, s)
	}
	// Every seat a refusal names was held while the refused request ran.
	for _, r := range refusals {
		if len(r.seats) == 0 {
			t.Errorf("a seat_unavailable named no seat")
		}
		for _, seat := range r.seats {
			held := false
			for _, l := range lives {
				for _, ls := range l.seats {
					held = held || (ls == seat && l.from < r.ret && l.released > r.call)
				}
			}
			if !held {
				t.Errorf("a refusal at [%v, %v] names %s, which no hold held then", r.call, r.ret, seat)
			}
		}
	}
	t.Logf("%d holds, %d refusals; seats %+v", len(lives), len(refusals), s)
	if len(refusals) == 0 || len(lives) == 0 {
		t.Errorf("the race made %d holds and %d refusals: it did not race", len(lives), len(refusals))
	}
}

// mustHoldMany makes one single-seat hold per user on a fresh event.
func mustHoldMany(t *testing.T, e *apptest.Env, users []testenv.User) (apptest.Event, []apptest.SeatHold) {
	t.Helper()
	ev := apptest.MustCreateEvent(t, e.R(0), "many", 1, len(users))
	holds := make([]apptest.SeatHold, len(users))
	for i, u := range users {
		res := apptest.HoldSeats(t, e.R(i), u.Token, ev.ID, apptest.NewKey(), seats.Label(0, i+1))
		apptest.WantStatus(t, res, http.StatusCreated)
		holds[i] = apptest.Decode[apptest.SeatHold](t, res)
	}
	return ev, holds
}

// TestSeats_DuplicatedConfirms: each hold is confirmed 6 times at once
// over two replicas, 4 times with one key and twice with keys of their
// own. Each hold gets one booking, and every 201 names it.
func TestSeats_DuplicatedConfirms(t *testing.T) {
	const n, sameKey, ownKeys = 20, 4, 2
	e := apptest.New(t, 2, nil)
	users := testenv.Users(t, e.DB, n)
	ev, holds := mustHoldMany(t, e, users)
	keys := make([]string, n)
	for i := range keys {
		keys[i] = apptest.NewKey()
	}
	e.Warm(t, 32)
	var mu sync.Mutex
	seen := map[string]map[string]bool{}
	testenv.Together(n*(sameKey+ownKeys), func(i int) {
		h, click := i%n, i/n
		key := keys[h]
		if click >= sameKey {
			key = apptest.NewKey()
		}
		res := apptest.UntilNotBusy(t, func(attempt int) apptest.Response {
			return apptest.ConfirmHold(t, e.R(i+attempt), users[h].Token, holds[h].ID, key)
		})
		if res.Status != http.StatusCreated {
			t.Errorf("confirm: %s", res)
			return
		}
		b := apptest.Decode[apptest.Booking](t, res)
		mu.Lock()
		if seen[holds[h].ID] == nil {
			seen[holds[h].ID] = map[string]bool{}
		}
		seen[holds[h].ID][b.ID] = true
		mu.Unlock()
	})
	for id, bs := range seen {
		if len(bs) != 1 {
			t.Errorf("hold %s was answered with %d bookings", id, len(bs))
		}
	}
	if got := e.Count(t, `SELECT count(*)::int FROM bookings WHERE event_id = $1`, ev.ID); got != n {
		t.Errorf("%d bookings, want %d", got, n)
	}
	if s := readSeatRows(t, e, ev.ID); s.violations() != 0 || s.booked != n {
		t.Errorf("seat rows: %+v", s)
	}
	if m := miscounted(t, e, ev.ID); m != 0 {
		t.Errorf("%d users' counted rows disagree with their active holds", m)
	}
}

// TestSeats_ConfirmRacesExpiry: holds are confirmed while the expiry
// job, by a clock already past their end, expires them. Each hold ends
// one way: confirmed with a booking and a 201, or expired with its seats
// free and a hold_expired; never both, never neither.
func TestSeats_ConfirmRacesExpiry(t *testing.T) {
	const n = 40
	e := apptest.New(t, 2, nil)
	users := testenv.Users(t, e.DB, n)
	ev, holds := mustHoldMany(t, e, users)
	store := seats.NewStore(e.DB)
	late := e.Clock.Now().Add(e.Cfg.SeatHoldTTL + time.Minute)
	e.Warm(t, 32)
	answers := make([]apptest.Response, n)
	testenv.Together(n+4, func(i int) {
		if i >= n {
			// Four expiry jobs, as in four replicas, in small batches.
			for {
				got, err := store.ExpireDue(context.Background(), late, 7)
				if err != nil {
					t.Errorf("expire: %v", err)
				}
				if err != nil || got < 7 {
					break
				}
			}
			return
		}
		answers[i] = apptest.UntilNotBusy(t, func(attempt int) apptest.Response {
			return apptest.ConfirmHold(t, e.R(i+attempt), users[i].Token, holds[i].ID, apptest.NewKey())
		})
	})
	// Whatever the jobs left, a last pass expires.
	if _, err := store.ExpireDue(context.Background(), late, 1000); err != nil {
		t.Fatal(err)
	}
	confirmed := 0
	for i, h := range holds {
		var status string
		var bookings int
		if err := e.DB.QueryRow(context.Background(), `SELECT status, (SELECT count(*) FROM bookings WHERE hold_id = $1)::int FROM holds WHERE id = $1`,
			h.ID).Scan(&status, &bookings); err != nil {
			t.Fatal(err)
		}
		switch {
		case answers[i].Status == http.StatusCreated && status == "confirmed" && bookings == 1:
			confirmed++
		case answers[i].Code() == "hold_expired" && status == "expired" && bookings == 0:
		default:
			t.Errorf("hold %d: confirm answered %s, hold %s with %d bookings", i, answers[i], status, bookings)
		}
	}
	if s := readSeatRows(t, e, ev.ID); s.violations() != 0 || s.held != 0 || s.booked != confirmed {
		t.Errorf("seat rows: %+v, %d confirmed", s, confirmed)
	}
	if m := miscounted(t, e, ev.ID); m != 0 {
		t.Errorf("%d users' counted rows disagree with their active holds", m)
	}
	t.Logf("%d of %d confirms won against the expiry", confirmed, n)
}

// TestSeats_ReleaseRacesConfirm: each hold is released and confirmed at
// once, over two replicas. One wins: confirmed (201, and the release
// refused with invalid_state) or released (200, and the confirm refused
// with invalid_state); the seats agree.
func TestSeats_ReleaseRacesConfirm(t *testing.T) {
	const n = 30
	e := apptest.New(t, 2, nil)
	users := testenv.Users(t, e.DB, n)
	ev, holds := mustHoldMany(t, e, users)
	e.Warm(t, 32)
	confirms, releases := make([]apptest.Response, n), make([]apptest.Response, n)
	testenv.Together(2*n, func(i int) {
		h := i % n
		if i < n {
			confirms[h] = apptest.UntilNotBusy(t, func(attempt int) apptest.Response {
				return apptest.ConfirmHold(t, e.R(i+attempt), users[h].Token, holds[h].ID, apptest.NewKey())
			})
		} else {
			releases[h] = apptest.UntilNotBusy(t, func(attempt int) apptest.Response {
				return apptest.ReleaseHold(t, e.R(i+attempt), users[h].Token, holds[h].ID)
			})
		}
	})
	confirmed := 0
	for h := range holds {
		c, r := confirms[h], releases[h]
		switch {
		case c.Status == http.StatusCreated && r.Code() == "invalid_state":
			confirmed++
		case r.Status == http.StatusOK && c.Code() == "invalid_state":
		default:
			t.Errorf("hold %d: confirm %s, release %s", h, c, r)
		}
	}
	if s := readSeatRows(t, e, ev.ID); s.violations() != 0 || s.held != 0 || s.booked != confirmed {
		t.Errorf("seat rows: %+v, %d confirmed", s, confirmed)
	}
	if m := miscounted(t, e, ev.ID); m != 0 {
		t.Errorf("%d users' counted rows disagree with their active holds", m)
	}
	t.Logf("%d of %d confirms won against the release", confirmed, n)
}
