package seats_test

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"testing"

	"github.com/shop-example/shop/harness/ablation"
	"github.com/shop-example/shop/harness/apptest"
	"github.com/shop-example/shop/harness/testenv"
	"github.com/shop-example/shop/internal/app"
	"github.com/shop-example/shop/internal/platform/layers"
	"github.com/shop-example/shop/internal/seats"
)

// TestAblation_HoldSeats is the seat flow's ablation matrix
// (docs/ABLATION.md): clients over two replicas each hold a random set of
// 1–4 seats of a small event, sending the hold twice at once with one
// Idempotency-Key, and confirm what they got. Invariant: no seat in two
// active holds or two bookings, the seats' states equal the hold and
// ticket rows, and one hold per request.
func TestAblation_HoldSeats(t *testing.T) {
	const clients, copies, rows, perRow = 48, 2, 2, 8
	testenv.Matrix(t, ablation.HoldSeats(), ablation.Scenario{
		Text:         fmt.Sprintf("%d clients over two replicas hold random overlapping sets of 1–4 seats of a %d-seat event, each sending its hold %d times at once with one Idempotency-Key, and confirm what they got. Invariant: no seat in two active holds or two bookings, the seats' states equal the hold and ticket rows, one hold per request.", clients, rows*perRow, copies),
		Counted:      fmt.Sprintf("seats double held or booked, seats whose state disagrees with the holds and tickets, and requests with two holds, of %d clients", clients),
		Progress:     "holds granted and confirmed",
		ProgressWant: 1,
	}, func(t *testing.T, row ablation.Row, probe *layers.Probe) testenv.Outcome {
		e := apptest.NewAblation(t, row, app.Deps{},
			seats.ConstraintOneActiveHold, seats.ConstraintOneTicket, seats.ConstraintOneBooking, seats.ConstraintWithinCaps)
		ev := apptest.MustCreateEvent(t, e.R(0), "ablation", rows, perRow)
		users := testenv.Users(t, e.DB, clients)
		want := make([][]string, clients)
		for i := range want {
			want[i] = randomSeats(rand.New(rand.NewPCG(uint64(i), 11)), rows, perRow, 4)
		}
		e.Warm(t, 32)
		probe.Reset()
		testenv.Together(clients*copies, func(i int) {
			c := i / copies
			u := users[c]
			res := apptest.Retried(func(attempt int) apptest.Response {
				return apptest.HoldSeats(t, e.R(i+attempt), u.Token, ev.ID, "hold-"+u.ID, want[c]...)
			})
			switch {
			case res.Status == http.StatusCreated:
			case res.Code() == "seat_unavailable", res.Code() == "unavailable", res.Code() == "resource_busy",
				res.Code() == "request_in_progress": // its copy is still holding, past the client's patience
				return // refused: the progress below counts what was granted
			default:
				t.Errorf("hold: %s", res)
				return
			}
			h := apptest.Decode[apptest.SeatHold](t, res)
			res = apptest.Retried(func(attempt int) apptest.Response {
				return apptest.ConfirmHold(t, e.R(i+attempt), u.Token, h.ID, "confirm-"+h.ID)
			})
			if res.Status >= 500 && res.Code() != "unavailable" {
				t.Errorf("confirm: %s", res)
			}
		})
		s := readSeatRows(t, e, ev.ID)
		twice := e.Count(t, `SELECT (count(*) - count(DISTINCT user_id))::int FROM holds WHERE event_id = $1 AND status IN ('active', 'confirmed')`, ev.ID)
		confirmed := e.Count(t, `SELECT count(*)::int FROM holds WHERE event_id = $1 AND status = 'confirmed'`, ev.ID)
		t.Logf("seats %+v, requests with two holds %d, holds confirmed %d", s, twice, confirmed)
		return testenv.Outcome{Violations: s.violations() + twice, Progress: confirmed}
	})
}
