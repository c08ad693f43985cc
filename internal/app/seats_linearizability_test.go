package app_test

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/shop-example/shop/internal/platform/layers"
	"github.com/shop-example/shop/internal/platform/testenv"
	"github.com/shop-example/shop/internal/seats"
)

// The linearizability check of the seat map: clients over two replicas
// hold, release, confirm and read seats, every operation's call and
// return time and result are recorded, and porcupine checks that some
// order of them, each taking effect between its call and its return,
// explains every result under a sequential model of the seat map.
//
// The model's state is one event's seat map: per seat, 0 (available),
// the model number k of the hold holding it, or k|booked. A history is
// checked per event (a hold spans seats of one event, so events are
// independent). The hold TTL is the default 5 minutes: nothing expires
// while the history is recorded, so expiry is not in the model.

// EnvLinearizabilityLarge, set to 1, runs the larger check.
const EnvLinearizabilityLarge = "SHOP_SEATS_LINEARIZABILITY_LARGE"

type seatOpKind uint8

const (
	opHold seatOpKind = iota
	opRelease
	opConfirm
	opRead
)

// booked marks a seat booked by hold k: k|booked.
const booked = 0x8000

type seatOpIn struct {
	event int
	kind  seatOpKind
	hold  uint16 // the hold's model number
	seats []int  // the hold's seats, as indexes into the seat map
}

type seatOpOut struct {
	ok    bool   // 201 or 200
	code  string // the refusal's code otherwise
	taken []int  // the seats a seat_unavailable named
	read  string // a read's seat map: one of a, h, b per seat
}

// seatMapModel is the sequential specification of one event's seat map
// of n seats.
func seatMapModel(n int) porcupine.Model {
	get := func(st string, i int) uint16 { return binary.BigEndian.Uint16([]byte(st[2*i:])) }
	set := func(st string, seats []int, v uint16) string {
		b := []byte(st)
		for _, i := range seats {
			binary.BigEndian.PutUint16(b[2*i:], v)
		}
		return string(b)
	}
	all := func(st string, seats []int, v uint16) bool {
		for _, i := range seats {
			if get(st, i) != v {
				return false
			}
		}
		return true
	}
	none := func(st string, seats []int, vs ...uint16) bool {
		for _, i := range seats {
			for _, v := range vs {
				if get(st, i) == v {
					return false
				}
			}
		}
		return true
	}
	return porcupine.Model{
		Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
			by := map[int][]porcupine.Operation{}
			for _, op := range h {
				e := op.Input.(seatOpIn).event
				by[e] = append(by[e], op)
			}
			var out [][]porcupine.Operation
			for _, ops := range by {
				out = append(out, ops)
			}
			return out
		},
		Init: func() any { return strings.Repeat("\x00", 2*n) },
		Hash: func(st any) uint64 {
			h := fnv.New64a()
			h.Write([]byte(st.(string)))
			return h.Sum64()
		},
		Step: func(state, input, output any) (bool, any) {
			st, in, out := state.(string), input.(seatOpIn), output.(seatOpOut)
			k := in.hold
			switch in.kind {
			case opHold:
				if out.ok {
					return all(st, in.seats, 0), set(st, in.seats, k)
				}
				if out.code != "seat_unavailable" {
					return true, st // refused before anything was done
				}
				// The refusal names exactly the requested seats taken.
				taken := map[int]bool{}
				for _, i := range out.taken {
					taken[i] = true
				}
				for _, i := range in.seats {
					if taken[i] != (get(st, i) != 0) {
						return false, st
					}
				}
				return len(out.taken) > 0, st
			case opConfirm:
				switch {
				case out.ok && all(st, in.seats, k):
					return true, set(st, in.seats, k|booked)
				case out.ok:
					return all(st, in.seats, k|booked), st
				default:
					return none(st, in.seats, k, k|booked), st
				}
			case opRelease:
				switch {
				case out.ok && all(st, in.seats, k):
					return true, set(st, in.seats, 0)
				case out.ok:
					return none(st, in.seats, k, k|booked), st
				default:
					return all(st, in.seats, k|booked), st
				}
			default: // opRead
				for i := range n {
					want := byte('a')
					switch v := get(st, i); {
					case v&booked != 0:
						want = 'b'
					case v != 0:
						want = 'h'
					}
					if out.read[i] != want {
						return false, st
					}
				}
				return true, st
			}
		},
	}
}

// linearizabilityRun records a history of clients × ops operations on
// events events of rows × perRow seats, over e's replicas.
func linearizabilityRun(t *testing.T, e *env, clients, ops, events, rows, perRow int) []porcupine.Operation {
	t.Helper()
	n := rows * perRow
	evs := make([]event, events)
	for i := range evs {
		evs[i] = mustCreateEvent(t, e.r(0), fmt.Sprintf("lin-%d", i), rows, perRow)
	}
	users := testenv.Users(t, e.db, clients)
	index := func(label string) int {
		row, num, err := seats.ParseSeat(label)
		if err != nil {
			t.Errorf("seat %q: %v", label, err)
		}
		return row*perRow + num - 1
	}
	e.warm(t, 32)
	var next atomic.Uint32
	var mu sync.Mutex
	var history []porcupine.Operation
	base := time.Now()
	testenv.Together(clients, func(c int) {
		rng := rand.New(rand.NewPCG(uint64(c), 23))
		u, ev := users[c], c%events
		type mine struct {
			k     uint16
			id    string
			seats []int
		}
		var active []mine
		for range ops {
			in := seatOpIn{event: ev}
			var out seatOpOut
			call := time.Since(base)
			var res response
			pick := rng.IntN(100)
			switch {
			case len(active) > 0 && pick < 35:
				m := active[rng.IntN(len(active))]
				in.hold, in.seats = m.k, m.seats
				if pick < 10 {
					in.kind = opConfirm
					key := newKey()
					res = untilNotBusy(t, func(a int) response { return confirmHold(t, e.r(c+a), u.Token, m.id, key) })
				} else {
					in.kind = opRelease
					res = untilNotBusy(t, func(a int) response { return releaseHold(t, e.r(c+a), u.Token, m.id) })
				}
			case pick < 80:
				in.kind, in.hold = opHold, uint16(next.Add(1))
				labels := randomSeats(rng, rows, perRow, 3)
				for _, l := range labels {
					in.seats = append(in.seats, index(l))
				}
				key := newKey()
				res = untilNotBusy(t, func(a int) response { return holdSeats(t, e.r(c+a), u.Token, evs[ev].ID, key, labels...) })
				if res.Status == http.StatusCreated {
					active = append(active, mine{k: in.hold, id: decode[seatHold](t, res).ID, seats: in.seats})
				}
			default:
				in.kind = opRead
				res = e.r(c).do(t, http.MethodGet, "/v1/events/"+evs[ev].ID+"/seats", "", nil)
				var b strings.Builder
				for _, s := range decode[page[seatItem]](t, res).Items {
					b.WriteByte(s.Status[0])
				}
				out.read = b.String()
				if len(out.read) != n {
					t.Errorf("seat map of %d seats, want %d", len(out.read), n)
					return
				}
			}
			ret := time.Since(base)
			out.ok = res.Status == http.StatusOK || res.Status == http.StatusCreated
			out.code = res.code()
			if out.code == "seat_unavailable" {
				for _, l := range decode[seatProblem](t, res).Seats {
					out.taken = append(out.taken, index(l))
				}
			}
			if !out.ok && out.code != "seat_unavailable" && out.code != "invalid_state" && out.code != "resource_busy" {
				t.Errorf("op %d: %s", in.kind, res)
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
	res := porcupine.CheckOperationsTimeout(seatMapModel(seatsPerEvent), history, time.Minute)
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
	e := newEnv(t, 2, nil)
	history := linearizabilityRun(t, e, clients, ops, events, 2, 4)
	if res := checkHistory(t, history, 8); res != porcupine.Ok {
		t.Fatalf("the seat map history is %s, want Ok", res)
	}
}

// TestSeats_LinearizableBreaksWithoutLayers shows the check can fail:
// with the lock, the version check and the constraints off, holds read
// the same seats available and both write them held, and porcupine finds
// no order of the operations that explains the history (Illegal).
func TestSeats_LinearizableBreaksWithoutLayers(t *testing.T) {
	if testing.Short() {
		t.Skip("races real PostgreSQL and Redis")
	}
	row := testenv.Row{Layers: layers.Off(layers.Lock, layers.Version, layers.Constraint)}
	for attempt := 1; attempt <= 3; attempt++ {
		e := ablationEnv(t, row, 0,
			`DROP INDEX hold_seats_one_active_per_seat`,
			`ALTER TABLE tickets DROP CONSTRAINT tickets_one_per_seat`,
			`ALTER TABLE bookings DROP CONSTRAINT bookings_one_per_hold`)
		history := linearizabilityRun(t, e, 32, 12, 2, 2, 4)
		if res := checkHistory(t, history, 8); res == porcupine.Illegal {
			return
		}
	}
	t.Fatal("with the lock, the version check and the constraints off, three histories were all linearizable: the check shows nothing")
}
