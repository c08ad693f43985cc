package app_test

import (
	"bufio"
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shop-example/shop/harness/ablation"
	"github.com/shop-example/shop/harness/apptest"
	"github.com/shop-example/shop/harness/testenv"
	"github.com/shop-example/shop/harness/variants"
	"github.com/shop-example/shop/internal/app"
	"github.com/shop-example/shop/internal/notify"
	"github.com/shop-example/shop/internal/orders"
	"github.com/shop-example/shop/internal/platform/layers"
	"github.com/shop-example/shop/internal/platform/outbox"
)

// The ablation matrices of the events after the commit (package ablation:
// FulfilOrder, MailReceipt). The orders are paid with every layer of the
// pay flow on; the rows take layers off the consumers only
// (app.EventDeps.Consumers), or take the outbox away from the pay flow.
// The copies of an event are published to its stream by the test, as a
// broker redelivers what it holds no acknowledgement of: after a consumer
// crashed with deliveries in hand, or a failover lost the acknowledgements.

func TestAblation_FulfilOrder(t *testing.T) {
	const n, copies = 16, 6
	testenv.Matrix(t, ablation.FulfilOrder(), ablation.Scenario{
		Text: fmt.Sprintf("%d orders paid over two replicas; then each order.paid is published %d times more, the copies of one event side by side in the stream, "+
			"to the fulfilment consumers of two replicas (four per replica), which start once every copy is in. Invariant: each paid order is shipped exactly once.", n, copies),
		Counted:      fmt.Sprintf("shipments beyond one per order, of %d orders", n),
		Progress:     fmt.Sprintf("orders fulfilled, of %d paid", n),
		ProgressWant: n,
	}, func(t *testing.T, row ablation.Row, probe *layers.Probe) testenv.Outcome {
		e := apptest.NewWith(t, 2, map[string]string{"SHOP_LOCK_MODE": "strict"},
			app.Deps{Events: app.EventDeps{Consumers: variants.For(row.Layers, "", probe)}})
		if !row.Layers.On(layers.Constraint) {
			e.Drop(t, orders.ConstraintFulfilledOnce)
		}
		paid := paidOrders(t, e, "ABL-SHIP", n)
		published := republish(t, e, outbox.OrderPaid, copies)
		probe.Reset()
		runEvents(t, e)
		// Every copy, and the relay's own publish of each event, handled.
		waitConsumed(t, e, orders.ConsumerFulfilment, published+n, 30*time.Second)
		shipments := e.Count(t, `SELECT count(*) FROM fulfilments`)
		shipped := e.Count(t, `SELECT count(DISTINCT order_id) FROM fulfilments`)
		fulfilled := e.Count(t, `SELECT count(*) FROM orders WHERE id = ANY($1) AND status = 'fulfilled'`, paid)
		t.Logf("%d copies published: %d shipments of %d orders, %d orders fulfilled", published, shipments, shipped, fulfilled)
		return testenv.Outcome{Violations: shipments - shipped, Progress: min(shipped, fulfilled)}
	})
}

func TestAblation_MailReceipt(t *testing.T) {
	const n, waves = 12, 3
	testenv.Matrix(t, ablation.MailReceipt(), ablation.Scenario{
		Text: fmt.Sprintf("%d orders paid over two replicas (each pay request sent three times at once), their receipts sent by the mail consumers of both; "+
			"then every order.paid the outbox holds is published again, %d times, a wave at a time, each after the provider forgot the keys of the last "+
			"(SHOP_MAILER_KEY_TTL 1 ms, for a day at most providers). Invariant: one receipt per paid order.", n, waves),
		Counted:      fmt.Sprintf("receipts missing or sent more than once, of %d paid orders", n),
		Progress:     fmt.Sprintf("paid orders with their receipt, of %d", n),
		ProgressWant: n,
	}, func(t *testing.T, row ablation.Row, probe *layers.Probe) testenv.Outcome {
		deps := app.Deps{Events: app.EventDeps{Consumers: variants.For(row.Layers, "", probe)}}
		var publishes atomic.Int64
		if row.Variant == ablation.PublishAfterCommit {
			deps.Events.PublishAfterCommit = true
			// A process killed between its commit and its publish, once
			// in three.
			deps.Events.Lost = func() bool { return publishes.Add(1)%3 == 0 }
		}
		e := apptest.NewWith(t, 2, map[string]string{"SHOP_MAILER_KEY_TTL": "1ms"}, deps)
		runEvents(t, e)
		probe.Reset()
		paid := paidOrders(t, e, "ABL-MAIL", n)
		first := waitConsumed(t, e, notify.Consumer, len(paid), 10*time.Second)
		for range waves {
			// Past the provider's memory of the last wave's keys.
			time.Sleep(50 * time.Millisecond)
			first = waitConsumed(t, e, notify.Consumer, first+republish(t, e, outbox.OrderPaid, 1), 10*time.Second)
		}
		total, missing, extra := receipts(e.Mailer, paid)
		t.Logf("%d receipts for %d paid orders (%d missing, %d extra); %d events in the outbox, %d publishes after a commit (a third dropped)",
			total, len(paid), missing, extra, e.Count(t, `SELECT count(*) FROM watermill_outbox`), publishes.Load())
		return testenv.Outcome{Violations: missing + extra, Progress: len(paid) - missing}
	})
}

// republish publishes copies of every event named name the outbox holds,
// the copies of one event one after the other and all of them in one
// MULTI, and returns how many it published.
func republish(t *testing.T, e *apptest.Env, name string, copies int) int {
	t.Helper()
	ctx := context.Background()
	stored, err := outbox.Stored(ctx, e.DB, name)
	if err != nil {
		t.Fatal(err)
	}
	var events []outbox.Event
	for _, ev := range stored {
		for range copies {
			events = append(events, ev)
		}
	}
	if err := e.R(0).App.Relay().PublishAtOnce(ctx, events...); err != nil {
		t.Fatalf("publish copies: %v", err)
	}
	return len(events)
}

// waitConsumed waits until the replicas have handled at least want
// deliveries for consumer (shop_events_consumed_total, every outcome), or
// until nothing more has been handled for three seconds, at most within. It
// returns how many they handled.
func waitConsumed(t *testing.T, e *apptest.Env, consumer string, want int, within time.Duration) int {
	t.Helper()
	got, last, lastChange := 0, -1, time.Now()
	for end := time.Now().Add(within); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		got = 0
		for _, r := range e.Replicas {
			got += consumedBy(t, r, consumer)
		}
		if got != last {
			last, lastChange = got, time.Now()
		}
		if got >= want || time.Since(lastChange) > 3*time.Second {
			return got
		}
	}
	return got
}

// consumedBy sums a replica's shop_events_consumed_total of consumer.
func consumedBy(t *testing.T, r *apptest.Replica, consumer string) int {
	t.Helper()
	n := 0
	sc := bufio.NewScanner(strings.NewReader(apptest.Scrape(t, r)))
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "shop_events_consumed_total{") || !strings.Contains(line, `consumer="`+consumer+`"`) {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			t.Fatalf("metric %q: %v", line, err)
		}
		n += int(v)
	}
	return n
}
