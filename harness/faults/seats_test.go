//go:build faults

package faults

import (
	"encoding/json"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/shop-example/shop/internal/seats/seatcheck"
)

// seatLog records the seat rush's holds and confirms as porcupine
// operations, for the linearizability check of the seat map under faults
// 1, 2 and 4 (package seatcheck's model). The hold TTL is the default
// 5 minutes, longer than a scenario: no hold expires while it is recorded.
type seatLog struct {
	base time.Time
	next atomic.Uint32 // hold numbers
	mu   sync.Mutex
	ops  []porcupine.Operation
}

func newSeatLog() *seatLog { return &seatLog{base: time.Now()} }

// since is a time on the log's one monotonic clock.
func (l *seatLog) since() int64 { return int64(time.Since(l.base)) }

func (l *seatLog) add(in seatcheck.Input, r reply, call int64) {
	op := porcupine.Operation{ClientId: int(in.Hold), Input: in, Output: seatOutput(r), Call: call, Return: l.since()}
	l.mu.Lock()
	l.ops = append(l.ops, op)
	l.mu.Unlock()
}

// seatOutput is what an answer says happened. No answer, a 5xx (the work
// may have committed before the answer failed) or the key still in
// progress on another replica leave it unknown.
func seatOutput(r reply) seatcheck.Output {
	switch {
	case r.status == 0 || r.status >= 500 || r.code == "request_in_progress":
		return seatcheck.Output{Unknown: true}
	case r.status == http.StatusOK || r.status == http.StatusCreated:
		return seatcheck.Output{OK: true}
	}
	out := seatcheck.Output{Code: r.code}
	if r.code == "seat_unavailable" {
		var p struct {
			Seats []string `json:"seats"`
		}
		if json.Unmarshal(r.body, &p) == nil {
			for _, s := range p.Seats {
				out.Taken = append(out.Taken, seatIndex(s))
			}
		}
	}
	return out
}

// seatIndex is a hall seat's index in the model's seat map.
func seatIndex(label string) int {
	if len(label) < 2 {
		return -1
	}
	n := 0
	for _, d := range label[1:] {
		n = n*10 + int(d-'0')
	}
	return int(label[0]-'A')*hallSeatsPerRow + n - 1
}

// check checks the history; an operation without an answer may have
// happened at any time after its call.
func (l *seatLog) check(limit time.Duration) (porcupine.CheckResult, int, int) {
	l.mu.Lock()
	ops := append([]porcupine.Operation(nil), l.ops...)
	l.mu.Unlock()
	unknown := 0
	for _, op := range ops {
		if op.Output.(seatcheck.Output).Unknown {
			unknown++
		}
	}
	seatcheck.Unanswered(ops)
	return seatcheck.Check(ops, hallRows*hallSeatsPerRow, limit), len(ops), unknown
}
