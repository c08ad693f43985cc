package seats_test

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/shop-example/shop/harness/ablation"
	"github.com/shop-example/shop/harness/apptest"
	"github.com/shop-example/shop/harness/testenv"
	"github.com/shop-example/shop/internal/app"
	"github.com/shop-example/shop/internal/platform/layers"
	"github.com/shop-example/shop/internal/seats"
	"github.com/shop-example/shop/internal/seats/seatcheck"
)

// The linearizability check of the seat map: clients over two replicas
// hold, release, confirm and read seats, every operation's call and
// return time and result are recorded, and porcupine checks that some
// order of them, each taking effect between its call and its return,
// explains every result under a sequential model of the seat map.
//
// The model is package seatcheck's. The hold TTL is the default 5
// minutes: nothing expires while the history is recorded, so expiry is
// not in the model.

// EnvLinearizabilityLarge, set to 1, runs the larger check.
const EnvLinearizabilityLarge = "SHOP_SEATS_LINEARIZABILITY_LARGE"

// linearizabilityRun records a history of clients × ops operations on
// events events of rows × perRow seats, over e's replicas.
func linearizabilityRun(t *testing.T, e *apptest.Env, clients, ops, events, rows, perRow int) []porcupine.Operation {
	t.Helper()
	n := rows * perRow
	evs := make([]apptest.Event, events)
	for i := range evs {
		evs[i] = apptest.MustCreateEvent(t, e.R(0), fmt.Sprintf("lin-%d", i), rows, perRow)
	}
	users := testenv.Users(t, e.DB, clients)
	index := func(label string) int {
		row, num, err := seats.ParseSeat(label)
		if err != nil {
			t.Errorf("seat %q: %v", label, err)
		}
		return row*perRow + num - 1
	}
	e.Warm(t, 32)
	var next atomic.Uint32
	var mu sync.Mutex
	var history []porcupine.Operation
	base := time.Now()
	testenv.Together(clients, func(c int) {
		rng := rand.New(rand.NewPCG(uint64(c), 23))
		u, ev := users[c], c%events
		type mine struct {
			k     uint32
			id    string
			seats []int
		}
		var active []mine
		for range ops {
			in := seatcheck.Input{Event: ev}
			var out seatcheck.Output
			call := time.Since(base)
			var res apptest.Response
			pick := rng.IntN(100)
			switch {
			case len(active) > 0 && pick < 35:
				m := active[rng.IntN(len(active))]
				in.Hold, in.Seats = m.k, m.seats
				if pick < 10 {
					in.Kind = seatcheck.Confirm
					key := apptest.NewKey()
					res = apptest.UntilNotBusy(t, func(a int) apptest.Response { return apptest.ConfirmHold(t, e.R(c+a), u.Token, m.id, key) })
				} else {
					in.Kind = seatcheck.Release
					res = apptest.UntilNotBusy(t, func(a int) apptest.Response { return apptest.ReleaseHold(t, e.R(c+a), u.Token, m.id) })
				}
			case pick < 80:
				in.Kind, in.Hold = seatcheck.Hold, next.Add(1)
				labels := randomSeats(rng, rows, perRow, 3)
				for _, l := range labels {
					in.Seats = append(in.Seats, index(l))
				}
				key := apptest.NewKey()
				res = apptest.UntilNotBusy(t, func(a int) apptest.Response {
					return apptest.HoldSeats(t, e.R(c+a), u.Token, evs[ev].ID, key, labels...)
				})
				if res.Status == http.StatusCreated {
					active = append(active, mine{k: in.Hold, id: apptest.Decode[apptest.SeatHold](t, res).ID, seats: in.Seats})
				}
			default:
				in.Kind = seatcheck.Read
				res = e.R(c).Do(t, http.MethodGet, "/v1/events/"+evs[ev].ID+"/seats", "", nil)
				var b strings.Builder
				for _, s := range apptest.Decode[apptest.Page[apptest.SeatItem]](t, res).Items {
					b.WriteByte(s.Status[0])
				}
				out.Map = b.String()
				if len(out.Map) != n {
					t.Errorf("seat map of %d seats, want %d", len(out.Map), n)
					return
				}
			}
			ret := time.Since(base)
			out.OK = res.Status == http.StatusOK || res.Status == http.StatusCreated
			out.Code = res.Code()
			if out.Code == "seat_unavailable" {
				for _, l := range apptest.Decode[apptest.SeatProblem](t, res).Seats {
					out.Taken = append(out.Taken, index(l))
				}
			}
			// hold_limit_reached: a client that kept five holds, or more
			// than ten seats, of its event; refused before anything was
			// done, as the model takes any refusal but seat_unavailable.
			if !out.OK && out.Code != "seat_unavailable" && out.Code != "invalid_state" && out.Code != "resource_busy" && out.Code != "hold_limit_reached" {
				t.Errorf("op %d: %s", in.Kind, res)
			}
			mu.Lock()
			history = append(history, porcupine.Operation{ClientId: c, Input: in, Output: out, Call: int64(call), Return: int64(ret)})
			mu.Unlock()
		}
	})
	return history
}

// checkHistory checks a history against the seat map model.
func checkHistory(t *testing.T, history []porcupine.Operation, seatsPerEvent int) porcupine.CheckResult {
	t.Helper()
	start := time.Now()
	res := seatcheck.Check(history, seatsPerEvent, time.Minute)
	t.Logf("porcupine: %s for %d operations in %v", res, len(history), time.Since(start))
	return res
}

// TestSeats_Linearizable records 32 clients' holds, releases, confirms
// and reads of small events over two replicas, and checks the history
// with porcupine. SHOP_SEATS_LINEARIZABILITY_LARGE=1 runs 64 clients and
// many more operations.
func TestSeats_Linearizable(t *testing.T) {
	if testing.Short() {
		t.Skip("races real PostgreSQL and Redis")
	}
	clients, ops, events := 32, 12, 4
	if os.Getenv(EnvLinearizabilityLarge) == "1" {
		clients, ops, events = 64, 60, 8
	}
	e := apptest.New(t, 2, nil)
	history := linearizabilityRun(t, e, clients, ops, events, 2, 4)
	if res := checkHistory(t, history, 8); res != porcupine.Ok {
		t.Fatalf("the seat map history is %s, want Ok", res)
	}
}

// TestSeats_LinearizableBreaksWithoutLayers shows the check can fail:
// with the lock, the state rule, the version check and the constraints
// off, holds read the same seats available and both write them held, and
// porcupine finds no order of the operations that explains the history
// (Illegal).
func TestSeats_LinearizableBreaksWithoutLayers(t *testing.T) {
	if testing.Short() {
		t.Skip("races real PostgreSQL and Redis")
	}
	row := ablation.Row{Layers: layers.Off(layers.Lock, layers.State, layers.Version, layers.Constraint)}
	for attempt := 1; attempt <= 3; attempt++ {
		e := apptest.NewAblation(t, row, app.Deps{},
			seats.ConstraintOneActiveHold, seats.ConstraintOneTicket, seats.ConstraintOneBooking, seats.ConstraintWithinCaps)
		history := linearizabilityRun(t, e, 32, 12, 2, 2, 4)
		if res := checkHistory(t, history, 8); res == porcupine.Illegal {
			return
		}
	}
	t.Fatal("with the lock, the state rule, the version check and the constraints off, three histories were all linearizable: the check shows nothing")
}
