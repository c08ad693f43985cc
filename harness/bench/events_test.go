package bench

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/shop-example/shop/harness/mailer"
	"github.com/shop-example/shop/harness/testenv"
)

// TestEvents_SmallRun runs `shop bench events` at a tiny size: both
// drains and the paced phase, each with replicas of the real service and
// the mailer in process. Every check holds, and each holds with work
// shown: every event of every phase was committed, published, fulfilled
// and mailed, at moments in that order, and the paced phase's lags were
// taken from events committed in its window.
func TestEvents_SmallRun(t *testing.T) {
	dbURL, redis := testenv.DatabaseURL(t), testenv.RedisAddrs(t)
	o, err := parseBenchFlags("events", []string{
		"-db", dbURL, "-redis", strings.Join(redis, ","),
		"-events", "30", "-rate", "60", "-duration", "300ms", "-warmup", "100ms", "-clients", "4",
	})
	if err != nil {
		t.Fatal(err)
	}
	run, err := runEventsBench(context.Background(), o, quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	if bad := run.violations(); len(bad) > 0 {
		t.Errorf("checks failed: %q", bad)
	}
	if got, want := run.rowNames(), eventRowNames(); !slices.Equal(got, want) {
		t.Errorf("rows %q, want %q", got, want)
	}
	if len(run.drains) != len(eventDrainReplicas) || run.paced == nil {
		t.Fatalf("%d drains and paced %v, want %d and a paced phase", len(run.drains), run.paced != nil, len(eventDrainReplicas))
	}
	for _, ph := range run.phases() {
		if ph.tally.orders == 0 || len(ph.events) != ph.tally.orders {
			t.Errorf("%s: %d orders paid, %d events followed", ph.name, ph.tally.orders, len(ph.events))
		}
		for i, e := range ph.events {
			published, fulfilled, mailed := e.time(stepPublished), e.time(stepFulfilled), e.time(stepMailed)
			if e.committed.IsZero() || published.Before(e.committed) || fulfilled.Before(published) || mailed.Before(published) ||
				e.time(stepConsumed) != maxTime(fulfilled, mailed) {
				t.Errorf("%s: event %d: committed %v, published %v, fulfilled %v, mailed %v", ph.name, i, e.committed, published, fulfilled, mailed)
				break
			}
		}
	}
	for _, d := range run.drains {
		if d.tally.orders != o.events || !d.start.Before(d.last(stepConsumed)) {
			t.Errorf("%s: %d orders, consumed %v after its start", d.name, d.tally.orders, d.last(stepConsumed).Sub(d.start))
		}
	}
	p := run.paced
	for i, s := range eventLagSteps {
		if lags := p.lags(step(i), p.from, p.to); len(lags) == 0 || lags[0] < 0 {
			t.Errorf("paced/%s: lags %v, want some, none negative", s, lags)
		}
	}
	if p.writer.inWindow == 0 {
		t.Error("paced: no payment ended in the window")
	}
}

// TestEventTally_Violations: each way a phase can break, whether one of
// its orders was announced, fulfilled or mailed twice or not at all, fails
// the checks, and the tally of a clean phase passes them.
func TestEventTally_Violations(t *testing.T) {
	clean := func() eventTally {
		return eventTally{orders: 3, payFailures: map[string]int{}, rows: 3, published: 3, copies: 3, fulfilled: 3, fulfilments: 3,
			inbox: map[string]int{"fulfilment": 3, "mailer": 3}, processed: map[string]int{"fulfilment": 3, "mailer": 3}, receipts: 3}
	}
	receipt := func(order string) mailer.Message { return mailer.Message{Reference: order, Kind: mailer.KindReceipt} }
	tests := []struct {
		name   string
		mutate func(*eventTally)
		want   string // in a violation; "" for none
	}{
		{"clean", func(*eventTally) {}, ""},
		{"nothing paid", func(t *eventTally) { *t = eventTally{} }, "no order was paid"},
		{"a payment failed", func(t *eventTally) { t.payFailures["sqlstate 40001"] = 1 }, "payments failed"},
		{"an event written twice", func(t *eventTally) { t.rows = 4 }, "4 order.paid rows"},
		{"an event never published", func(t *eventTally) { t.published = 2 }, "2 events in the stream"},
		{"an order not fulfilled", func(t *eventTally) { t.fulfilled, t.fulfilments = 2, 2 }, "2 orders fulfilled"},
		{"an event not in an inbox", func(t *eventTally) { t.inbox["mailer"] = 2 }, "2 events in the inbox of mailer"},
		{"an event processed twice", func(t *eventTally) { t.processed["fulfilment"] = 4 }, "4 deliveries processed by fulfilment"},
		{"a delivery given up", func(t *eventTally) { t.failed = 1 }, "1 deliveries failed for good"},
		{"a second receipt", func(t *eventTally) {
			t.receipts, t.missing, t.extra = 0, 0, 0
			t.tallyReceipts([]mailer.Message{receipt("a"), receipt("b"), receipt("b"), receipt("c"), {Reference: "c", Kind: mailer.KindTicket}}, []string{"a", "b", "c"})
		}, "1 receipts beyond"},
		{"a receipt missing", func(t *eventTally) {
			t.receipts, t.missing, t.extra = 0, 0, 0
			t.tallyReceipts([]mailer.Message{receipt("a"), receipt("b"), receipt("b")}, []string{"a", "b", "c"})
		}, "1 orders without a receipt"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tally := clean()
			tt.mutate(&tally)
			bad := tally.violations()
			if tt.want == "" {
				if len(bad) > 0 || !strings.HasSuffix(tally.String(), ": holds") {
					t.Errorf("violations %q, line %q; want none", bad, tally)
				}
				return
			}
			if !strings.Contains(strings.Join(bad, "; "), tt.want) || !strings.Contains(tally.String(), "BROKEN") {
				t.Errorf("violations %q, line %q; want one saying %q", bad, tally, tt.want)
			}
		})
	}
}
