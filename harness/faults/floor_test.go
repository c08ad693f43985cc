//go:build faults

package faults

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"
)

// floor is the least useful work a fault leaves possible, judged on the
// answers that arrive while the fault lasts. Every scenario has at least
// one; why says what the fault leaves possible, and so where the floor is.
type floor struct {
	// flows the floor counts; nil counts every flow of the scenario.
	flows []string
	// ofBefore: at least this share of the same flows' useful rate before
	// the fault. Zero, with perClient zero too, is a fault that leaves no
	// work possible; the answers are then judged by the other checks.
	ofBefore float64
	// perClient: at least this many useful answers a second for each
	// client of the flow, for faults whose cost is a wait the service
	// bounds (a gateway timeout, a lock attempt) rather than a share of
	// before.
	perClient float64
	why       string
}

// spec says the floor in a few words: "flash sale, pay storm: order ≥ 50 %
// of before".
func (f floor) spec() string {
	who := "all flows"
	if f.flows != nil {
		who = strings.Join(f.flows, ", ")
	}
	switch {
	case f.perClient > 0:
		return fmt.Sprintf("%s ≥ %.2f/s per client", who, f.perClient)
	case f.ofBefore > 0:
		return fmt.Sprintf("%s ≥ %.0f%% of before", who, 100*f.ofBefore)
	}
	return who + ": none possible"
}

// judge returns what the floor's flows did during the fault against what
// the floor asks, and whether that is enough.
func (f floor) judge(answers []answer, p phases, clients int) (verdict string, ok bool) {
	mine := answers
	if f.flows != nil {
		mine = nil
		for _, a := range answers {
			if slices.Contains(f.flows, a.flow) {
				mine = append(mine, a)
			}
		}
	}
	before, during := split(mine, p.start, p.faultAt).rate(), split(mine, p.faultAt, p.healAt).rate()
	switch {
	case f.perClient > 0:
		want := f.perClient * float64(clients)
		return fmt.Sprintf("%s: %.1f/s (want %.1f/s)", f.spec(), during, want), during >= want
	case f.ofBefore > 0:
		got := 0.0
		if before > 0 {
			got = during / before
		}
		return fmt.Sprintf("%s: %.0f%%", f.spec(), 100*got), before > 0 && got >= f.ofBefore
	}
	return fmt.Sprintf("%s (%.1f/s)", f.spec(), during), true
}

// phases are the times a scenario's run is split at.
type phases struct {
	start, faultAt, healAt, end time.Time
}

// strictCheck judges strict mode's promise while the lock's quorum is
// unreachable: no request of flows sent during the fault is done (a 2xx
// other than a replay of an answer given before), and every request the
// lock refused is answered 503 unavailable with Retry-After: as many such
// answers as the replicas counted refusals (lockRefused).
func strictCheck(answers []answer, flows []string, p phases, lockRefused int) (verdict string, ok bool) {
	var sent, done, refused int
	for _, a := range answers {
		if !slices.Contains(flows, a.flow) {
			continue
		}
		if a.status == http.StatusServiceUnavailable && a.code == "unavailable" && a.retry {
			refused++
		}
		if a.sent().Before(p.faultAt) || !a.sent().Before(p.healAt) {
			continue
		}
		sent++
		if a.status >= 200 && a.status < 300 && !a.replayed {
			done++
		}
	}
	verdict = fmt.Sprintf("%s: %d of %d sent during the fault done; %d answered 503 with Retry-After, %d refused by the lock",
		strings.Join(flows, ", "), done, sent, refused, lockRefused)
	return verdict, sent > 0 && done == 0 && refused > 0 && refused == lockRefused
}
