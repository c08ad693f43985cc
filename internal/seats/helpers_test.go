package seats_test

// The seat flow's tests over HTTP: replicas of the whole service
// (package apptest), raced, and checked on the database afterwards.

import (
	"context"
	"testing"

	"github.com/shop-example/shop/harness/apptest"
	"github.com/shop-example/shop/harness/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

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

func readSeatRows(t testing.TB, e *apptest.Env, eventID string) seatRows {
	t.Helper()
	var s seatRows
	err := e.DB.QueryRow(context.Background(), `SELECT
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

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}

// miscounted counts the users whose counted row of the event (holdings,
// what the caps are checked against) disagrees with their active holds.
func miscounted(t testing.TB, e *apptest.Env, eventID string) int {
	t.Helper()
	return e.Count(t, `SELECT count(*)::int FROM
		(SELECT user_id, count(*) AS holds, sum(cardinality(seats)) AS seats
			FROM holds WHERE event_id = $1 AND status = 'active' GROUP BY user_id) AS active
		FULL JOIN (SELECT user_id, holds, seats FROM holdings
			WHERE event_id = $1 AND (holds <> 0 OR seats <> 0)) AS counted USING (user_id)
		WHERE active.holds IS DISTINCT FROM counted.holds OR active.seats IS DISTINCT FROM counted.seats`, eventID)
}
