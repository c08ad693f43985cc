package seatcheck

import (
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

func op(client int, in Input, out Output, call, ret int64) porcupine.Operation {
	return porcupine.Operation{ClientId: client, Input: in, Output: out, Call: call, Return: ret}
}

func hold(k uint32, seats ...int) Input { return Input{Kind: Hold, Hold: k, Seats: seats} }

// The model tells the histories a correct seat map can give from those it
// cannot.
func TestModel(t *testing.T) {
	ok := Output{OK: true}
	unknown := Output{Unknown: true}
	taken := func(seats ...int) Output { return Output{Code: "seat_unavailable", Taken: seats} }
	for _, tc := range []struct {
		name    string
		history []porcupine.Operation
		want    porcupine.CheckResult
	}{
		{"TwoHoldsOfOneSeat", []porcupine.Operation{
			op(0, hold(1, 0, 1), ok, 0, 10),
			op(1, hold(2, 1), ok, 5, 15),
		}, porcupine.Illegal},
		{"HoldThenRefused", []porcupine.Operation{
			op(0, hold(1, 0, 1), ok, 0, 10),
			op(1, hold(2, 1, 2), taken(1), 5, 15),
		}, porcupine.Ok},
		{"RefusalNamesAFreeSeat", []porcupine.Operation{
			op(0, hold(1, 0), ok, 0, 10),
			op(1, hold(2, 0, 1), taken(0, 1), 20, 30),
		}, porcupine.Illegal},
		{"RefusedWithNothingTaken", []porcupine.Operation{
			op(0, hold(1, 0), taken(0), 0, 10),
		}, porcupine.Illegal},
		{"UnknownHoldThatNeverHappened", []porcupine.Operation{
			op(0, hold(1, 0), unknown, 0, 10),
			op(1, hold(2, 0), ok, 20, 30),
		}, porcupine.Ok},
		{"UnknownHoldThatHappened", []porcupine.Operation{
			op(0, hold(1, 0), unknown, 0, 10),
			op(1, hold(2, 0), taken(0), 20, 30),
		}, porcupine.Ok},
		{"ConfirmOfAReleasedHold", []porcupine.Operation{
			op(0, hold(1, 0), ok, 0, 10),
			op(0, Input{Kind: Release, Hold: 1, Seats: []int{0}}, ok, 20, 30),
			op(0, Input{Kind: Confirm, Hold: 1, Seats: []int{0}}, ok, 40, 50),
		}, porcupine.Illegal},
		{"ReadSeesTheBooking", []porcupine.Operation{
			op(0, hold(1, 0), ok, 0, 10),
			op(0, Input{Kind: Confirm, Hold: 1, Seats: []int{0}}, ok, 20, 30),
			op(1, Input{Kind: Read}, Output{Map: "baa"}, 40, 50),
		}, porcupine.Ok},
		{"ReadMissesTheBooking", []porcupine.Operation{
			op(0, hold(1, 0), ok, 0, 10),
			op(0, Input{Kind: Confirm, Hold: 1, Seats: []int{0}}, ok, 20, 30),
			op(1, Input{Kind: Read}, Output{Map: "haa"}, 40, 50),
		}, porcupine.Illegal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			Unanswered(tc.history)
			if got := Check(tc.history, 3, 10*time.Second); got != tc.want {
				t.Errorf("Check = %s, want %s", got, tc.want)
			}
		})
	}
}
