// Package seatcheck is the sequential model of an event's seat map that
// porcupine checks recorded histories of holds, confirms, releases and
// seat-map reads against: the linearizability check of the seats flow,
// shared by the race tests (internal/seats) and the fault suite
// (harness/faults).
//
// The state of one event is its seat map: per seat, 0 (available), the
// number k of the hold holding it, or k|Booked. A history is checked per
// event: a hold spans seats of one event only, so events are independent.
// Hold expiry is not in the model: a checked run keeps holds alive longer
// than itself.
package seatcheck

import (
	"encoding/binary"
	"hash/fnv"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// Kind is what an operation does.
type Kind uint8

// The operations.
const (
	Hold Kind = iota
	Release
	Confirm
	Read
)

// Booked marks a seat booked by hold k: k|Booked.
const Booked = 1 << 31

// Input is one operation as sent.
type Input struct {
	Event int    // which event's history it belongs to
	Kind  Kind   //
	Hold  uint32 // the hold's number, unique in the history (not 0)
	Seats []int  // the hold's seats, as indexes into the seat map
}

// Output is its answer.
type Output struct {
	// Unknown: no definite answer (no answer at all, a 5xx, or the key
	// still in progress elsewhere), so the operation may or may not have
	// taken effect. Its Return must be after every other operation's (as
	// etcd's robustness tests do: "infinity"), so the checker may place
	// it last, which is the same as never.
	Unknown bool
	OK      bool   // 201 or 200
	Code    string // the refusal's code otherwise
	Taken   []int  // the seats a seat_unavailable named
	Map     string // a read's seat map: one of a, h, b per seat
}

// Model is the sequential specification of an event's seat map of n
// seats.
func Model(n int) porcupine.Model {
	get := func(st string, i int) uint32 { return binary.BigEndian.Uint32([]byte(st[4*i:])) }
	set := func(st string, seats []int, v uint32) string {
		b := []byte(st)
		for _, i := range seats {
			binary.BigEndian.PutUint32(b[4*i:], v)
		}
		return string(b)
	}
	all := func(st string, seats []int, v uint32) bool {
		for _, i := range seats {
			if get(st, i) != v {
				return false
			}
		}
		return true
	}
	none := func(st string, seats []int, vs ...uint32) bool {
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
				e := op.Input.(Input).Event
				by[e] = append(by[e], op)
			}
			var out [][]porcupine.Operation
			for _, ops := range by {
				out = append(out, ops)
			}
			return out
		},
		Init: func() any { return strings.Repeat("\x00", 4*n) },
		Hash: func(st any) uint64 {
			h := fnv.New64a()
			h.Write([]byte(st.(string)))
			return h.Sum64()
		},
		Step: func(state, input, output any) (bool, any) {
			st, in, out := state.(string), input.(Input), output.(Output)
			k := in.Hold
			if out.Unknown {
				// Placed here, it took effect if it could have; placed
				// last (its Return is after everything), it never did.
				switch {
				case in.Kind == Hold && all(st, in.Seats, 0):
					return true, set(st, in.Seats, k)
				case in.Kind == Confirm && all(st, in.Seats, k):
					return true, set(st, in.Seats, k|Booked)
				case in.Kind == Release && all(st, in.Seats, k):
					return true, set(st, in.Seats, 0)
				}
				return true, st
			}
			switch in.Kind {
			case Hold:
				if out.OK {
					return all(st, in.Seats, 0), set(st, in.Seats, k)
				}
				if out.Code != "seat_unavailable" {
					return true, st // refused before anything was done
				}
				// The refusal names exactly the requested seats taken.
				taken := map[int]bool{}
				for _, i := range out.Taken {
					taken[i] = true
				}
				for _, i := range in.Seats {
					if taken[i] != (get(st, i) != 0) {
						return false, st
					}
				}
				return len(out.Taken) > 0, st
			case Confirm:
				switch {
				case out.OK && all(st, in.Seats, k):
					return true, set(st, in.Seats, k|Booked)
				case out.OK:
					return all(st, in.Seats, k|Booked), st
				default:
					return none(st, in.Seats, k, k|Booked), st
				}
			case Release:
				switch {
				case out.OK && all(st, in.Seats, k):
					return true, set(st, in.Seats, 0)
				case out.OK:
					return none(st, in.Seats, k, k|Booked), st
				default:
					return all(st, in.Seats, k|Booked), st
				}
			default: // Read
				for i := range n {
					want := byte('a')
					switch v := get(st, i); {
					case v&Booked != 0:
						want = 'b'
					case v != 0:
						want = 'h'
					}
					if out.Map[i] != want {
						return false, st
					}
				}
				return true, st
			}
		},
	}
}

// Check checks a history of events of n seats each within limit; a check
// that runs out of time is Unknown.
func Check(history []porcupine.Operation, n int, limit time.Duration) porcupine.CheckResult {
	return porcupine.CheckOperationsTimeout(Model(n), history, limit)
}

// Unanswered gives every operation whose output is Unknown a Return after
// every other operation's, one second past the latest.
func Unanswered(history []porcupine.Operation) {
	var last int64
	for _, op := range history {
		last = max(last, op.Return, op.Call)
	}
	for i := range history {
		if history[i].Output.(Output).Unknown {
			history[i].Return = last + int64(time.Second)
		}
	}
}
