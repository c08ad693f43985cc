package app_test

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"testing"

	"github.com/shop-example/shop/internal/platform/layers"
	"github.com/shop-example/shop/internal/platform/testenv"
)

// TestAblation_HoldSeats is the seat flow's ablation matrix
// (docs/ABLATION.md): clients over two replicas each hold a random set of
// 1–4 seats of a small event, sending the hold twice at once with one
// Idempotency-Key, and confirm what they got. Invariant: no seat in two
// active holds or two bookings, the seats' states equal the hold and
// ticket rows, and one hold per request.
func TestAblation_HoldSeats(t *testing.T) {
	const clients, copies, rows, perRow = 48, 2, 2, 8
	rowsOf := []testenv.Row{
		{Why: "every layer"},
		{Layers: off(idem), Why: "a request's copies want the same seats: the lock serialises them and the second finds the seats held"},
		{Layers: off(lck), Why: "the version check: of two holds that read the same available seat, one writes it and the other writes nothing and re-reads it held"},
		{Layers: off(state), Why: "the conditional write: a seat is written only while it is available at the version read, so a held or booked seat lands on zero rows (and hold_seats_one_active_per_seat stands behind it)"},
		{Layers: off(version), Why: "the lock per seat serialises overlapping holds, and each reads the one before's seats"},
		{Layers: off(constraint), Why: "the state rule on the seats read, written at their version"},
		{Layers: off(layers.Database...), Breaks: true,
			Why: "with no state rule a hold takes seats another holds, and no index refuses it: two holds, then two tickets, on one seat"},
		{Layers: off(lck, constraint), Why: "the version check alone stops the read-then-write race"},
		{Layers: off(lck, version, constraint), Breaks: true,
			Why: "the race the version check exists for: holds read the same seats available before any of them commits, and each writes them held"},
	}
	testenv.Matrix(t, "hold_seats",
		fmt.Sprintf("%d clients over two replicas hold random overlapping sets of 1–4 seats of a %d-seat event, each sending its hold %d times at once with one Idempotency-Key, and confirm what they got. Invariant: no seat in two active holds or two bookings, the seats' states equal the hold and ticket rows, one hold per request.", clients, rows*perRow, copies),
		rowsOf, func(t *testing.T, row testenv.Row) testenv.Outcome {
			e := ablationEnv(t, row, 0,
				`DROP INDEX hold_seats_one_active_per_seat`,
				`ALTER TABLE tickets DROP CONSTRAINT tickets_one_per_seat`,
				`ALTER TABLE bookings DROP CONSTRAINT bookings_one_per_hold`)
			ev := mustCreateEvent(t, e.r(0), "ablation", rows, perRow)
			users := testenv.Users(t, e.db, clients)
			want := make([][]string, clients)
			for i := range want {
				want[i] = randomSeats(rand.New(rand.NewPCG(uint64(i), 11)), rows, perRow, 4)
			}
			e.warm(t, 32)
			testenv.Together(clients*copies, func(i int) {
				c := i / copies
				u := users[c]
				res := retried(func(attempt int) response {
					return holdSeats(t, e.r(i+attempt), u.Token, ev.ID, "hold-"+u.ID, want[c]...)
				})
				switch {
				case res.Status == http.StatusCreated:
				case res.Status == http.StatusConflict, res.code() == "unavailable":
					return
				default:
					t.Errorf("hold: %s", res)
					return
				}
				h := decode[seatHold](t, res)
				res = retried(func(attempt int) response {
					return confirmHold(t, e.r(i+attempt), u.Token, h.ID, "confirm-"+h.ID)
				})
				if res.Status >= 500 && res.code() != "unavailable" {
					t.Errorf("confirm: %s", res)
				}
			})
			s := e.seatRows(t, ev.ID)
			twice := e.count(t, `SELECT (count(*) - count(DISTINCT user_id))::int FROM holds WHERE event_id = $1 AND status IN ('active', 'confirmed')`, ev.ID)
			t.Logf("seats %+v, requests with two holds %d", s, twice)
			return testenv.Outcome{Violations: s.violations() + twice,
				Unit: "seats double held or booked, or requests with two holds", Of: clients, OfUnit: "clients"}
		})
}
